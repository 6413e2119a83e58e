"""Open-ended parent-selection strategies: `HGM`, `MapElites` and `Novelty`.

They follow the same `ParentSelector` protocol as the classic strategies but read the view's
extra columns: `hgm` its clade-pooled counts, `map_elites` its descriptors, `novelty` its
nearest-neighbour distances. `hgm` has no closed form, so its `probabilities` is a
reproducible Monte Carlo estimate (n Beta samples per pick, about 10 ms at 100k agents).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from cambrian.archive.selection._base import (
    SelectorNeeds,
    _average_ranks,
    _check_k,
    _check_view,
    _draw,
    _is_int,
    _require,
)
from cambrian.archive.view import ArchiveView

_HGM_SIGNALS = ("auto", "tasks", "improvement")
#: Beta samples per block of Thompson draws: bounds the k x n temporaries to ~16 MB.
_THOMPSON_BLOCK = 1 << 21
#: Seed of HGM's Monte Carlo `probabilities`, fixed so the estimate is reproducible.
_HGM_ESTIMATE_SEED = 0x5EED_4C6D


@dataclass(frozen=True, kw_only=True)
class HGM:
    """The Huxley-Goedel Machine rule: Thompson sampling on each agent's clade productivity.

    Per draw, every agent gets theta ~ Beta(1 + S, 1 + F), with S and F pooled over its clade
    (its subtree in the view, itself included); the largest theta is picked. `signal` says
    what S and F count: "tasks" (passed / failed task runs, for multi-task benchmarks),
    "improvement" (clade members that beat / did not beat their parent, for one continuous
    score such as circle packing), or "auto": "tasks" when some agent ran more than one task,
    else "improvement". There is no closed form for the pick probabilities: `probabilities`
    is a Monte Carlo estimate from `draws` (>= 1) draws with a fixed seed, standard error
    about sqrt(p (1 - p) / draws), costing O(draws * n).
    """

    signal: str = "auto"
    draws: int = 4096
    name: str = dataclasses.field(default="hgm", init=False)

    def __post_init__(self) -> None:
        _require(
            self.signal in _HGM_SIGNALS,
            self.name,
            f"signal must be one of {', '.join(_HGM_SIGNALS)}, got {self.signal!r}",
            'use signal="tasks" (task pass counts), "improvement" (children beating parents) or "auto"',
        )
        _require(
            _is_int(self.draws, minimum=1),
            self.name,
            f"draws must be an integer >= 1, got {self.draws!r}",
            "pass e.g. draws=4096 (more draws: a finer probability estimate, slower)",
        )

    def resolved_signal(self, view: ArchiveView) -> str:
        """What `signal` means for this view: "tasks" or "improvement"."""
        if self.signal != "auto":
            return self.signal
        return "tasks" if bool(np.any(view.successes + view.failures > 1)) else "improvement"

    def counts(self, view: ArchiveView) -> tuple[np.ndarray, np.ndarray]:
        """(S, F) per row (float64, >= 0): the clade-pooled successes and failures Thompson draws use."""
        if self.resolved_signal(view) == "tasks":
            return view.clade_successes, view.clade_failures
        return view.clade_improved, view.clade_not_improved

    def _thompson_rows(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        n = len(view)
        successes, failures = self.counts(view)
        alpha, beta = 1.0 + successes, 1.0 + failures
        rows = np.empty(k, dtype=np.int64)
        per_block = max(1, _THOMPSON_BLOCK // n)
        for start in range(0, k, per_block):
            m = min(per_block, k - start)
            rows[start : start + m] = rng.beta(alpha, beta, size=(m, n)).argmax(axis=1)
        return rows

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        n = _check_view(view)
        rows = self._thompson_rows(view, self.draws, np.random.default_rng(_HGM_ESTIMATE_SEED))
        return np.bincount(rows, minlength=n) / self.draws

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        _check_view(view)
        return view.ids[self._thompson_rows(view, _check_k(k), rng)]


@dataclass(frozen=True, kw_only=True)
class MapElites:
    """Uniform over the occupied cells of a descriptor grid; each cell is represented by its elite.

    A numeric dimension with bounds (lo, hi) is cut into `bins` (>= 1) equal bins,
    bin = clip(floor((x - lo) / (hi - lo) * bins), 0, bins - 1); a categorical dimension
    (bounds None) gives each distinct value its own cell; NaN (unknown) is a cell of its own.
    `dims` names the dimensions used (empty = all of the view's). A cell's elite is its best
    score (ties: the lower row); p = 1 / n_cells per elite, 0 for everyone else. A view with
    no descriptors is one cell, so this picks the single best agent (lower row on ties).
    """

    bins: int = 10
    dims: tuple[str, ...] = ()
    name: str = dataclasses.field(default="map_elites", init=False)

    def __post_init__(self) -> None:
        _require(
            _is_int(self.bins, minimum=1),
            self.name,
            f"bins must be an integer >= 1, got {self.bins!r}",
            "pass e.g. bins=10 (bins per numeric descriptor dimension)",
        )
        # TOML gives a list (or one name as a string); keep a hashable tuple.
        dims = (self.dims,) if isinstance(self.dims, str) else self.dims
        _require(
            isinstance(dims, (tuple, list)) and all(isinstance(d, str) for d in dims),
            self.name,
            f"dims must be a list of descriptor names, got {self.dims!r}",
            'pass e.g. dims=["n_lines", "uses_numpy"], or leave it empty for every descriptor',
        )
        object.__setattr__(self, "dims", tuple(dims))

    @property
    def needs(self) -> SelectorNeeds:
        return SelectorNeeds(descriptor_axes=self.dims)

    def cell_keys(self, view: ArchiveView) -> np.ndarray:
        """Per row, its cell as an int64 key: equal keys = same cell, exactly (no hashing)."""
        names = self.dims or view.descriptor_names
        unknown = [d for d in names if d not in view.descriptor_names]
        valid = ", ".join(view.descriptor_names) or "none (this benchmark reports no descriptors)"
        _require(
            not unknown,
            self.name,
            f"unknown descriptor dimension(s) {', '.join(unknown)}; this run's descriptors: {valid}",
            "set search.params.dims to some of the run's descriptors, or leave it empty for all",
        )
        keys = np.zeros(len(view), dtype=np.int64)
        key_bound = 1
        for name in names:
            column = view.descriptor_names.index(name)
            codes, radix = self._codes(view.descriptors[:, column], view.descriptor_bounds[column])
            if key_bound * radix >= 2**62:
                # Renumber the cells so far densely (< n) so the mixed radix cannot overflow.
                _, inverse = np.unique(keys, return_inverse=True)
                keys, key_bound = inverse.reshape(-1).astype(np.int64), len(view)
            keys = keys * radix + codes
            key_bound *= radix
        return keys

    def _codes(self, values: np.ndarray, bounds: tuple[float, float] | None) -> tuple[np.ndarray, int]:
        """(per row bin code in [0, radix), radix) for one descriptor dimension."""
        if bounds is None:
            # Distinct values numbered exactly; np.unique counts every NaN as one value.
            distinct, inverse = np.unique(values, return_inverse=True)
            return inverse.reshape(-1).astype(np.int64), max(len(distinct), 1)
        lo, hi = bounds
        unknown = np.isnan(values)
        scaled = np.floor((np.where(unknown, lo, values) - lo) / (hi - lo) * self.bins)
        codes = np.clip(scaled, 0, self.bins - 1).astype(np.int64)
        codes[unknown] = self.bins
        return codes, self.bins + 1

    def elites(self, view: ArchiveView) -> np.ndarray:
        """Rows (int64) of the elites, one per occupied cell, in cell-key order."""
        _check_view(view)
        order, _ = view.ranking()
        # The ranking is best-first with ties by lower row, so a cell's first row is its elite.
        _, first = np.unique(self.cell_keys(view)[order], return_index=True)
        return order[first]

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        elites = self.elites(view)
        probs = np.zeros(len(view))
        probs[elites] = 1.0 / len(elites)
        return probs

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        elites = self.elites(view)
        return view.ids[elites[rng.integers(0, len(elites), size=_check_k(k))]]


@dataclass(frozen=True, kw_only=True)
class Novelty:
    """p = (1 - fitness_weight) * novelty / sum(novelty) + fitness_weight * (n + 1 - rank) / sum.

    novelty = the mean distance to the `k` (>= 1, <= the view's knn_k) nearest other agents
    in embedding space; rank 1 = best score (ties share their mean rank), so the fitness
    term is linear ranking. fitness_weight in [0, 1]: 0 = pure novelty search. When every
    novelty is 0 (one agent, or identical embeddings) the novelty term is uniform.
    """

    k: int = 10
    fitness_weight: float = 0.0
    name: str = dataclasses.field(default="novelty", init=False)

    def __post_init__(self) -> None:
        _require(_is_int(self.k, minimum=1), self.name, f"k must be an integer >= 1, got {self.k!r}", "pass e.g. k=10")
        _require(
            isinstance(self.fitness_weight, (int, float))
            and not isinstance(self.fitness_weight, bool)
            and 0.0 <= self.fitness_weight <= 1.0,
            self.name,
            f"fitness_weight must be a number in [0, 1], got {self.fitness_weight!r}",
            "pass e.g. fitness_weight=0.0 (pure novelty) up to 1.0 (pure rank-based fitness)",
        )

    @property
    def needs(self) -> SelectorNeeds:
        return SelectorNeeds(neighbours=int(self.k))

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        n = _check_view(view)
        _require(
            view.embedding_dim > 0,
            self.name,
            "the run has no embeddings to measure novelty in",
            'turn them on with search.novelty.space (e.g. "code") in the run config, or choose another strategy',
        )
        _require(
            self.k <= view.knn_k,
            self.name,
            f"k={self.k} exceeds the {view.knn_k} nearest neighbours the archive view keeps",
            f"use k <= {view.knn_k}",
        )
        novelty = view.novelty(self.k)
        total = novelty.sum()
        probs = novelty / total if total > 0 else np.full(n, 1.0 / n)
        if self.fitness_weight > 0:
            rank_weights = n + 1.0 - _average_ranks(view)
            probs = (1.0 - self.fitness_weight) * probs + self.fitness_weight * rank_weights / rank_weights.sum()
        return probs

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        return _draw(view, self.probabilities(view), _check_k(k), rng)
