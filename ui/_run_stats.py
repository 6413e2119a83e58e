"""What the run page plots and tabulates: score over iterations, per-operator and per-model outcomes,
the (operator, model) arms, and the MAP-Elites grid of the behaviour descriptors.

All computed from `AgentColumns` with numpy; "improved" means the child's search score beats its
(first) parent's; a proposal is an agent with iteration > 0; the valid rate counts evaluated
proposals among the finished ones (evaluated or invalid).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cambrian.archive.lineage import improves
from cambrian.ui._columns import AgentColumns

#: The most points the score plot carries; beyond it the ordinary evaluated points are sampled evenly
#: (every improvement on the best, every invalid one up to the cap, and the seed always stay).
MAX_PLOT_POINTS = 20_000


def parent_scores(columns: AgentColumns) -> np.ndarray:
    """Each agent's parent's search score (NaN for a root or an unscored parent)."""
    rows = np.searchsorted(columns.ids, columns.parent_ids)
    rows = np.minimum(rows, max(len(columns) - 1, 0))
    if len(columns) == 0:
        return np.empty(0)
    found = (columns.parent_ids >= 0) & (columns.ids[rows] == columns.parent_ids)
    return np.where(found, columns.scores[rows], np.nan)


def best_so_far(columns: AgentColumns) -> tuple[list[int], list[float], list[int]]:
    """(iterations, best score up to it, agent id holding it) at each step where the best rose, in id order."""
    best = -math.inf
    steps: tuple[list[int], list[float], list[int]] = ([], [], [])
    for row in np.flatnonzero(~np.isnan(columns.scores) & _evaluated(columns)):
        score = float(columns.scores[row])
        if score > best:
            best = score
            steps[0].append(int(columns.iterations[row]))
            steps[1].append(score)
            steps[2].append(int(columns.ids[row]))
    return steps


def _evaluated(columns: AgentColumns) -> np.ndarray:
    return np.fromiter((s == "evaluated" for s in columns.statuses), dtype=bool, count=len(columns))


def score_points(columns: AgentColumns, *, max_points: int = MAX_PLOT_POINTS) -> dict[str, Any]:
    """The score plot's data as columns (JSON-ready): id, iteration, score (None when unscored), status,
    operator, model, reason, parent; `total` agents and `shown` of them (sampled past max_points)."""
    n = len(columns)
    keep = np.arange(n)
    if n > max_points:
        improved = np.zeros(n, dtype=bool)
        improved[[columns.row_of(i) for i in best_so_far(columns)[2]]] = True
        must = np.flatnonzero(improved | (columns.iterations == 0))
        rest = np.flatnonzero(~improved & (columns.iterations != 0))
        room = max(max_points - len(must), 0)
        step = max(len(rest) / room, 1.0) if room else math.inf
        sampled = rest[(np.arange(int(len(rest) / step)) * step).astype(np.int64)] if room else rest[:0]
        keep = np.union1d(must, sampled)
    return {
        "total": n,
        "shown": int(len(keep)),
        "id": columns.ids[keep].tolist(),
        "iteration": columns.iterations[keep].tolist(),
        "score": [None if math.isnan(v) else v for v in columns.scores[keep].tolist()],
        "status": [columns.statuses[i] for i in keep],
        "operator": [columns.operators[i] for i in keep],
        "model": [columns.models[i] or "—" for i in keep],
        "reason": [columns.reasons[i] for i in keep],
        "parent": columns.parent_ids[keep].tolist(),
    }


@dataclass(frozen=True)
class OutcomeRow:
    """Proposals of one operator, model or (operator, model) arm. Rates in [0, 1], None with nothing finished."""

    key: tuple[str, ...]
    proposals: int
    evaluated: int
    invalid: int
    pending: int  # proposed, evaluating or failed (retried)
    improved: int
    tokens: int
    cost_usd: float
    mean_gain: float | None  # mean gain above the parent (0 within rounding) over finished proposals, invalid 0
    best_score: float | None
    fm_seconds: float = 0.0  # wall seconds of the FM calls that made these proposals

    @property
    def gain_per_fm_minute(self) -> float | None:
        """Improvement over the parents (clipped at 0, summed) per minute of FM time: what the bandit learns."""
        finished = self.evaluated + self.invalid
        if not finished or self.mean_gain is None or self.fm_seconds <= 0:
            return None
        return self.mean_gain * finished / (self.fm_seconds / 60.0)

    @property
    def valid_rate(self) -> float | None:
        finished = self.evaluated + self.invalid
        return self.evaluated / finished if finished else None

    @property
    def improvement_rate(self) -> float | None:
        finished = self.evaluated + self.invalid
        return self.improved / finished if finished else None


def outcome_table(columns: AgentColumns, keys: Sequence[str]) -> list[OutcomeRow]:
    """One row per distinct value of `keys` (a tuple of "operator" and/or "model") over the proposals.

    Grouped with numpy (one code per distinct key, then bincount per column): milliseconds at 100k agents.
    """
    proposals = np.flatnonzero(columns.iterations > 0)
    if not len(proposals):
        return []
    codes = np.zeros(len(proposals), dtype=np.int64)
    names_per_key = []
    for k in keys:  # a code per distinct value of each key, combined: the distinct tuples in sorted order
        values = columns.operators if k == "operator" else [model or "—" for model in columns.models]
        first_seen: dict[str, int] = {}  # a dict, not np.unique: sorting 100k Python strings takes 40 ms
        seen = np.fromiter(
            (first_seen.setdefault(values[row], len(first_seen)) for row in proposals.tolist()),
            dtype=np.int64,
            count=len(proposals),
        )
        names = sorted(first_seen)
        rank = np.empty(len(names), dtype=np.int64)
        rank[[first_seen[name] for name in names]] = np.arange(len(names))
        codes = codes * len(names) + rank[seen]
        names_per_key.append(names)
    combined, codes = np.unique(codes, return_inverse=True)
    codes = codes.reshape(-1)
    distinct: list[tuple[str, ...]] = []
    for value in combined.tolist():
        parts: list[str] = []
        for names in reversed(names_per_key):
            value, index = divmod(value, len(names))
            parts.insert(0, str(names[index]))
        distinct.append(tuple(parts))
    groups = len(distinct)

    def count(mask: np.ndarray) -> np.ndarray:
        return np.bincount(codes[mask], minlength=groups)

    def total(values: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
        chosen = slice(None) if mask is None else mask
        return np.bincount(codes[chosen], weights=values[chosen], minlength=groups)

    status = [columns.statuses[row] for row in proposals.tolist()]
    evaluated = np.fromiter((value == "evaluated" for value in status), dtype=bool, count=len(status))
    invalid = np.fromiter((value == "invalid" for value in status), dtype=bool, count=len(status))
    scores = columns.scores[proposals]
    parents = parent_scores(columns)[proposals]
    improved = evaluated & improves(scores, parents)  # NaN (unscored, no parent) never improves
    gains_each = np.where(improved, scores - parents, 0.0)  # rounding above the parent is no gain
    scored = evaluated & ~np.isnan(scores)
    best = np.full(groups, -np.inf)
    np.maximum.at(best, codes[scored], scores[scored])
    n_rows, n_evaluated, n_invalid = count(np.ones(len(proposals), dtype=bool)), count(evaluated), count(invalid)
    n_improved = count(improved)
    gains = total(gains_each, evaluated)
    tokens = total(columns.tokens[proposals].astype(np.float64))
    cost = total(columns.cost_usd[proposals])
    fm_seconds = total(columns.fm_seconds[proposals])
    table = []
    for code, label in enumerate(distinct):
        finished = int(n_evaluated[code] + n_invalid[code])
        table.append(
            OutcomeRow(
                key=label,
                proposals=int(n_rows[code]),
                evaluated=int(n_evaluated[code]),
                invalid=int(n_invalid[code]),
                pending=int(n_rows[code] - finished),
                improved=int(n_improved[code]),
                tokens=int(round(tokens[code])),
                cost_usd=float(cost[code]),
                mean_gain=float(gains[code]) / finished if finished else None,
                best_score=float(best[code]) if np.isfinite(best[code]) else None,
                fm_seconds=float(fm_seconds[code]),
            )
        )
    return table


@dataclass(frozen=True)
class EliteGrid:
    """The MAP-Elites view of two descriptor axes: the best score per cell (None where empty)."""

    x_name: str
    y_name: str
    x_edges: list[float]
    y_edges: list[float]
    best: list[list[float | None]]  # [y cell][x cell]
    agent: list[list[int | None]]  # the elite's id per cell
    count: list[list[int]]  # agents per cell
    names: list[str]  # every descriptor name the run has


def elite_grid(
    descriptors: dict[int, dict[str, float]],
    scores: dict[int, float],
    *,
    cells: int = 20,
    x_name: str | None = None,
    y_name: str | None = None,
) -> EliteGrid | None:
    """The grid over two descriptor axes (the first two names, or those given), `cells` bins each over
    the observed range; None when the run has no descriptors."""
    names = sorted({name for features in descriptors.values() for name in features})
    if not names:
        return None
    x_name = x_name if x_name in names else names[0]
    y_name = y_name if y_name in names else (names[1] if len(names) > 1 else names[0])
    ids = [i for i, f in descriptors.items() if x_name in f and y_name in f and i in scores]
    xs = np.array([descriptors[i][x_name] for i in ids], dtype=np.float64)
    ys = np.array([descriptors[i][y_name] for i in ids], dtype=np.float64)
    n_y = cells if y_name != x_name else 1
    x_edges = _edges(xs, cells)
    y_edges = _edges(ys, n_y)
    best: list[list[float | None]] = [[None] * cells for _ in range(n_y)]
    agent: list[list[int | None]] = [[None] * cells for _ in range(n_y)]
    count = [[0] * cells for _ in range(n_y)]
    x_cells = np.clip(np.searchsorted(x_edges, xs, side="right") - 1, 0, cells - 1)
    y_cells = np.clip(np.searchsorted(y_edges, ys, side="right") - 1, 0, n_y - 1)
    for agent_id, cx, cy in zip(ids, x_cells.tolist(), y_cells.tolist()):
        count[cy][cx] += 1
        current = best[cy][cx]
        if current is None or scores[agent_id] > current:
            best[cy][cx], agent[cy][cx] = scores[agent_id], agent_id
    return EliteGrid(x_name, y_name, x_edges.tolist(), y_edges.tolist(), best, agent, count, names)


def _edges(values: np.ndarray, cells: int) -> np.ndarray:
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    if high <= low:
        high = low + 1.0
    return np.linspace(low, high, cells + 1)
