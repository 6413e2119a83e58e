"""The classic strategies: `uniform`, `greedy`, `tournament`, `power_law` (rank^-a) and `dgm`
(sigmoid(lambda (s - a0)) / (1 + children), a0 a score or the archive's best or median score)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from cambrian.archive.selection._base import _average_ranks, _check_k, _check_view, _draw, _require
from cambrian.archive.selection._blocks import BlockWeights
from cambrian.archive.view import ArchiveView


@dataclass(frozen=True, kw_only=True)
class Uniform:
    """Every evaluated agent equally likely: p = 1/n."""

    name: str = dataclasses.field(default="uniform", init=False)

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        n = _check_view(view)
        return np.full(n, 1.0 / n)

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        n = _check_view(view)
        return view.ids[rng.integers(0, n, size=_check_k(k))]


@dataclass(frozen=True, kw_only=True)
class Greedy:
    """Always the best score; agents tied for best share the probability equally."""

    name: str = dataclasses.field(default="greedy", init=False)

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        _check_view(view)
        best = view.scores == view.scores.max()
        return best / np.count_nonzero(best)

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        _check_view(view)
        best_rows = np.flatnonzero(view.scores == view.scores.max())
        return view.ids[best_rows[rng.integers(0, len(best_rows), size=_check_k(k))]]


@dataclass(frozen=True, kw_only=True)
class Tournament:
    """Draw `size` (>= 1) rows uniformly with replacement; the best score wins.

    Ties are won by the lower row (the earlier-added agent). With rank r (1 = best) among n,
    P(r) = ((n - r + 1)^size - (n - r)^size) / n^size.
    """

    size: int = 3
    name: str = dataclasses.field(default="tournament", init=False)

    def __post_init__(self) -> None:
        _require(
            isinstance(self.size, (int, np.integer)) and not isinstance(self.size, bool) and self.size >= 1,
            self.name,
            f"size must be an integer >= 1, got {self.size!r}",
            "pass e.g. size=3 (larger sizes select more greedily)",
        )

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        n = _check_view(view)
        ranks = np.arange(1, n + 1, dtype=np.float64)
        # Fractions of n keep the powers in [0, 1]: no overflow for large n or size.
        by_rank = ((n - ranks + 1) / n) ** self.size - ((n - ranks) / n) ** self.size
        probs = np.empty(n)
        probs[view.ranking()[0]] = by_rank
        return probs

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        n = _check_view(view)
        k = _check_k(k)
        entrants = rng.integers(0, n, size=(k, self.size))
        entrant_scores = view.scores[entrants]
        best = entrant_scores.max(axis=1, keepdims=True)
        # Among entrants tied on the best score, the lowest row wins (as in `probabilities`).
        winners = np.where(entrant_scores == best, entrants, n).min(axis=1)
        return view.ids[winners]


@dataclass(frozen=True, kw_only=True)
class PowerLaw:
    """p proportional to rank^-alpha, rank 1 = best; alpha >= 0 (0 is uniform).

    Tied scores get the average of the ordinal ranks they span ("average" ranking, as in
    `scipy.stats.rankdata`), so equal agents are equally likely.
    """

    alpha: float = 1.0
    name: str = dataclasses.field(default="power_law", init=False)

    def __post_init__(self) -> None:
        _require(
            isinstance(self.alpha, (int, float)) and math.isfinite(self.alpha) and self.alpha >= 0,
            self.name,
            f"alpha must be a finite number >= 0, got {self.alpha!r}",
            "pass e.g. alpha=1.0 (0 = uniform; larger = greedier)",
        )

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        _check_view(view)
        weights = _average_ranks(view) ** -float(self.alpha)
        return weights / weights.sum()

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        return _draw(view, self.probabilities(view), _check_k(k), rng)


@dataclass(frozen=True, kw_only=True)
class DGM:
    """The Darwin Gödel Machine rule: p ∝ sigmoid(lambda_ * (score - alpha0)) / (1 + n_children).

    `lambda_` (> 0) sets how sharply scores above `alpha0` are preferred; dividing by
    1 + n_children (evaluated children) steers draws away from parents already explored.
    `alpha0` is a score (the paper's 0.5, for accuracies in 0..1), or relative to the archive at each
    draw, with scores measured in units of its score range (max - min) so the rule reads alike on any
    scale (accuracies, circle packing's sums of radii 1..2.6, negative losses):
    `"best"` (the default): sigmoid(lambda_ * (score - best) / range): the best agent weighs 1/2 and the
    rest fall off with their distance from it, as in the paper's runs, where alpha0 sat at or above the
    best agents' accuracy; `"median"`: sigmoid(lambda_ * (score - median) / range): the better half alike.
    """

    lambda_: float = 10.0
    alpha0: float | str = "best"
    name: str = dataclasses.field(default="dgm", init=False)

    def __post_init__(self) -> None:
        _require(
            isinstance(self.lambda_, (int, float)) and math.isfinite(self.lambda_) and self.lambda_ > 0,
            self.name,
            f"lambda_ must be a finite number > 0, got {self.lambda_!r}",
            "pass e.g. lambda_=10.0",
        )
        _require(
            self.alpha0 in _RELATIVE_ALPHA0 or _is_finite_number(self.alpha0),
            self.name,
            f'alpha0 must be a finite number, "best" or "median", got {self.alpha0!r}',
            "pass the score around which parents become attractive (e.g. alpha0=0.5 for scores in 0..1), "
            'or alpha0="best" / "median" (relative to the archive\'s best or median score)',
        )

    def centre_and_scale(self, view: ArchiveView) -> tuple[float, float]:
        """(score at the sigmoid's midpoint, score units per unit of lambda_) for this view."""
        if self.alpha0 not in _RELATIVE_ALPHA0:
            return float(self.alpha0), 1.0
        if self.alpha0 == "best":  # two passes over the scores, cheaper than keeping them ranked as rows come
            best, worst = float(view.scores.max()), float(view.scores.min())
            return best, best - worst if best > worst else 1.0
        _, ranked = view.ranking()  # sorted best first, so the median and range are lookups
        n = len(ranked)
        centre = float(ranked[(n - 1) // 2] + ranked[n // 2]) / 2.0
        spread = float(ranked[0] - ranked[-1])
        return centre, spread if spread > 0 else 1.0

    def probabilities(self, view: ArchiveView) -> np.ndarray:
        _check_view(view)
        weights, _ = self._all_weights(view, *self.centre_and_scale(view))
        return weights / weights.sum()

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        """Draws by `probabilities`, from weights kept with the view (`ArchiveView.cache`): after rows were
        added only theirs and their parents' are computed, unless the centre or scale moved (a new best or
        score range), and a draw reads O(sqrt n) of them (`BlockWeights`), not all n."""
        _check_view(view)
        k = _check_k(k)
        centre, scale = self.centre_and_scale(view)
        kept = view.cache(("dgm", self.lambda_, self.alpha0))
        blocks: BlockWeights | None = kept.get("weights")
        n, seen = len(view), kept.get("rows", 0)
        if blocks is None or kept["at"] != (centre, scale) or kept["log_space"]:
            weights, log_space = self._all_weights(view, centre, scale)
            blocks = BlockWeights(weights)
            kept.update(weights=blocks, rows=n, at=(centre, scale), log_space=log_space)
        elif n > seen:
            parents = np.array(sorted({row for row in view.parent_rows[seen:n].tolist() if 0 <= row < seen}), int)
            blocks.set(parents, self._weights(view.scores[parents], view.n_children[parents], centre, scale))
            blocks.extend(self._weights(view.scores[seen:n], view.n_children[seen:n], centre, scale))
            kept["rows"] = n
            if blocks.weights.max() < _UNDERFLOW_GUARD:  # as in `probabilities`: all again, in log space
                kept.clear()
                return self.select(view, k, rng)
        return view.ids[blocks.draw(rng.random(k))]

    def _all_weights(self, view: ArchiveView, centre: float, scale: float) -> tuple[np.ndarray, bool]:
        """Every row's weight (not normalised), and whether it took the log-space form."""
        weights = self._weights(view.scores, view.n_children, centre, scale)
        if weights.max() >= _UNDERFLOW_GUARD:
            return weights, False
        # Every score is so far below alpha0 that the weights lost precision; the
        # log-space form is exact (and slower, hence only here).
        x = (view.scores - centre) * (self.lambda_ / scale)
        log_weights = -np.logaddexp(0.0, -x) - np.log1p(view.n_children)
        return np.exp(log_weights - log_weights.max()), True

    def _weights(self, scores: np.ndarray, n_children: np.ndarray, centre: float, scale: float) -> np.ndarray:
        """sigmoid(lambda_ (score - centre) / scale) / (1 + n_children), row by row."""
        x = scores - centre
        x *= self.lambda_ / scale
        # sigmoid(x) = 1/(1+e) for x >= 0 and e/(1+e) for x < 0, with e = exp(-|x|) <= 1:
        # one exp (the costly part at 100k rows) and no overflow.
        e = np.abs(x)
        np.negative(e, out=e)
        np.exp(e, out=e)
        weights = np.where(x >= 0.0, 1.0, e)
        e += 1.0
        e *= n_children + 1
        weights /= e
        return weights


#: alpha0 values measured from the archive itself (see DGM).
_RELATIVE_ALPHA0 = ("best", "median")


def _is_finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


#: Below this largest weight, DGM recomputes in log space (subnormals lose precision).
_UNDERFLOW_GUARD = 1e-250
