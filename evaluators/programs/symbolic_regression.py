"""`symbolic_regression` (program search: a formula of two variables, regressed from data).

The agent writes `f(x0, x1) -> float`; the probe (the benchmark's own code) calls it on every point of
a task and returns the predictions. A hidden formula, mixing a square, a sine and a product of the two
variables, gives the true y; it stays on the host. The contract shows the 40 points of the search tasks
with their y values, rounded (the visible training data); the holdout points lie in the same range and
their y values appear nowhere: not in the contract, the run's inputs nor the feedback.

Score per task: R^2 = 1 - MSE / variance of y over the task's points, clipped to [0, 1]: a constant
scores 0, the true formula 1. The seed is a linear model with explicit coefficients (0 after clipping;
the best linear fit reaches about 0.55, adding x0**2 about 0.9); the reference is the true formula.
Tasks: 4 search tasks of 10 points and 4 holdout tasks of 20, from fixed seeds; x0 in [-1, 2], x1 in [-2, 2].
"""

from __future__ import annotations

import math
import random
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

X0_RANGE = (-1.0, 2.0)
X1_RANGE = (-2.0, 2.0)
DECIMALS = 3  # of the points' coordinates (exact in the tasks) and of the y values shown in the contract
POINTS = {"search": 10, "holdout": 20}
SEEDS = {"search": (31, 32, 33, 34), "holdout": (41, 42, 43, 44)}
PERFECT = 1e-9  # an R^2 this close to 1 counts as the exact formula


def hidden_formula(x0: float, x1: float) -> float:
    """The y of a point: never shown to the agent."""
    return 1.5 * x0**2 - 0.8 * math.sin(3.0 * x1) + 0.3 * x0 * x1


def make_points(seed: int, count: int) -> list[list[float]]:
    """`count` points [x0, x1], uniform in the ranges and rounded to DECIMALS."""
    rng = random.Random(seed)
    return [[round(rng.uniform(*X0_RANGE), DECIMALS), round(rng.uniform(*X1_RANGE), DECIMALS)] for _ in range(count)]


def training_table() -> str:
    """The search tasks' points with their y values, one `x0, x1, y` line each, for the contract."""
    rows = [
        f"{x0:.{DECIMALS}f}, {x1:.{DECIMALS}f}, {hidden_formula(x0, x1):.{DECIMALS}f}"
        for seed in SEEDS["search"]
        for x0, x1 in make_points(seed, POINTS["search"])
    ]
    return "x0, x1, y\n" + "\n".join(rows)


class SymbolicRegression(ProgramBenchmark):
    """Regress a hidden formula y = f(x0, x1) from the 40 data points the contract shows."""

    name = "symbolic_regression"
    description = "Symbolic regression: find the formula of two variables behind 40 data points."
    entry = "formula.py"
    entry_function = "f"
    probe = "probe.py"
    task_text = (
        "The entry file defines `def f(x0: float, x1: float) -> float`, a formula for y. Each task calls it on "
        f"a set of points with x0 in [{X0_RANGE[0]:g}, {X0_RANGE[1]:g}] and x1 in [{X1_RANGE[0]:g}, "
        f"{X1_RANGE[1]:g}]; y is an exact function of x0 and x1 (no noise). The search tasks use the 40 points "
        f"below (y rounded to {DECIMALS} decimals); other points in the same range are held out.\n"
        "Score per task: R^2 = 1 - (mean squared error) / (variance of y over the task's points), clipped to "
        "[0, 1]: a constant scores 0, the exact formula 1; the score is the mean over the tasks. Higher is "
        "better. A crash, a timeout or a non-number or non-finite value is not scored.\n"
        f"{training_table()}"
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances = {
            split: [{"points": make_points(seed, POINTS[split])} for seed in seeds] for split, seeds in SEEDS.items()
        }
        self._targets = self.per_instance(lambda inst: [hidden_formula(x0, x1) for x0, x1 in inst["points"]])

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        points = task.inputs["points"]
        if not isinstance(value, list) or len(value) != len(points):
            return self.unusable(f"the probe did not return a list of {len(points)} predictions")
        if not all(isinstance(y, (int, float)) and not isinstance(y, bool) and math.isfinite(y) for y in value):
            return self.unusable("a prediction is not a finite number")
        targets = self._targets[self.instance_key(task)]
        mean = sum(targets) / len(targets)
        variance = sum((y - mean) * (y - mean) for y in targets) / len(targets)
        # Products, not `** 2`: a huge prediction makes the error inf (R^2 clipped to 0) instead of raising.
        errors = [(float(p) - y) * (float(p) - y) for p, y in zip(value, targets)]
        mse = sum(errors) / len(errors)
        r2 = 1.0 - mse / variance
        score = min(1.0, max(0.0, r2))
        feedback = f"R^2 {r2:.4f} on {len(points)} points" + (" (scored 0: worse than the mean of y)" if r2 < 0 else "")
        if task.split == "search" and mse > 0:  # these y values are in the contract; holdout ones are never shown
            worst = max(range(len(errors)), key=errors.__getitem__)
            x0, x1 = points[worst]
            feedback += (
                f"; mean squared error {mse:.4g} against the variance of y {variance:.4g}; largest error at "
                f"x0={x0:g}, x1={x1:g}: predicted {float(value[worst]):.4g}, y is {targets[worst]:.4g}"
            )
        return TaskScore(score=score, passed=r2 >= 1.0 - PERFECT, executed=True, feedback=feedback)
