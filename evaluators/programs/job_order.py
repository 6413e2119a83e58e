"""`job_order` (program search, a seed with no numeric constant at all: nothing to tune, only logic to change).

One machine runs a set of jobs back to back, in the order of the job ids the agent's `order(jobs)`
returns; the cost is the total weighted completion time, sum of weight * completion time. The seed
runs the heaviest jobs first, a rule with no numbers in it; the reference is Smith's rule (the
highest weight / length first), which is optimal. Score per instance: the optimal cost (Smith's rule,
here) / the program's cost, in (0, 1]. Instances: 30..50 jobs with lengths 1..50 (log-uniform) and
weights about the square root of the length (times 0.5..2), so that heavy jobs tend to be long and
weight alone is a poor guide; ids are distinct numbers 100..999, not positions; 4 search and 4
holdout instances from fixed seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

SEEDS = {"search": (11, 12, 13, 14), "holdout": (21, 22, 23, 24)}


def make_instance(seed: int) -> dict[str, Any]:
    """30..50 jobs: length log-uniform in 1..50; weight sqrt(length) * 0.5..2, both to one decimal."""
    rng = random.Random(seed)
    jobs = []
    for job_id in rng.sample(range(100, 1000), rng.randint(30, 50)):
        length = round(math.exp(rng.uniform(0.0, math.log(50.0))), 1)
        weight = round(math.sqrt(length) * rng.uniform(0.5, 2.0), 1)
        jobs.append({"id": job_id, "length": length, "weight": weight})
    return {"jobs": jobs}


def weighted_completion(jobs: Sequence[Mapping[str, Any]]) -> float:
    """Sum of weight * completion time of `jobs` run back to back in this order from time 0."""
    clock = cost = 0.0
    for job in jobs:
        clock += job["length"]
        cost += job["weight"] * clock
    return cost


def smith_order(jobs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The optimal order (Smith's rule): the highest weight per unit of length first."""
    return sorted(jobs, key=lambda job: -job["weight"] / job["length"])


class JobOrder(ProgramBenchmark):
    """Single-machine scheduling for the least total weighted completion time, in the agent's order."""

    name = "job_order"
    description = "Order jobs on one machine for the least total weighted completion time (a seed with no numbers)."
    entry = "order.py"
    entry_function = "order"
    task_text = (
        "The entry file defines `def order(jobs: list[dict]) -> list[int]`. Each job is a dict "
        '{"id": int, "length": float, "weight": float}; the return is every job id exactly once, in the order '
        "one machine runs the jobs, back to back from time 0. A job completes when it and every job before it "
        "have run; the cost is the sum over the jobs of weight * completion time. Each instance has 30..50 "
        "jobs with lengths 1..50 and weights 0.5..15; ids are distinct numbers from 100..999, not positions.\n"
        "Score per instance: the least possible cost divided by the cost of the returned order, from 0 to 1; "
        "the score is the mean over the instances. Higher is better. A crash, a timeout or a return that is "
        "not an order of all the job ids is not scored."
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances = {split: [make_instance(seed) for seed in seeds] for split, seeds in SEEDS.items()}
        self._optimum = self.per_instance(lambda inst: weighted_completion(smith_order(inst["jobs"])))

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        by_id = {job["id"]: job for job in task.inputs["jobs"]}
        if not isinstance(value, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in value):
            return self.unusable("order did not return a list of integer job ids")
        unknown = next((i for i in value if i not in by_id), None)
        if unknown is not None:
            return self.unusable(f"{unknown} is not the id of a job of this instance")
        ran: set[int] = set()
        for job_id in value:
            if job_id in ran:
                return self.unusable(f"job {job_id} appears more than once in the order")
            ran.add(job_id)
        if len(value) != len(by_id):
            missing = sorted(set(by_id) - set(value))
            return self.unusable(
                f"the order leaves out {len(missing)} of the {len(by_id)} jobs, job {missing[0]} among them"
            )
        schedule = [by_id[i] for i in value]
        cost = weighted_completion(schedule)
        best = self._optimum[self.instance_key(task)]
        # Smith's order is optimal: a ratio past 1 is only float rounding among jobs of equal ratio.
        score = min(1.0, best / cost)
        swappable = sum(a["weight"] * b["length"] < b["weight"] * a["length"] for a, b in zip(schedule, schedule[1:]))
        feedback = (
            f"total weighted completion time {cost:.1f} against the least possible {best:.1f} ({score:.4f}); "
            f"{swappable} of the {len(schedule) - 1} neighbouring pairs of jobs would cost less swapped"
        )
        return TaskScore(score=score, passed=score >= 1.0 - 1e-9, executed=True, feedback=feedback)
