"""Run analytics the pages plot: where the budget went, the 2-D map of the search space, runs compared.

Pure reads over an open (read-only) `Archive`; each function returns a JSON-able dict of columns
(lists of numbers or strings, one entry per point), ready for plotly. Aggregation happens in SQL
(the times come back as POSIX seconds, computed by the database) and in numpy, so a 100k-agent
run costs one pass over its rows, not 100k Python objects.

- `budget`: tokens and USD by model, operator and purpose, in total and cumulative over time;
  evaluations finished per minute, sandbox occupancy and FM calls in flight over time.
- `search_space`: the agents projected to 2-D (PCA) from their behaviour descriptors or, when the
  run has none, from their code (archive.novelty's hashed character n-gram vectors).
- `compare_runs`: best score so far against proposals, tokens and USD, one series per run.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
from sqlalchemy import Connection, Integer, Select, Table, case, cast, func, select
from sqlalchemy.sql.elements import ColumnElement

from cambrian.archive.models import Agent, AgentDescriptor, AgentStatus, Evaluation, GenomeFile, LLMCall
from cambrian.archive.novelty import CodeEmbedder
from cambrian.archive.store import Archive
from cambrian.ui._columns import posix_seconds_sql

__all__ = ["budget", "compare_runs", "search_space"]

_AGENT: Table = Agent.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
_CALL: Table = LLMCall.__table__  # type: ignore[attr-defined]  # as above
_EVALUATION: Table = Evaluation.__table__  # type: ignore[attr-defined]  # as above
_DESCRIPTOR: Table = AgentDescriptor.__table__  # type: ignore[attr-defined]  # as above
_GENOME_FILE: Table = GenomeFile.__table__  # type: ignore[attr-defined]  # as above

#: The operator a call counts under when no agent is attributed (e.g. a proposal that never became one).
UNATTRIBUTED = "unattributed"
#: Genome hashes per IN (...) list: under SQLite's bound-parameter limit on every version.
_IN_CHUNK = 900


def _numbers(connection: Connection, statement: Select[Any]) -> np.ndarray:
    """The statement's rows as a float64 matrix (rows x selected columns; NULL -> NaN).

    Read from the driver's cursor and converted by numpy in one step, skipping SQLAlchemy's
    per-row processing: ~10x faster at 100k rows. Only for numeric columns: numbers, booleans, times
    turned into POSIX seconds in SQL (`posix_seconds_sql`) and text turned into codes in SQL (CASE).
    """
    result = connection.execute(statement)
    try:
        rows = result.cursor.fetchall()
    finally:
        result.close()
    return np.array(rows, dtype=np.float64).reshape(len(rows), len(statement.selected_columns))


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
        latency, call_end = np.nan_to_num(_numbers(connection, call_query)).T
        duration, evaluation_end = np.nan_to_num(_numbers(connection, evaluation_query)).T
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


def _sample(ids: np.ndarray, scores: np.ndarray, max_points: int) -> np.ndarray:
    """Row indices of at most `max_points` rows in priority order.

    Kept: the best half by score (NaN last; ties: lower id) and rows spread evenly over the others in
    id order, every row when they fit. The order alternates one of the best and one of the spread, so
    a caller that stops early (the code map's genome budget) still keeps both kinds.
    """
    ranked = np.lexsort((ids, -np.nan_to_num(scores, nan=-np.inf)))
    if len(ids) <= max_points:
        best, spread = ranked[: (len(ranked) + 1) // 2], np.sort(ranked[(len(ranked) + 1) // 2 :])
    else:
        best, rest = ranked[: max_points // 2], np.sort(ranked[max_points // 2 :])
        spread = np.unique(rest[np.linspace(0, len(rest) - 1, max_points - len(best)).round().astype(np.int64)])
    order = np.empty(len(best) + len(spread), dtype=np.int64)
    shared = min(len(best), len(spread))
    order[0 : 2 * shared : 2], order[1 : 2 * shared : 2] = best[:shared], spread[:shared]
    order[2 * shared :] = best[shared:] if len(best) > shared else spread[shared:]
    return order


def _project(matrix: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """n x 2 coordinates of the rows of `matrix` by PCA, and each axis's share of the variance in [0, 1];
    zeros where there is nothing to spread (fewer than 2 rows, or no variance).

    ARPACK with a fixed start vector (random_state=0) finds the two components without a full SVD
    (milliseconds at 5000 x 256) and gives the same answer every time; tiny matrices take the full SVD.
    """
    from sklearn.decomposition import PCA  # scikit-learn costs about a second to import: only this view pays it

    coords = np.zeros((len(matrix), 2))
    if len(matrix) < 2 or matrix.shape[1] == 0 or not np.any(matrix.std(axis=0) > 0):
        return coords, [0.0, 0.0]
    components = min(2, matrix.shape[1], len(matrix))
    solver = "arpack" if min(matrix.shape) > components else "full"
    pca = PCA(n_components=components, svd_solver=solver, random_state=0)
    coords[:, :components] = pca.fit_transform(matrix.astype(np.float64))
    shares = [float(v) if math.isfinite(v) else 0.0 for v in pca.explained_variance_ratio_]
    return coords, shares + [0.0] * (2 - components)


def search_space(
    archive: Archive,
    run_id: int,
    *,
    max_points: int = 5000,
    max_genomes: int = 500,
    space: Literal["auto", "behaviour", "code"] = "auto",
) -> dict[str, Any]:
    """The run's agents as points on a 2-D map, so a user sees whether the archive is diverse or collapsed.

    space: "behaviour" projects the evaluated agents' descriptors (archive.descriptors; exactly two
    are the axes as they are, more are standardised and reduced by PCA); "code" projects every agent
    that has code by PCA of archive.novelty.CodeEmbedder's hashed character n-gram vectors of its
    genome (one point per distinct genome, shared by the agents that have it); "auto" takes behaviour
    when at least two agents have at least two descriptors, else code.
    Above `max_points` (>= 1) agents the map keeps the best half by score and spreads the rest evenly
    over the others by id (deterministic). A code map embeds at most `max_genomes` (>= 1) distinct
    genomes (each costs 2-5 ms): beyond that it keeps the agents whose genomes come first, taking
    one of the best and one of the spread in turn. `sampled` says whether agents were left out.

    Returns `projection` ("behaviour" | "code" | "none"), `method` (in words), `axes` (two labels),
    `explained_variance` (each axis's share in [0, 1]; None for raw descriptor axes), `n_agents`
    (agents eligible for the map), `n_points`, `sampled`, `distinct_genomes` (among the points; code
    maps), and `points`, ordered by id: columns `id`, `x`, `y`, `score` (None unless evaluated),
    `status`, `operator`.
    """
    max_points, max_genomes = max(1, int(max_points)), max(1, int(max_genomes))
    archive.get_run(run_id)  # RunNotFound for a wrong id, like the other views
    a, d = _AGENT.c, _DESCRIPTOR.c
    agent_query = select(a.id, a.score, a.genome_hash.is_not(None)).where(a.run_id == run_id).order_by(a.id)
    descriptors_of_run = (
        select(d.agent_id)
        .select_from(_DESCRIPTOR.join(_AGENT, a.id == d.agent_id))
        .where(a.run_id == run_id, a.status == AgentStatus.evaluated)
    )
    with archive.engine.connect() as connection:
        agents = _numbers(connection, agent_query)
        names = (
            [str(n) for n in connection.execute(descriptors_of_run.with_only_columns(d.name).distinct()).scalars()]
            if space != "code"
            else []
        )
        names.sort()
        # The name as its index in `names`, computed in SQL: no text crosses into Python per row.
        name_index = case({name: k for k, name in enumerate(names)}, value=d.name, else_=-1)
        descriptors = (
            _numbers(connection, descriptors_of_run.with_only_columns(d.agent_id, name_index, d.value))
            if names
            else np.zeros((0, 3))
        )
    all_ids = agents[:, 0].astype(np.int64)
    described = np.unique(descriptors[:, 0].astype(np.int64))
    use_behaviour = space == "behaviour" or (space == "auto" and len(names) >= 2 and len(described) >= 2)
    rows = _rows_of(all_ids, described) if use_behaviour else np.flatnonzero(agents[:, 2] > 0)
    n_eligible = len(rows)
    rows = rows[_sample(all_ids[rows], agents[rows, 1], max_points)]

    distinct_genomes: int | None = None
    explained: list[float] | None = None
    axes = ["PC 1", "PC 2"]
    if use_behaviour:
        rows = np.sort(rows)
        ids = all_ids[rows]
        matrix = np.full((len(ids), len(names)), np.nan)
        owners = descriptors[:, 0].astype(np.int64)
        position = np.minimum(np.searchsorted(ids, owners), max(len(ids) - 1, 0))
        mine = ids[position] == owners if len(ids) else np.zeros(len(owners), dtype=bool)
        matrix[position[mine], descriptors[mine, 1].astype(np.int64)] = descriptors[mine, 2]
        if len(names) == 2:
            coords, axes = np.nan_to_num(matrix, nan=0.0), list(names)
            method = f"the descriptors {names[0]} and {names[1]} as they are"
        else:
            with np.errstate(all="ignore"):  # an all-NaN column (no sampled agent has it) -> 0
                means = np.nan_to_num(np.nanmean(matrix, axis=0)) if len(ids) else np.zeros(len(names))
            matrix = np.where(np.isnan(matrix), means[None, :], matrix)
            spread = matrix.std(axis=0) if len(ids) else np.ones(len(names))
            matrix = (matrix - matrix.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
            coords, explained = _project(matrix)
            method = f"PCA of {len(names)} standardised behaviour descriptors ({', '.join(names)})"
        texts = _agent_texts(archive, ids)
    else:
        texts = _agent_texts(archive, all_ids[rows])
        hashes = [texts[int(agent_id)][2] for agent_id in all_ids[rows]]
        kept: dict[str, int] = {}
        for genome in hashes:
            if genome not in kept and len(kept) < max_genomes:
                kept[genome] = len(kept)
        rows = np.array([row for row, genome in zip(rows, hashes) if genome in kept], dtype=np.int64)
        rows = np.sort(rows)
        ids = all_ids[rows]
        unique = sorted(kept)
        distinct_genomes = len(unique)
        embedder = CodeEmbedder()
        # One embedding and one PCA row per distinct genome: agents that share code share a point.
        genome_coords, explained = _project(embedder.embed_many(_genome_files(archive, unique)))
        index = {genome: k for k, genome in enumerate(unique)}
        coords = genome_coords[[index[texts[int(agent_id)][2]] for agent_id in ids]] if len(ids) else np.zeros((0, 2))
        method = f"PCA of the code's hashed character n-gram vectors ({embedder.dim} features, archive.novelty)"
    projection = ("behaviour" if use_behaviour else "code") if len(ids) else "none"
    scores = agents[rows, 1]
    return {
        "run_id": run_id,
        "projection": projection,
        "method": method if len(ids) else "no agent has code or descriptors yet",
        "axes": axes,
        "explained_variance": explained,
        "n_agents": n_eligible,
        "n_points": len(ids),
        "sampled": n_eligible > len(ids),
        "distinct_genomes": distinct_genomes,
        "points": {
            "id": ids.tolist(),
            "x": coords[:, 0].tolist(),
            "y": coords[:, 1].tolist(),
            "score": [None if math.isnan(v) else float(v) for v in scores],
            "status": [texts[int(agent_id)][0] for agent_id in ids],
            "operator": [texts[int(agent_id)][1] for agent_id in ids],
        },
    }


def _rows_of(sorted_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Indices into `sorted_ids` of the values of `wanted` it holds (others skipped)."""
    if not len(sorted_ids):
        return np.zeros(0, dtype=np.int64)
    position = np.minimum(np.searchsorted(sorted_ids, wanted), len(sorted_ids) - 1)
    return position[sorted_ids[position] == wanted]


def _agent_texts(archive: Archive, ids: np.ndarray) -> dict[int, tuple[str, str, str]]:
    """agent id -> (status, operator, genome hash or "") for these agents, read in chunks of ids."""
    a = _AGENT.c
    found: dict[int, tuple[str, str, str]] = {}
    wanted = [int(i) for i in ids]
    with archive.engine.connect() as connection:
        for start in range(0, len(wanted), _IN_CHUNK):
            query = select(a.id, a.status, a.operator, a.genome_hash).where(a.id.in_(wanted[start : start + _IN_CHUNK]))
            for agent_id, status, operator, genome in connection.execute(query):
                found[int(agent_id)] = (str(getattr(status, "value", status)), str(operator), genome or "")
    return found


def _genome_files(archive: Archive, hashes: list[str]) -> list[dict[str, str]]:
    """The files (path -> text) of each genome in `hashes`, in that order."""
    files: dict[str, dict[str, str]] = {h: {} for h in hashes}
    g = _GENOME_FILE.c
    with archive.engine.connect() as connection:
        for start in range(0, len(hashes), _IN_CHUNK):
            query = select(g.genome_hash, g.path, g.text).where(g.genome_hash.in_(hashes[start : start + _IN_CHUNK]))
            for genome, path, text in connection.execute(query):
                files[str(genome)][str(path)] = str(text)
    return [files[h] for h in hashes]


def _progress(label: str, archive: Archive, run_id: int) -> dict[str, Any]:
    """One run's best-so-far curve against proposals, tokens and USD (see `compare_runs`)."""
    run = archive.get_run(run_id)
    a, c = _AGENT.c, _CALL.c
    evaluated_score = case((a.status == AgentStatus.evaluated, a.score), else_=None)
    with archive.engine.connect() as connection:
        agents = _numbers(
            connection, select(a.id, a.iteration, evaluated_score).where(a.run_id == run_id).order_by(a.id)
        )
        calls = _numbers(
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
