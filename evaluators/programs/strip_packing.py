"""`strip_packing` (program search, a whole ~300-line packing program to improve).

2-D strip packing without rotation: the agent's `pack(width, rects)` places every rectangle `[w, h]`
in a strip `width` wide and unbounded upwards, and returns each one's lower-left corner `[x, y]`.
Rectangles must lie inside the strip (0 <= x, x + w <= width, 0 <= y) and must not overlap; touching
edges is fine (tolerance 1e-9 on both). Score per instance: the lower bound max(total area / width,
tallest rectangle) divided by the packed height (the top of the highest rectangle), in (0, 1].

The seed is a realistic, weak program: input order and next-fit shelves, chosen by module constants
beside first-fit and best-fit shelves, other orderings and a grid bottom-left drop. A height order with
first-fit shelves is a small edit away; the reference fills holes bottom-left and keeps the best of
several orderings. Instances: 30-60 rectangles, about 30 % wide and flat, 30 % tall and thin, the rest
near square, in a strip 10-20 wide; 4 search and 4 holdout instances from fixed seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

SEEDS = {"search": (101, 102, 103, 104), "holdout": (201, 202, 203, 204)}
#: Slack on every containment and overlap comparison, in strip width units: float sums of touching edges.
TOLERANCE = 1e-9


def make_instance(seed: int) -> dict[str, Any]:
    """A strip 10..20 wide (integer) and 30..60 rectangles with sides to one decimal.

    Shapes: wide and flat (0.3..0.7 of the strip by 0.4..1.5), tall and thin (0.5..1.5 by 3..7) and
    near square (sides 1..4), about 30/30/40 %: no single order suits shelves for all of them.
    """
    rng = random.Random(seed)
    width = rng.randint(10, 20)
    rects = []
    for _ in range(rng.randint(30, 60)):
        shape = rng.random()
        if shape < 0.3:
            w, h = rng.uniform(0.3 * width, 0.7 * width), rng.uniform(0.4, 1.5)
        elif shape < 0.6:
            w, h = rng.uniform(0.5, 1.5), rng.uniform(3.0, 7.0)
        else:
            w, h = rng.uniform(1.0, 4.0), rng.uniform(1.0, 4.0)
        rects.append([round(w, 1), round(h, 1)])
    return {"width": width, "rects": rects}


def lower_bound(width: float, rects: Sequence[Sequence[float]]) -> tuple[float, float, float]:
    """(bound, total area / width, tallest height): no packing is lower than either, hence than their max."""
    by_area = sum(w * h for w, h in rects) / width
    tallest = max(h for _, h in rects)
    return max(by_area, tallest), by_area, tallest


def is_number(value: Any) -> bool:
    """A finite int or float from JSON (a bool is not a coordinate)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def describe(index: int, rect: Sequence[float], position: Sequence[float]) -> str:
    """A rectangle for a message: its index, size and where the program put it."""
    return f"rectangle {index} ({rect[0]:g} x {rect[1]:g} at ({position[0]:.10g}, {position[1]:.10g}))"


def positions_problem(value: Any, count: int) -> str | None:
    """Why `value` is not one [x, y] pair of finite numbers per rectangle, or None if it is."""
    if not isinstance(value, list):
        return f"pack returned a {type(value).__name__}, not a list of [x, y] positions"
    if len(value) != count:
        return f"pack returned {len(value)} positions for {count} rectangles; give one [x, y] per rectangle"
    for index, pair in enumerate(value):
        if not isinstance(pair, list) or len(pair) != 2 or not all(is_number(c) for c in pair):
            return f"position {index} is {pair!r:.80}, not a pair [x, y] of finite numbers"
    return None


def strip_problem(width: float, rects: Sequence[Sequence[float]], positions: Sequence[Sequence[float]]) -> str | None:
    """The first rectangle that leaves the strip, described, or None if all lie inside it."""
    for index, (rect, (x, y)) in enumerate(zip(rects, positions)):
        if x < -TOLERANCE or x + rect[0] > width + TOLERANCE or y < -TOLERANCE:
            where = describe(index, rect, (x, y))
            return f"{where} leaves the strip: it needs 0 <= x, x + w <= {width:g} and y >= 0"
    return None


def first_overlap(rects: Sequence[Sequence[float]], positions: Sequence[Sequence[float]]) -> tuple[int, int] | None:
    """The first pair (i < j) of rectangles that share area beyond the tolerance, or None."""
    boxes = [(x, y, x + w, y + h) for (w, h), (x, y) in zip(rects, positions)]
    for i, (left, bottom, right, top) in enumerate(boxes):
        for j in range(i + 1, len(boxes)):
            other_left, other_bottom, other_right, other_top = boxes[j]
            if (
                min(right, other_right) - max(left, other_left) > TOLERANCE
                and min(top, other_top) - max(bottom, other_bottom) > TOLERANCE
            ):
                return i, j
    return None


class StripPacking(ProgramBenchmark):
    """2-D strip packing without rotation by a whole program the agent improves."""

    name = "strip_packing"
    description = "Rectangle strip packing: improve a ~300-line shelf/bottom-left packer to pack lower."
    entry = "packer.py"
    entry_function = "pack"
    task_text = (
        "The entry file defines `def pack(width: float, rects: list[list[float]]) -> list[list[float]]`, "
        "called once per instance as `pack(width=..., rects=...)`. The strip is `width` wide (an integer "
        "10..20) and open upwards; `rects` holds 30..60 rectangles `[w, h]` (sides to one decimal: some wide "
        "and flat, some tall and thin, the rest near square). Return one `[x, y]` per rectangle, in the "
        "order given: its lower-left corner. Rectangles are not rotated; each must lie inside the strip "
        "(0 <= x, x + w <= width, 0 <= y) and no two may overlap (touching edges is fine; tolerance 1e-9).\n"
        "Score per instance: the lower bound max(total area / width, tallest rectangle) divided by the packed "
        "height (the top of the highest rectangle), from 0 to 1; the score is the mean over the instances. "
        "Higher is better. A crash, a timeout, a malformed answer, a rectangle outside the strip or an "
        "overlap is not scored."
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances = {split: [make_instance(seed) for seed in seeds] for split, seeds in SEEDS.items()}

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        width, rects = task.inputs["width"], task.inputs["rects"]
        problem = positions_problem(value, len(rects)) or strip_problem(width, rects, value)
        if problem is not None:
            return self.unusable(problem)
        overlap = first_overlap(rects, value)
        if overlap is not None:
            i, j = overlap
            return self.unusable(f"{describe(i, rects[i], value[i])} and {describe(j, rects[j], value[j])} overlap")
        height = max(y + h for (_, y), (_, h) in zip(value, rects))
        bound, by_area, tallest = lower_bound(width, rects)
        score = min(1.0, bound / height)
        fill = sum(w * h for w, h in rects) / (width * height)
        feedback = (
            f"packed height {height:.3f} against the lower bound {bound:.3f} ({score:.4f}; the bound is the "
            f"larger of total area / width {by_area:.3f} and the tallest rectangle {tallest:g}); the rectangles "
            f"fill {fill:.1%} of the strip up to the packed height"
        )
        return TaskScore(score=score, passed=score >= 1.0 - TOLERANCE, executed=True, feedback=feedback)
