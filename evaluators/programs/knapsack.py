"""`knapsack` (program search, a one-`return` priority function in FunSearch's style).

A greedy packer (the probe, the benchmark's own code) asks the agent's `priority(value, weight,
capacity)` for every item, tries the items from the highest priority down and keeps each that still
fits. The seed ranks by value alone (`return value`); ranking by value per unit of weight (the
reference) packs far more. Score per instance: packed value / the optimum (dynamic programming here),
in [0, 1]. Instances: 60 items with weights and values that are weakly correlated, capacity a third of
the total weight; 4 search and 4 holdout instances from fixed seeds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

ITEMS = 60
SEEDS = {"search": (11, 12, 13, 14), "holdout": (21, 22, 23, 24)}


def make_instance(seed: int, items: int = ITEMS) -> dict[str, Any]:
    """Weights 5..60; values about the weight plus noise (weakly correlated: the hard kind for value greedy)."""
    rng = random.Random(seed)
    weights = [rng.randint(5, 60) for _ in range(items)]
    values = [max(1, w + rng.randint(-20, 40)) for w in weights]
    return {"values": values, "weights": weights, "capacity": sum(weights) // 3}


def optimum(values: Sequence[int], weights: Sequence[int], capacity: int) -> int:
    """The most value that fits: 0/1 knapsack by dynamic programming over capacities."""
    best = [0] * (capacity + 1)
    for value, weight in zip(values, weights):
        for room in range(capacity, weight - 1, -1):
            best[room] = max(best[room], best[room - weight] + value)
    return best[capacity]


class Knapsack(ProgramBenchmark):
    """0/1 knapsack by a greedy packer ordered by the agent's priority function."""

    name = "knapsack"
    description = "A greedy knapsack packer's priority rule: one `return` to evolve (FunSearch style)."
    entry = "priority.py"
    entry_function = "priority"
    probe = "probe.py"
    task_text = (
        "The entry file defines `def priority(value: float, weight: float, capacity: float) -> float`. A greedy "
        "packer calls it once for every item of a 0/1 knapsack instance (value and weight of the item, the "
        "knapsack's capacity), sorts the items by the returned number, highest first, and puts each item in "
        "if it still fits. Each instance has 60 items with weights 5..60 and a capacity of a third of their "
        "total weight.\n"
        "Score per instance: the packed value divided by the best possible value, from 0 to 1; the score is "
        "the mean over the instances. Higher is better. A crash, a timeout or a non-number priority is not "
        "scored."
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances = {split: [make_instance(seed) for seed in seeds] for split, seeds in SEEDS.items()}
        self._optimum = self.per_instance(lambda inst: optimum(inst["values"], inst["weights"], inst["capacity"]))

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        values, weights, capacity = task.inputs["values"], task.inputs["weights"], task.inputs["capacity"]
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            return self.unusable("the packer did not return a list of item indices")
        if len(set(value)) != len(value) or any(not 0 <= i < len(values) for i in value):
            return self.unusable("the packer returned repeated or unknown item indices")
        weight = sum(weights[i] for i in value)
        if weight > capacity:
            return self.unusable(f"the packed items weigh {weight}, over the capacity {capacity}")
        packed = sum(values[i] for i in value)
        best = self._optimum[self.instance_key(task)]
        score = packed / best
        feedback = (
            f"packed value {packed} of the best possible {best} ({score:.4f}); {len(value)} of {len(values)} items, "
            f"weight {weight} of capacity {capacity}"
        )
        return TaskScore(score=score, passed=packed == best, executed=True, feedback=feedback)
