"""The `ParentSelector` protocol and the helpers every strategy shares: view and k checks, draws, ranks.

`_classic` and `_open_ended` both import from here, so neither imports the other's internals. Every
helper is pure: numpy over an `ArchiveView`, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from cambrian.archive.errors import EmptyView, SelectorConfigError
from cambrian.archive.view import ArchiveView


def _check_view(view: ArchiveView) -> int:
    n = len(view)
    if n == 0:
        raise EmptyView(
            "cannot select a parent: the archive has no evaluated agents",
            fix="evaluate at least one agent (the seed) before selecting; "
            "if the seed failed, see `cambrian status RUN` for its error",
        )
    return n


def _check_k(k: int) -> int:
    if int(k) != k or k < 0:
        raise ValueError(f"k must be a non-negative integer, got {k!r}")
    return int(k)


def _draw(view: ArchiveView, probs: np.ndarray, k: int, rng: np.random.Generator) -> np.ndarray:
    """k ids drawn from `probs` by inverse CDF (O(n + k log n))."""
    cdf = np.cumsum(probs)
    rows = np.searchsorted(cdf, rng.random(k) * cdf[-1], side="right")
    # Guard the float edge where a uniform draw equals the last cdf entry.
    np.minimum(rows, len(cdf) - 1, out=rows)
    return view.ids[rows]


def _average_ranks(view: ArchiveView) -> np.ndarray:
    """Per row, its rank by score (1 = best; float64); tied rows share the mean of their ranks."""
    n = len(view)
    order, sorted_scores = view.ranking()
    opens_group = np.r_[True, sorted_scores[1:] != sorted_scores[:-1]]
    starts = np.flatnonzero(opens_group)
    ends = np.r_[starts[1:], n] - 1
    group = np.cumsum(opens_group) - 1
    ranks = np.empty(n)
    ranks[order] = (starts + ends)[group] / 2.0 + 1.0
    return ranks


def _require(condition: bool, strategy: str, message: str, fix: str) -> None:
    if not condition:
        raise SelectorConfigError(f"{strategy}: {message}", fix=fix)


def _is_int(value: object, *, minimum: int) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool) and bool(value >= minimum)


@runtime_checkable
class ParentSelector(Protocol):
    """A parent-selection strategy. Implementations are pure and keep no per-call state."""

    name: str

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        """Probability (float64, >= 0, sums to 1) that one draw picks each view row."""
        ...

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        """`k` (>= 0) agent ids (int64), drawn independently with replacement."""
        ...


@dataclass(frozen=True)
class SelectorNeeds:
    """What a strategy reads from the view besides scores and children, for the loop to check up front.

    descriptor_axes: behaviour descriptor names it reads (empty: none, or whatever the view has).
    neighbours: the k of the k-nearest-neighbour novelty it reads (0: none); the view must keep
    at least that many neighbours per agent.
    """

    descriptor_axes: tuple[str, ...] = ()
    neighbours: int = 0


def selector_needs(selector: object) -> SelectorNeeds:
    """`selector.needs` where a strategy declares it (`MapElites`, `Novelty`); nothing otherwise."""
    needs = getattr(selector, "needs", None)
    return needs if isinstance(needs, SelectorNeeds) else SelectorNeeds()
