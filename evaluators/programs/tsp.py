"""`tsp` (program search: a construction heuristic for the Euclidean travelling salesman problem).

The agent writes `tour(points) -> list[int]`, an order in which to visit 60 points of the unit square;
the harness calls it directly with a task's points. Score per instance: L_ref / L, where L is the closed
length of the returned tour and L_ref the length that nearest neighbour followed by 2-opt reaches (run
here once per instance). A tour shorter than that scores above 1, unclipped: 2-opt stops some percent
above the optimum, so a search can beat it. The seed visits the points in the given order (about 0.2);
the reference is nearest neighbour plus 2-opt, the same as the host's (1.0). 4 search and 4 holdout
instances from fixed seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

CITIES = 60
DECIMALS = 4  # of the coordinates: the points the agent sees are exactly those measured here
SEEDS = {"search": (51, 52, 53, 54), "holdout": (61, 62, 63, 64)}
IMPROVEMENT = 1e-12  # a 2-opt move must shorten the tour by more than this (unit-square lengths)


def make_instance(seed: int, cities: int = CITIES) -> dict[str, Any]:
    """`cities` points [x, y], uniform in the unit square."""
    rng = random.Random(seed)
    return {"points": [[round(rng.random(), DECIMALS), round(rng.random(), DECIMALS)] for _ in range(cities)]}


def tour_length(points: Sequence[Sequence[float]], order: Sequence[int]) -> float:
    """The closed length of visiting `points` in `order` and returning to the start."""
    return sum(math.dist(points[order[i - 1]], points[order[i]]) for i in range(len(order)))


def nearest_neighbour(points: Sequence[Sequence[float]]) -> list[int]:
    """From point 0, always on to the nearest point not yet visited."""
    order = [0]
    unvisited = set(range(1, len(points)))
    while unvisited:
        here = points[order[-1]]
        nearest = min(unvisited, key=lambda j: (math.dist(here, points[j]), j))
        order.append(nearest)
        unvisited.remove(nearest)
    return order


def two_opt(points: Sequence[Sequence[float]], order: list[int]) -> list[int]:
    """`order` with every improving segment reversal applied, first found first, until none is left."""
    n = len(order)
    dist = [[math.dist(p, q) for q in points] for p in points]
    tour = list(order)
    improved = True
    while improved:
        improved = False
        for i in range(n - 1):
            for j in range(i + 2, n if i > 0 else n - 1):  # i = 0, j = n - 1: the two edges meet at tour[0]
                a, b, c, d = tour[i], tour[i + 1], tour[j], tour[(j + 1) % n]
                if dist[a][c] + dist[b][d] - dist[a][b] - dist[c][d] < -IMPROVEMENT:
                    tour[i + 1 : j + 1] = reversed(tour[i + 1 : j + 1])
                    improved = True
    return tour


def crossings(points: Sequence[Sequence[float]], order: Sequence[int]) -> int:
    """How many pairs of the tour's edges cross each other (each one is a 2-opt move that shortens it)."""
    edges = [(points[order[i - 1]], points[order[i]]) for i in range(len(order))]
    return sum(
        _cross(*edges[i], *edges[j])
        for i in range(len(edges))
        for j in range(i + 2, len(edges))
        if (i, j) != (0, len(edges) - 1)
    )


def _cross(p: Sequence[float], q: Sequence[float], r: Sequence[float], s: Sequence[float]) -> bool:
    """Whether segments pq and rs cross at a point inside both (touching or collinear does not count)."""

    def side(a: Sequence[float], b: Sequence[float], c: Sequence[float]) -> float:
        return (b[0] - a[0]) * (c[1] - a[1]) - (b[1] - a[1]) * (c[0] - a[0])

    return side(p, q, r) * side(p, q, s) < 0 and side(r, s, p) * side(r, s, q) < 0


class Tsp(ProgramBenchmark):
    """Euclidean TSP on 60 points of the unit square, scored against nearest neighbour plus 2-opt."""

    name = "tsp"
    description = "A travelling salesman construction heuristic: 60 points, scored against NN + 2-opt."
    entry = "tour.py"
    entry_function = "tour"
    task_text = (
        "The entry file defines `def tour(points: list[list[float]]) -> list[int]`. It is called once per "
        f"instance with {CITIES} points [x, y] in the unit square and returns the order in which to visit them: "
        f"a permutation of range({CITIES}), as a list of ints. The tour is closed (it returns to its first "
        "point); its length is the sum of the Euclidean lengths of its edges.\n"
        "Score per instance: L_ref / L, where L is the tour's length and L_ref the length that nearest neighbour "
        "followed by 2-opt reaches on the same points; a tour shorter than that scores above 1. The score is the "
        "mean over the instances. Higher is better. A crash, a timeout or a list that is not a permutation is "
        "not scored."
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances = {split: [make_instance(seed) for seed in seeds] for split, seeds in SEEDS.items()}
        self._reference_length = self.per_instance(
            lambda inst: tour_length(inst["points"], two_opt(inst["points"], nearest_neighbour(inst["points"])))
        )

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        points = task.inputs["points"]
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            return self.unusable("tour did not return a list of ints")
        if len(value) != len(points):
            return self.unusable(f"tour returned {len(value)} indices for {len(points)} points")
        if sorted(value) != list(range(len(points))):
            return self.unusable(
                f"tour did not return a permutation of range({len(points)}): an index is repeated or out of range"
            )
        length = tour_length(points, value)
        best = self._reference_length[self.instance_key(task)]
        score = best / length
        crossed = crossings(points, value)
        uncrossed = (
            "no two edges cross"
            if crossed == 0
            else f"edges cross at {crossed} point{'s' if crossed > 1 else ''} (uncrossing a pair shortens the tour)"
        )
        feedback = (
            f"tour length {length:.4f} against {best:.4f} for nearest neighbour + 2-opt ({score:.4f}); {uncrossed}"
        )
        return TaskScore(score=score, passed=length <= best * (1 + 1e-9), executed=True, feedback=feedback)
