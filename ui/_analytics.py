"""Run analytics the pages plot: where the budget went, and runs compared per unit of budget.

Pure reads over an open (read-only) `Archive`; each function returns a JSON-able dict of columns
(lists of numbers or strings, one entry per point), ready for plotly. Aggregation happens in SQL
(the times come back as POSIX seconds, computed by the database) and in numpy, so a 100k-agent
run costs one pass over its rows, not 100k Python objects.

- `budget`: tokens and USD by model, operator and purpose, in total and cumulative over time;
  evaluations finished per minute, sandbox occupancy and FM calls in flight over time.
- `compare_runs`: best score so far against proposals, tokens and USD, one series per run.

The third panel, the 2-D map of the search space, is `_search_space.search_space`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import numpy as np
from sqlalchemy import Integer, Table, case, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

from cambrian.archive.models import Agent, AgentStatus, Evaluation, LLMCall
from cambrian.archive.store import Archive
from cambrian.ui._columns import float_matrix, posix_seconds_sql

__all__ = ["budget", "compare_runs"]

_AGENT: Table = Agent.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
_CALL: Table = LLMCall.__table__  # type: ignore[attr-defined]  # as above
_EVALUATION: Table = Evaluation.__table__  # type: ignore[attr-defined]  # as above

#: The operator a call counts under when no agent is attributed (e.g. a proposal that never became one).
UNATTRIBUTED = "unattributed"


def _edge_index(seconds: ColumnElement[Any], origin: float, width_s: float, dialect: str) -> ColumnElement[Any]:
    """SQL for the index k of the first bin edge origin + k * width_s at or after `seconds` (0 at or before
    the origin; not capped at the last edge)."""
    position = (seconds - origin) / width_s
    if dialect == "sqlite":  # CAST truncates there, and ceil() exists only where SQLite has its math functions
        whole = cast(position, Integer)
        return case((position <= 0, 0), else_=whole + case((position > whole, 1), else_=0))
    return case((position <= 0, 0), else_=cast(func.ceil(position), Integer))


def _slots(config_json: str) -> tuple[int | None, int | None]:
    """(sandbox slots, FM slots) from a run's frozen config: evaluation.concurrency, fm.concurrency."""
    try:
        config = json.loads(config_json)
        evaluation, fm = config.get("evaluation") or {}, config.get("fm") or {}
        sandbox, calls = evaluation.get("concurrency"), fm.get("concurrency")
    except (ValueError, AttributeError):  # a config this code cannot read: no capacity line on the plot
        return None, None
    return (sandbox if isinstance(sandbox, int) else None), (calls if isinstance(calls, int) else None)


def _busy_integral(starts: np.ndarray, ends: np.ndarray, moments: np.ndarray) -> np.ndarray:
    """For each moment t: the seconds of interval time before t, sum_i |[start_i, end_i] ∩ (-inf, t]|.

    Its difference over a bin divided by the bin width is the mean number of intervals open in the bin.
    """
    starts, ends = np.sort(starts), np.sort(ends)
    started_sum = np.concatenate([[0.0], np.cumsum(starts)])
    ended_sum = np.concatenate([[0.0], np.cumsum(ends)])
    n_started = np.searchsorted(starts, moments, side="right")
    n_ended = np.searchsorted(ends, moments, side="right")
    return (n_started * moments - started_sum[n_started]) - (n_ended * moments - ended_sum[n_ended])


def _mean_open(starts: np.ndarray, ends: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Per bin between consecutive `edges`: the mean number of the intervals [start, end] open in it (>= 0)."""
    return np.maximum(np.diff(_busy_integral(starts, ends, edges)) / np.diff(edges), 0.0)


def _by_group(rows: Sequence[Any], column: int, bins: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Totals per name in `column` of the grouped ledger rows (largest cost first, then most tokens, then
    name), and each name's cumulative tokens and USD at the bin edges.

    rows: (model, purpose, operator, edge index, calls, prompt tokens, completion tokens, USD).
    """
    sums: dict[str, np.ndarray] = {}  # name -> [calls, prompt, completion, usd]
    at_edge: dict[str, np.ndarray] = {}  # name -> (bins + 1) x [tokens, usd] added at each edge
    for row in rows:
        name, k = str(row[column]), min(int(row[3]), bins)
        values = np.array([row[4], row[5] or 0, row[6] or 0, row[7] or 0.0], dtype=np.float64)
        sums.setdefault(name, np.zeros(4))[:] += values
        added = at_edge.setdefault(name, np.zeros((bins + 1, 2)))
        added[k] += (values[1] + values[2], values[3])
    ranked = sorted(sums, key=lambda name: (-sums[name][3], -(sums[name][1] + sums[name][2]), name))
    totals = [
        {
            "name": name,
            "calls": int(sums[name][0]),
            "prompt_tokens": int(sums[name][1]),
            "completion_tokens": int(sums[name][2]),
            "cost_usd": float(sums[name][3]),
        }
        for name in ranked
    ]
    series = {}
    for name in ranked:
        cumulative = np.cumsum(at_edge[name], axis=0)
        series[name] = {"tokens": cumulative[:, 0].tolist(), "cost_usd": cumulative[:, 1].tolist()}
    return totals, series


def budget(archive: Archive, run_id: int, *, bins: int = 120) -> dict[str, Any]:
    """Where a run's FM budget and sandbox time went, in totals and over time.

    Times are minutes since the run's first agent was stored (`origin`, POSIX seconds). The run's
    span (origin to the last moment any stored call, evaluation or agent change happened) is cut
    into `bins` (>= 1) equal bins; `over_time.minutes` and `timeline.minutes` hold the bin edges
    (bins + 1 values) and `timeline.bin_minutes` the width.

    - `totals`: calls, prompt_tokens, completion_tokens, cost_usd (USD) of the run's whole ledger.
    - `by_model`, `by_operator`, `by_purpose`: the same per name, largest cost first. A call counts
      under the operator of the agent it is attributed to (`LLMCall.agent_id`), else "unattributed".
    - `over_time.by_model|by_operator|by_purpose`: name -> cumulative `tokens` (prompt + completion)
      and `cost_usd` of the calls that ended (created_at) at or before each bin edge.
    - `timeline`, per bin: `evaluations_per_minute` (task evaluations that finished in the bin, per
      minute), `sandbox_busy` (mean number of task evaluations running, each over [created_at -
      duration_s, created_at]) and `fm_busy` (mean FM calls in flight, each over [created_at -
      latency_s, created_at]); `sandbox_slots` and `fm_slots` are the run's configured concurrency
      (None if unknown), `sandbox_utilisation` / `fm_utilisation` the busy time over slots x span,
      in [0, 1] (None if the slots are unknown).
    """
    bins = max(1, int(bins))
    run = archive.get_run(run_id)
    dialect = archive.engine.dialect.name
    a, c, e = _AGENT.c, _CALL.c, _EVALUATION.c
    call_query = select(c.latency_s, posix_seconds_sql(c.created_at, dialect)).where(c.run_id == run_id)
    evaluation_query = (
        select(e.duration_s, posix_seconds_sql(e.created_at, dialect))
        .select_from(_EVALUATION.join(_AGENT, a.id == e.agent_id))
        .where(a.run_id == run_id)
    )
    agent_span = select(
        func.min(posix_seconds_sql(a.created_at, dialect)), func.max(posix_seconds_sql(a.updated_at, dialect))
    ).where(a.run_id == run_id)
    with archive.engine.connect() as connection:
        latency, call_end = np.nan_to_num(float_matrix(connection, call_query)).T
        duration, evaluation_end = np.nan_to_num(float_matrix(connection, evaluation_query)).T
        first_agent, last_agent = connection.execute(agent_span).one()
        moments = [float(t) for t in (first_agent, last_agent) if t is not None]
        moments += [float(x.min()) for x in (call_end - latency, evaluation_end - duration) if len(x)]
        moments += [float(x.max()) for x in (call_end, evaluation_end) if len(x)]
        origin = float(first_agent) if first_agent is not None else (min(moments) if moments else 0.0)
        end = max([origin, *moments])
        width_s = max(end - origin, 1e-6) / bins
        # The ledger summed per (model, purpose, operator, edge) in SQL: a few hundred rows at any run size.
        operator = func.coalesce(a.operator, UNATTRIBUTED)
        edge = _edge_index(posix_seconds_sql(c.created_at, dialect), origin, width_s, dialect)
        ledger = connection.execute(
            select(
                c.model,
                c.purpose,
                operator,
                edge,
                func.count(),
                func.sum(c.prompt_tokens),
                func.sum(c.completion_tokens),
                func.sum(c.cost_usd),
            )
            .select_from(_CALL.outerjoin(_AGENT, a.id == c.agent_id))
            .where(c.run_id == run_id)
            .group_by(c.model, c.purpose, operator, edge)
        ).all()
    edges = origin + width_s * np.arange(bins + 1)
    edges[-1] = max(end, edges[-1])  # the last edge holds every call and evaluation, whatever the rounding
    (by_model, model_series), (by_purpose, purpose_series), (by_operator, operator_series) = (
        _by_group(ledger, column, bins) for column in range(3)
    )
    # Finished in bin k: created_at in (edge k, edge k+1], the first bin from -inf (nothing is lost).
    finished_upto = np.searchsorted(np.sort(evaluation_end), edges, side="right")
    finished_upto[0] = 0
    finished = np.diff(finished_upto)
    # Seconds from the origin keep the integral's sums small enough for float64 to stay exact to microseconds.
    since = edges - origin
    sandbox_busy = _mean_open(evaluation_end - duration - origin, evaluation_end - origin, since)
    fm_busy = _mean_open(call_end - latency - origin, call_end - origin, since)
    sandbox_slots, fm_slots = _slots(run.config_json)

    def utilisation(busy_s: float, slots: int | None) -> float | None:
        return None if not slots or end <= origin else min(1.0, busy_s / (slots * (end - origin)))

    minutes = ((edges - origin) / 60.0).tolist()
    return {
        "run_id": run_id,
        "origin": origin,
        "span_minutes": (end - origin) / 60.0,
        "totals": {
            "calls": len(call_end),
            "prompt_tokens": sum(row["prompt_tokens"] for row in by_model),
            "completion_tokens": sum(row["completion_tokens"] for row in by_model),
            "cost_usd": float(sum(row["cost_usd"] for row in by_model)),
        },
        "by_model": by_model,
        "by_operator": by_operator,
        "by_purpose": by_purpose,
        "over_time": {
            "minutes": minutes,
            "by_model": model_series,
            "by_operator": operator_series,
            "by_purpose": purpose_series,
        },
        "timeline": {
            "minutes": minutes,
            "bin_minutes": width_s / 60.0,
            "evaluations_per_minute": (finished / (width_s / 60.0)).tolist(),
            "sandbox_busy": sandbox_busy.tolist(),
            "fm_busy": fm_busy.tolist(),
            "sandbox_slots": sandbox_slots,
            "fm_slots": fm_slots,
            "sandbox_utilisation": utilisation(float(np.clip(duration, 0, None).sum()), sandbox_slots),
            "fm_utilisation": utilisation(float(np.clip(latency, 0, None).sum()), fm_slots),
        },
    }


def _progress(label: str, archive: Archive, run_id: int) -> dict[str, Any]:
    """One run's best-so-far curve against proposals, tokens and USD (see `compare_runs`)."""
    run = archive.get_run(run_id)
    a, c = _AGENT.c, _CALL.c
    evaluated_score = case((a.status == AgentStatus.evaluated, a.score), else_=None)
    with archive.engine.connect() as connection:
        agents = float_matrix(
            connection, select(a.id, a.iteration, evaluated_score).where(a.run_id == run_id).order_by(a.id)
        )
        calls = float_matrix(
            connection,
            select(c.agent_id, c.prompt_tokens + c.completion_tokens, c.cost_usd)
            .where(c.run_id == run_id)
            .order_by(c.id),
        )
    ids, seed, score = agents[:, 0].astype(np.int64), agents[:, 1] == 0, agents[:, 2]
    evaluated = ~np.isnan(score)
    score = np.where(evaluated, score, -np.inf)
    best = np.maximum.accumulate(score) if len(score) else score
    proposals = np.cumsum(~seed)

    # The budget spent when agent i exists: the ledger in call order up to the last call attributed to
    # it or to an earlier agent (its proposal and, for agents that call the FM, its evaluation).
    tokens_cum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(calls[:, 1]))])
    usd_cum = np.concatenate([[0.0], np.cumsum(np.nan_to_num(calls[:, 2]))])
    call_agent = np.nan_to_num(calls[:, 0], nan=-1).astype(np.int64)
    last_call = np.zeros(len(ids), dtype=np.int64)  # calls counted so far: an index into the *_cum arrays
    if len(ids) and len(call_agent):
        position = np.minimum(np.searchsorted(ids, call_agent), len(ids) - 1)
        attributed = ids[position] == call_agent
        np.maximum.at(last_call, position[attributed], np.flatnonzero(attributed) + 1)
        last_call = np.maximum.accumulate(last_call)
    spent_tokens, spent_usd = tokens_cum[last_call], usd_cum[last_call]

    # A step series: the agents that raised the best score, then the end of the run at its whole spend.
    previous = np.concatenate([[-np.inf], best[:-1]])
    steps = np.flatnonzero(best > previous)
    series: dict[str, list[Any]] = {
        "agent_id": ids[steps].tolist(),
        "proposals": proposals[steps].tolist(),
        "tokens": spent_tokens[steps].tolist(),
        "cost_usd": spent_usd[steps].tolist(),
        "best": best[steps].tolist(),
    }
    if len(steps):
        series["agent_id"].append(int(ids[-1]))
        series["proposals"].append(int(proposals[-1]))
        series["tokens"].append(float(tokens_cum[-1]))
        series["cost_usd"].append(float(usd_cum[-1]))
        series["best"].append(float(best[-1]))
    best_row = int(np.argmax(score)) if np.isfinite(score).any() else None
    return {
        "label": label,
        "run_id": run_id,
        "run_name": run.name,
        "benchmark": run.benchmark,
        "n_agents": len(ids),
        "n_proposals": int(proposals[-1]) if len(ids) else 0,
        "n_evaluated": int(evaluated.sum()),
        "best_score": None if best_row is None else float(score[best_row]),
        "best_agent_id": None if best_row is None else int(ids[best_row]),
        "tokens": int(tokens_cum[-1]),
        "cost_usd": float(usd_cum[-1]),
        "steps": series,
    }


def compare_runs(entries: Sequence[tuple[str, Archive, int]]) -> dict[str, Any]:
    """Which strategy or model wins per unit of budget: each run's best score so far against three budgets.

    entries: (label, archive, run_id) per run; runs may share an archive. For each run, in agent
    (id) order: `proposals` (agents made by the search, seeds not counted), `tokens` (prompt +
    completion) and `cost_usd` (USD) spent by then, taken from the FM ledger in call order up to
    the last call attributed to that agent or an earlier one. `steps` holds only the agents that
    raised the best score (plot with a horizontal-then-vertical step line), then one last point at
    the run's end: all its proposals and its whole ledger. Also per run: label, run_id, run_name,
    benchmark, n_agents, n_proposals, n_evaluated, best_score, best_agent_id, tokens, cost_usd.
    """
    return {"runs": [_progress(label, archive, run_id) for label, archive, run_id in entries]}
