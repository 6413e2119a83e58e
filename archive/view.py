"""`ArchiveView`: the in-memory numpy columns of a run's evaluated agents that selection reads.

The store builds a view with one query (`Archive.view`); the loop then keeps it current
with `add` as agents finish evaluation, so selection never touches the database. Besides
score and lineage, a view carries what open-ended strategies need: per-agent and
clade-pooled task counts (HGM), behaviour descriptors (MAP-Elites) and embeddings with
their k nearest-neighbour distances (novelty).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from cambrian.archive.errors import AgentNotFound
from cambrian.archive.lineage import _N_COUNTS, _clade_sums, _lineage_rows, _own_counts, improves
from cambrian.archive.novelty import distances_to, knn_table, merge_into_knn

#: parent_ids value for an agent with no parent (a seed).
NO_PARENT = -1

_MIN_CAPACITY = 16

# The per-row arrays that `_grow` copies; 2-D ones keep their column count.
_COLUMNS = (
    "_ids",
    "_scores",
    "_parent_ids",
    "_parent_rows",
    "_n_children",
    "_own",
    "_clade",
    "_descriptors",
    "_embeddings",
    "_knn",
)


class ArchiveView:
    """Columns of the evaluated agents, one row each, in insertion order (the store inserts by id).

    Always present: `ids`, `scores`, `parent_ids`, `n_children` (children in the view).
    Open-ended columns: own task counts `successes`/`failures` and `improved` (beat its
    parent), the same pooled over each agent's clade (its subtree in the view, itself
    included), `descriptors` (n x D), `embeddings` (n x E) and `knn_distances` (n x knn_k).
    Storage doubles when full, so `add` is amortised O(1) plus O(depth) for the clade sums.
    The neighbour distances are kept up to date lazily: rows added since the last read of
    `novelty` or `knn_distances` are merged in then (O(n * E) each, or one batched k-NN table
    when most rows are new), so strategies that never read them never pay for them. The
    array properties return views of the filled part: read them, do not keep them across
    `add` (a growth reallocates).
    """

    def __init__(
        self,
        *,
        capacity: int = _MIN_CAPACITY,
        descriptor_names: Sequence[str] = (),
        descriptor_bounds: Sequence[tuple[float, float] | None] = (),
        embedding_dim: int = 0,
        knn_k: int = 15,
    ) -> None:
        """An empty view with room for `capacity` rows (>= 1) before the first growth.

        descriptor_names: one name per behaviour descriptor dimension (D of them).
        descriptor_bounds: per name, `(lo, hi)` with lo < hi for a numeric dimension or None
            for a categorical one (every distinct value its own cell); empty = all categorical.
        embedding_dim: length E (>= 0) of each agent's embedding; 0 = the run has none.
        knn_k: how many nearest-neighbour distances (>= 1) each row keeps.
        """
        names = tuple(str(name) for name in descriptor_names)
        if len(set(names)) != len(names):
            raise ValueError(f"descriptor names must be unique, got {names}")
        if int(embedding_dim) != embedding_dim or embedding_dim < 0:
            raise ValueError(f"embedding_dim must be an integer >= 0, got {embedding_dim!r}")
        self._descriptor_names = names
        self._descriptor_bounds = _check_bounds(names, descriptor_bounds)
        self._embedding_dim = int(embedding_dim)
        self._knn_k = _check_knn_k(knn_k)
        capacity = max(int(capacity), 1)
        self._ids = np.empty(capacity, dtype=np.int64)
        self._scores = np.empty(capacity, dtype=np.float64)
        self._parent_ids = np.empty(capacity, dtype=np.int64)
        self._parent_rows = np.empty(capacity, dtype=np.int64)
        self._n_children = np.empty(capacity, dtype=np.int64)
        # Count columns: successes, failures, improved, not improved; the agent's own, then its clade's.
        self._own = np.empty((capacity, _N_COUNTS), dtype=np.float64)
        self._clade = np.empty((capacity, _N_COUNTS), dtype=np.float64)
        self._descriptors = np.empty((capacity, len(names)), dtype=np.float64)
        self._embeddings = np.empty((capacity, self._embedding_dim), dtype=np.float32)
        self._knn = np.empty((capacity, self._knn_k), dtype=np.float64)
        self._knn_ready = 0  # rows whose neighbour distances are up to date (the first ones)
        self._size = 0
        self._row_of: dict[int, int] = {}
        # Rows best-first for the first `_n_ranked` rows, merged in lazily by `ranking()`
        # so that `add` stays O(1) and repeated selections skip a full argsort.
        self._rank_order = np.empty(0, dtype=np.int64)
        self._rank_scores = np.empty(0, dtype=np.float64)
        self._n_ranked = 0
        self._caches: dict[object, dict[str, Any]] = {}

    @classmethod
    def from_rows(cls, rows: Iterable[tuple[int, float, int | None, int]]) -> ArchiveView:
        """Build a view from `(agent_id, score, parent_id or None, n_children)` rows, in order.

        `n_children` is taken as given (the store counts evaluated children in SQL).
        """
        rows = list(rows)
        view = cls(capacity=max(len(rows), _MIN_CAPACITY))
        for agent_id, score, parent_id, _ in rows:
            view.add(int(agent_id), float(score), parent_id)
        view._n_children[: len(rows)] = [int(n_children) for *_, n_children in rows]
        return view

    @classmethod
    def from_arrays(
        cls,
        ids: np.ndarray,
        scores: np.ndarray,
        *,
        parent_ids: np.ndarray | None = None,
        successes: np.ndarray | None = None,
        failures: np.ndarray | None = None,
        descriptors: np.ndarray | None = None,
        embeddings: np.ndarray | None = None,
        descriptor_names: Sequence[str] = (),
        descriptor_bounds: Sequence[tuple[float, float] | None] = (),
        knn_k: int = 15,
    ) -> ArchiveView:
        """Build a view from columns in any row order; every derived column is computed here.

        `parent_ids` uses `NO_PARENT` (-1) for seeds; omitted means every row is a seed. A
        parent links a row when it is among the given rows, wherever it sits. successes /
        failures: floats >= 0 (omitted = 0); descriptors: n x len(descriptor_names) (NaN =
        unknown); embeddings: n x E (E = 0 or omitted = none). Clade sums take one pass over
        the depth levels; neighbour distances are computed in bounded-memory blocks.
        """
        ids = np.asarray(ids, dtype=np.int64)
        scores = np.asarray(scores, dtype=np.float64)
        n = len(ids)
        parents = np.full(n, NO_PARENT, dtype=np.int64) if parent_ids is None else np.asarray(parent_ids, np.int64)
        if not (len(ids) == len(scores) == len(parents)):
            raise ValueError(f"ids, scores and parent_ids differ in length: {len(ids)}, {len(scores)}, {len(parents)}")
        if not np.all(np.isfinite(scores)):
            raise ValueError("every score in a view must be finite (NaN/inf would break selection)")
        if len(np.unique(ids)) != n:
            raise ValueError("agent ids in a view must be unique")
        embedding_matrix = np.zeros((n, 0), np.float32) if embeddings is None else np.asarray(embeddings, np.float32)
        if embedding_matrix.ndim != 2 or len(embedding_matrix) != n or not np.all(np.isfinite(embedding_matrix)):
            raise ValueError(f"embeddings must be a finite {n} x E matrix, got shape {embedding_matrix.shape}")
        view = cls(
            capacity=max(n, _MIN_CAPACITY),
            descriptor_names=descriptor_names,
            descriptor_bounds=descriptor_bounds,
            embedding_dim=embedding_matrix.shape[1],
            knn_k=knn_k,
        )
        own = _own_counts(n, successes, failures)
        view._descriptors[:n] = view._descriptor_matrix(n, descriptors)
        view._ids[:n] = ids
        view._scores[:n] = scores
        view._parent_ids[:n] = parents
        view._size = n
        view._row_of = {int(agent_id): row for row, agent_id in enumerate(ids.tolist())}
        parent_rows = _lineage_rows(ids, parents)
        view._parent_rows[:n] = parent_rows
        # Count children only among rows present, matching what `add` maintains.
        view._n_children[:n] = np.bincount(parent_rows[parent_rows >= 0], minlength=n)
        linked = parent_rows >= 0
        improved = linked & improves(scores, scores[np.where(linked, parent_rows, 0)])
        own[:, 2] = improved
        own[:, 3] = linked & ~improved
        view._own[:n] = own
        view._clade[:n] = _clade_sums(parent_rows, own)
        view._embeddings[:n] = embedding_matrix
        view._knn_ready = 0  # the whole table is built on first read (`_update_neighbours`)
        return view

    def add(
        self,
        agent_id: int,
        score: float,
        parent_id: int | None,
        *,
        successes: float = 0.0,
        failures: float = 0.0,
        descriptor: Sequence[float] | None = None,
        embedding: np.ndarray | None = None,
    ) -> int:
        """Append an evaluated agent and update its parent's children, its ancestors' clade sums
        and every row's nearest neighbours. Returns the new row's index.

        successes / failures: the agent's own passed and run-but-not-passed tasks (floats >= 0).
        descriptor: one value per descriptor name (NaN = unknown); None = all unknown.
        embedding: a finite vector of length `embedding_dim`; None = zeros (the origin).
        The parent links only if it is already in the view. Raises ValueError for a duplicate
        id, a non-finite score or a malformed column; a failed add leaves the view unchanged.
        """
        own = _own_counts(1, [successes], [failures])[0]
        descriptor_row = self._descriptor_matrix(1, None if descriptor is None else [descriptor])[0]
        embedding_row = self._embedding_row(embedding)
        # Look the parent up before appending: a row must never become its own parent.
        parent_row = self._row_of.get(int(parent_id), -1) if parent_id is not None else -1
        row = self._append(int(agent_id), float(score), parent_id)
        self._n_children[row] = 0
        self._parent_rows[row] = parent_row
        if parent_row >= 0:
            self._n_children[parent_row] += 1
            improved = bool(improves(self._scores[row], self._scores[parent_row]))
            own[2], own[3] = float(improved), float(not improved)
        self._own[row] = own
        self._clade[row] = 0.0
        self._clade[self._ancestors_and_self(row)] += own
        self._descriptors[row] = descriptor_row
        self._embeddings[row] = embedding_row
        return row

    def _ancestors_and_self(self, row: int) -> list[int]:
        chain = [row]
        parent = int(self._parent_rows[row])
        while parent >= 0:
            chain.append(parent)
            parent = int(self._parent_rows[parent])
        return chain

    def _update_neighbours(self) -> None:
        """Bring the neighbour distances of every row up to date: merge in each row added since
        the last update, in order (as if each had been merged when added), or build the whole
        table in one batch when more rows are new than up to date."""
        if self._knn_ready == self._size:
            return
        if self._size - self._knn_ready > self._knn_ready:
            self._knn[: self._size] = knn_table(self._embeddings[: self._size], self._knn_k)
        else:
            for row in range(self._knn_ready, self._size):
                self._add_neighbours(row)
        self._knn_ready = self._size

    def _add_neighbours(self, row: int) -> None:
        """Set the new row's k nearest distances and insert it into rows it is now nearer to."""
        self._knn[row] = np.inf
        if row == 0:
            return
        k = self._knn_k
        if self._embedding_dim == 0:
            # Empty embeddings coincide: every other row is at distance 0.
            if row <= k:
                self._knn[: row + 1, :row] = 0.0
            return
        distances = distances_to(self._embeddings[:row], self._embeddings[row])
        take = min(k, row)
        nearest = distances if take == row else np.partition(distances, take - 1)[:take]
        self._knn[row, :take] = np.sort(nearest)
        merge_into_knn(self._knn[:row], distances)

    def _descriptor_matrix(self, n: int, descriptors: object) -> np.ndarray:
        width = len(self._descriptor_names)
        if descriptors is None:
            return np.full((n, width), np.nan)
        matrix = np.asarray(descriptors, dtype=np.float64)
        if matrix.shape != (n, width):
            raise ValueError(
                f"descriptors must have one value per descriptor name {list(self._descriptor_names)}, "
                f"got shape {matrix.shape[1:] if matrix.ndim == 2 else matrix.shape}"
            )
        if np.any(np.isinf(matrix)):
            raise ValueError("descriptor values must be finite or NaN (unknown), not infinite")
        return matrix

    def _embedding_row(self, embedding: np.ndarray | None) -> np.ndarray:
        if embedding is None:
            return np.zeros(self._embedding_dim, dtype=np.float32)
        vector = np.asarray(embedding, dtype=np.float32)
        if vector.shape != (self._embedding_dim,) or not np.all(np.isfinite(vector)):
            raise ValueError(
                f"embedding must be a finite vector of length embedding_dim={self._embedding_dim}, "
                f"got shape {vector.shape}"
            )
        return vector

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
        for name in _COLUMNS:
            old = getattr(self, name)
            new = np.empty((capacity, *old.shape[1:]), dtype=old.dtype)
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

    def novelty(self, k: int) -> np.ndarray:
        """Per row, the mean distance (float64, >= 0) to its min(k, knn_k, n - 1) nearest other rows.

        0.0 for every row when the view holds one agent. Raises ValueError when k > knn_k
        (the view keeps only knn_k neighbours) or k < 1.
        """
        if int(k) != k or k < 1:
            raise ValueError(f"novelty k must be an integer >= 1, got {k!r}")
        if k > self._knn_k:
            raise ValueError(f"novelty k={k} exceeds the view's knn_k={self._knn_k}; build the view with knn_k >= {k}")
        m = min(int(k), self._size - 1)
        if m <= 0:
            return np.zeros(self._size)
        self._update_neighbours()
        return self._knn[: self._size, :m].mean(axis=1)

    def cache(self, key: object) -> dict[str, Any]:
        """A dict (empty at first) in which a reader keeps what it derived from this view under `key`, to bring
        it up to date as rows are added instead of deriving it again (e.g. a selector's weights). Rows are only
        ever appended; an existing row's `n_children` changes only when a row is added under it (the new
        row's `parent_rows`), its clade counts when one is added anywhere below it."""
        return self._caches.setdefault(key, {})

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
    def descriptor_names(self) -> tuple[str, ...]:
        """Names of the descriptor dimensions, in column order of `descriptors`."""
        return self._descriptor_names

    @property
    def descriptor_bounds(self) -> tuple[tuple[float, float] | None, ...]:
        """Per descriptor name, its numeric `(lo, hi)` range or None (categorical)."""
        return self._descriptor_bounds

    @property
    def embedding_dim(self) -> int:
        """Length of each embedding; 0 when the run has none."""
        return self._embedding_dim

    @property
    def knn_k(self) -> int:
        """How many nearest-neighbour distances each row keeps (>= 1)."""
        return self._knn_k

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
    def parent_rows(self) -> np.ndarray:
        """Row of each agent's parent (int64), -1 when the parent is not in the view."""
        return self._parent_rows[: self._size]

    @property
    def n_children(self) -> np.ndarray:
        """Per row, how many of the agent's children are in the view (int64, >= 0)."""
        return self._n_children[: self._size]

    @property
    def successes(self) -> np.ndarray:
        """The agent's own passed tasks (float64, >= 0)."""
        return self._own[: self._size, 0]

    @property
    def failures(self) -> np.ndarray:
        """The agent's own tasks run but not passed (float64, >= 0)."""
        return self._own[: self._size, 1]

    @property
    def improved(self) -> np.ndarray:
        """1.0 where the agent's score beats its parent's (parent in the view), else 0.0."""
        return self._own[: self._size, 2]

    @property
    def clade_successes(self) -> np.ndarray:
        """`successes` summed over each agent's subtree in the view, the agent included."""
        return self._clade[: self._size, 0]

    @property
    def clade_failures(self) -> np.ndarray:
        """`failures` summed over each agent's subtree in the view, the agent included."""
        return self._clade[: self._size, 1]

    @property
    def clade_improved(self) -> np.ndarray:
        """How many members of each agent's subtree (itself included) beat their parent."""
        return self._clade[: self._size, 2]

    @property
    def clade_not_improved(self) -> np.ndarray:
        """How many subtree members with a parent in the view did not beat it (seeds count nowhere)."""
        return self._clade[: self._size, 3]

    @property
    def descriptors(self) -> np.ndarray:
        """Behaviour descriptors, n x D float64 (NaN = unknown)."""
        return self._descriptors[: self._size]

    @property
    def embeddings(self) -> np.ndarray:
        """Embeddings, n x E float32."""
        return self._embeddings[: self._size]

    @property
    def knn_distances(self) -> np.ndarray:
        """n x knn_k float64: each row's ascending Euclidean distances to its nearest other rows
        (+inf where fewer than knn_k others exist)."""
        self._update_neighbours()
        return self._knn[: self._size]

    def __repr__(self) -> str:
        best = float(self.scores.max()) if self._size else None
        return f"ArchiveView(n={self._size}, best={best})"


def _check_bounds(
    names: tuple[str, ...], bounds: Sequence[tuple[float, float] | None]
) -> tuple[tuple[float, float] | None, ...]:
    if len(bounds) == 0:
        return (None,) * len(names)
    if len(bounds) != len(names):
        raise ValueError(f"descriptor_bounds has {len(bounds)} entries for {len(names)} descriptor names {names}")
    checked: list[tuple[float, float] | None] = []
    for name, bound in zip(names, bounds):
        if bound is None:
            checked.append(None)
            continue
        lo, hi = (float(value) for value in bound)
        if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
            raise ValueError(f"descriptor {name!r}: bounds must be finite with lo < hi, got {tuple(bound)}")
        checked.append((lo, hi))
    return tuple(checked)


def _check_knn_k(knn_k: int) -> int:
    if isinstance(knn_k, bool) or int(knn_k) != knn_k or knn_k < 1:
        raise ValueError(f"knn_k must be an integer >= 1, got {knn_k!r}")
    return int(knn_k)
