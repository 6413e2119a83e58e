"""Lineage arithmetic for `ArchiveView`: parent rows, per-agent counts and their clade sums.

Pure numpy functions over a view's columns, with no knowledge of the view itself: which row
holds each agent's parent, the validated own task counts every row carries (successes,
failures, improved, not improved), and those counts summed over each agent's subtree (its
clade), as HGM reads them. `ArchiveView.from_arrays` uses them to build every derived
lineage column in one vectorised pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Count columns kept per row, own and clade-pooled: successes, failures, improved, not improved.
_N_COUNTS = 4

#: Two scores closer than this, relative to the parent's (at least this much absolute), are one score: a child
#: that computed its parent's circle packing in another order scored 2.2e-16 above it, counted as an improvement
#: by the bandit (where, as the largest reward so far, it was worth the most any arm had earned), the run's
#: summary, the selection's lineage counts and the UI.
SCORE_TOLERANCE = 1e-9


def improves(child: Any, parent: Any) -> Any:
    """Whether a child's score is above its parent's by more than rounding (`SCORE_TOLERANCE`): floats or numpy
    arrays (elementwise); NaN (unscored, no parent) is never an improvement."""
    child, parent = np.asarray(child, dtype=np.float64), np.asarray(parent, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        return (child - parent) > SCORE_TOLERANCE * np.maximum(1.0, np.abs(parent))


def _own_counts(n: int, successes: object, failures: object) -> np.ndarray:
    """n x _N_COUNTS float64 with successes and failures filled (validated: finite, >= 0)."""
    counts = np.zeros((n, _N_COUNTS), dtype=np.float64)
    for column, (label, values) in enumerate((("successes", successes), ("failures", failures))):
        if values is None:
            continue
        array = np.asarray(values, dtype=np.float64)
        if array.shape != (n,) or not np.all(np.isfinite(array)) or np.any(array < 0):
            raise ValueError(f"{label} must be {n} finite numbers >= 0, got {values!r}"[:300])
        counts[:, column] = array
    return counts


def _lineage_rows(ids: np.ndarray, parents: np.ndarray) -> np.ndarray:
    """Row of each row's parent among `ids` (int64), -1 where the parent is absent."""
    n = len(ids)
    if n == 0:
        return np.empty(0, dtype=np.int64)
    sorter = np.argsort(ids, kind="stable")
    pos = np.minimum(np.searchsorted(ids, parents, sorter=sorter), n - 1)
    rows = sorter[pos]
    return np.where(ids[rows] == parents, rows, -1)


def _clade_sums(parent_rows: np.ndarray, own: np.ndarray) -> np.ndarray:
    """Per row, `own` summed over its subtree (itself included), for parents in any row order.

    Depths come from pointer jumping (O(n log depth)); then each depth level, deepest
    first, pushes its sums to its parents, so a level is complete before it is pushed.
    Raises ValueError when the parent links form a cycle.
    """
    n = len(parent_rows)
    if n == 0:
        return own.copy()
    depth = (parent_rows >= 0).astype(np.int64)
    jump = parent_rows.copy()
    for _ in range(n.bit_length() + 1):
        active = np.flatnonzero(jump >= 0)
        if active.size == 0:
            break
        hop = jump[active]
        depth[active] += depth[hop]
        jump[active] = jump[hop]
    else:
        if np.any(jump >= 0):
            raise ValueError("the parent links form a cycle: an agent cannot descend from itself")
    sums = own.copy()
    order = np.argsort(-depth, kind="stable")
    level_starts = np.flatnonzero(np.r_[True, np.diff(depth[order]) != 0])
    for start, stop in zip(level_starts, np.r_[level_starts[1:], n]):
        rows = order[start:stop]
        if depth[rows[0]] == 0:
            break
        if len(rows) == 1:  # deep chains are mostly one-row levels; plain indexing is ~5x faster
            sums[parent_rows[rows[0]]] += sums[rows[0]]
        else:
            np.add.at(sums, parent_rows[rows], sums[rows])
    return sums
