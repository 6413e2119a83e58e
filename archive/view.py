"""`ArchiveView`: the in-memory numpy columns of a run's evaluated agents that selection reads.

The store builds a view with one query (`Archive.view`); the loop then keeps it current
with `add` as agents finish evaluation, so selection never touches the database.
"""

from __future__ import annotations

import math
from typing import Iterable

import numpy as np

from archive.errors import AgentNotFound

#: parent_ids value for an agent with no parent (a seed).
NO_PARENT = -1

_MIN_CAPACITY = 16


class ArchiveView:
    """Columns `ids`, `scores`, `parent_ids`, `n_children` of the evaluated agents, one row each.

    Rows are in insertion order (the store inserts by agent id). `n_children[i]` counts the
    children of row i that are themselves in the view. Storage doubles when full, so `add`
    is amortised O(1). The array properties return views of the filled part: read them,
    do not keep them across `add` (a growth reallocates).
    """

    def __init__(self, *, capacity: int = _MIN_CAPACITY) -> None:
        """Create an empty view with room for `capacity` rows (>= 1) before the first growth."""
        capacity = max(int(capacity), 1)
        self._ids = np.empty(capacity, dtype=np.int64)
        self._scores = np.empty(capacity, dtype=np.float64)
        self._parent_ids = np.empty(capacity, dtype=np.int64)
        self._n_children = np.empty(capacity, dtype=np.int64)
        self._size = 0
        self._row_of: dict[int, int] = {}
        # Rows best-first for the first `_n_ranked` rows, merged in lazily by `ranking()`
        # so that `add` stays O(1) and repeated selections skip a full argsort.
        self._rank_order = np.empty(0, dtype=np.int64)
        self._rank_scores = np.empty(0, dtype=np.float64)
        self._n_ranked = 0

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, float, int | None, int]]) -> ArchiveView:
        """Build a view from `(agent_id, score, parent_id or None, n_children)` rows, in order.

        `n_children` is taken as given (the store counts evaluated children in SQL).
        """
        rows = list(rows)
        view = cls(capacity=max(len(rows), _MIN_CAPACITY))
        for agent_id, score, parent_id, n_children in rows:
            row = view._append(int(agent_id), float(score), parent_id)
            view._n_children[row] = int(n_children)
        return view

    @classmethod
    def from_arrays(
        cls,
        ids: np.ndarray,
        scores: np.ndarray,
        *,
        parent_ids: np.ndarray | None = None,
    ) -> ArchiveView:
        """Build a view from columns; `n_children` is counted among the given rows.

        `parent_ids` uses `NO_PARENT` (-1) for seeds; omitted means every row is a seed.
        """
        ids = np.asarray(ids, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float64)
        parents = (
            np.full(len(ids), NO_PARENT, dtype=np.int64)
            if parent_ids is None
            else np.asarray(parent_ids, dtype=np.int64)
        )
        if not (len(ids) == len(scores) == len(parents)):
            raise ValueError(
                f"ids, scores and parent_ids differ in length: {len(ids)}, {len(scores)}, {len(parents)}"
            )
        if not np.all(np.isfinite(scores)):
            raise ValueError("every score in a view must be finite (NaN/inf would break selection)")
        if len(np.unique(ids)) != len(ids):
            raise ValueError("agent ids in a view must be unique")
        view = cls(capacity=max(len(ids), _MIN_CAPACITY))
        n = len(ids)
        view._ids[:n] = ids
        view._scores[:n] = scores
        view._parent_ids[:n] = parents
        view._size = n
        view._row_of = {int(agent_id): row for row, agent_id in enumerate(ids.tolist())}
        # Count children only among rows present, matching what `add` maintains.
        sorter = np.argsort(ids, kind="stable")
        pos = np.minimum(np.searchsorted(ids, parents, sorter=sorter), max(n - 1, 0))
        parent_rows = sorter[pos]
        present = ids[parent_rows] == parents
        view._n_children[:n] = np.bincount(parent_rows[present], minlength=n)
        return view

    def add(self, agent_id: int, score: float, parent_id: int | None) -> int:
        """Append an evaluated agent; bump its parent's `n_children` if the parent is in view.

        Returns the new row's index. Raises ValueError for a duplicate id or a non-finite score.
        """
        row = self._append(int(agent_id), float(score), parent_id)
        self._n_children[row] = 0
        parent_row = self._row_of.get(int(parent_id)) if parent_id is not None else None
        if parent_row is not None:
            self._n_children[parent_row] += 1
        return row

    def _append(self, agent_id: int, score: float, parent_id: int | None) -> int:
        if agent_id in self._row_of:
            raise ValueError(f"agent {agent_id} is already in the view")
        if not math.isfinite(score):
            raise ValueError(f"agent {agent_id} has a non-finite score {score!r}")
        if self._size == len(self._ids):
            self._grow(2 * len(self._ids))
        row = self._size
        self._ids[row] = agent_id
        self._scores[row] = score
        self._parent_ids[row] = NO_PARENT if parent_id is None else int(parent_id)
        self._row_of[agent_id] = row
        self._size += 1
        return row

    def _grow(self, capacity: int) -> None:
        for name in ("_ids", "_scores", "_parent_ids", "_n_children"):
            old = getattr(self, name)
            new = np.empty(capacity, dtype=old.dtype)
            new[: self._size] = old[: self._size]
            setattr(self, name, new)

    def ranking(self) -> tuple[np.ndarray, np.ndarray]:
        """(rows best score first, their scores); equal scores keep row order (lower row first).

        Rows added since the last call are sorted among themselves and merged in: O(n + m log m)
        for m new rows, instead of a full O(n log n) sort per selection. Read-only arrays.
        """
        if self._n_ranked < self._size:
            new_rows = np.arange(self._n_ranked, self._size, dtype=np.int64)
            new_rows = new_rows[np.argsort(-self._scores[new_rows], kind="stable")]
            new_neg = -self._scores[new_rows]
            # side="right": new rows have higher row numbers, so they lose ties to ranked rows.
            at = np.searchsorted(-self._rank_scores, new_neg, side="right")
            self._rank_order = np.insert(self._rank_order, at, new_rows)
            self._rank_scores = np.insert(self._rank_scores, at, -new_neg)
            self._n_ranked = self._size
        order, ranked_scores = self._rank_order.view(), self._rank_scores.view()
        order.flags.writeable = False
        ranked_scores.flags.writeable = False
        return order, ranked_scores

    def index_of(self, agent_id: int) -> int:
        """The row of `agent_id`; AgentNotFound if it is not in the view (not evaluated)."""
        try:
            return self._row_of[int(agent_id)]
        except KeyError:
            raise AgentNotFound(
                f"agent {agent_id} is not in the archive view",
                fix="only evaluated agents are in the view; check the agent's status with `cambrian show`",
            ) from None

    def __contains__(self, agent_id: object) -> bool:
        return isinstance(agent_id, (int, np.integer)) and int(agent_id) in self._row_of

    def __len__(self) -> int:
        return self._size

    @property
    def ids(self) -> np.ndarray:
        """Agent ids (int64), one per row."""
        return self._ids[: self._size]

    @property
    def scores(self) -> np.ndarray:
        """Search-split scores (float64, finite), one per row; higher is better."""
        return self._scores[: self._size]

    @property
    def parent_ids(self) -> np.ndarray:
        """Parent agent ids (int64), `NO_PARENT` (-1) for seeds."""
        return self._parent_ids[: self._size]

    @property
    def n_children(self) -> np.ndarray:
        """Per row, how many of the agent's children are in the view (int64, >= 0)."""
        return self._n_children[: self._size]

    def __repr__(self) -> str:
        best = float(self.scores.max()) if self._size else None
        return f"ArchiveView(n={self._size}, best={best})"
