"""`load_balancing` (program search, a seed that is a class: an online balancer with state).

Jobs arrive one at a time and each must go to one of m identical machines at once, before the next
is known. The probe (the benchmark's own code) builds the agent's `Balancer(machines)` and calls its
`assign(job)` for every job in arrival order. The seed deals the jobs round robin, blind to their
sizes; the reference puts each on the machine with the least load so far (Graham's list scheduling).
Score per instance: lower bound / makespan, in (0, 1], where the makespan is the largest total size
on one machine and the lower bound is max(total size / m, largest job); no online rule reaches 1 on
every instance. Instances: 4..10 machines and 60..100 jobs, most of size 1..8 and about one in seven
of size 15..40; 4 search and 4 holdout instances from fixed seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

SEEDS = {"search": (11, 12, 13, 14), "holdout": (21, 22, 23, 24)}
LARGE_SHARE = 0.15  # the share of large jobs: enough that where they land decides the makespan


def make_instance(seed: int) -> dict[str, Any]:
    """4..10 machines; 60..100 job sizes, small (1..8) but for about one in seven large (15..40)."""
    rng = random.Random(seed)
    machines = rng.randint(4, 10)
    jobs = [
        round(rng.uniform(15.0, 40.0) if rng.random() < LARGE_SHARE else rng.uniform(1.0, 8.0), 2)
        for _ in range(rng.randint(60, 100))
    ]
    return {"machines": machines, "jobs": jobs}


def lower_bound(machines: int, jobs: Sequence[float]) -> float:
    """No schedule, online or not, has a smaller makespan: the mean load, and the largest job."""
    return max(sum(jobs) / machines, max(jobs))


class LoadBalancing(ProgramBenchmark):
    """Online makespan minimisation on identical machines by the agent's stateful `Balancer`."""

    name = "load_balancing"
    description = "An online load balancer: a class whose `assign` places each arriving job on a machine."
    entry = "balancer.py"
    entry_function = "Balancer"
    probe = "probe.py"
    task_text = (
        "The entry file defines `class Balancer` with `__init__(self, machines: int)` and "
        "`assign(self, job: float) -> int`. For each instance one `Balancer(machines)` is built and `assign` "
        "is called once per job, in arrival order, with the job's size; it returns the index (0..machines-1) "
        "of the machine that runs the job, at once and for good, without seeing the jobs still to come. The "
        "object may keep any state between calls. Each instance has 4..10 identical machines and 60..100 jobs: "
        "most of size 1..8, about one in seven of size 15..40.\n"
        "Score per instance: a lower bound divided by the makespan (the largest total size of the jobs on one "
        "machine), from 0 to 1, where the lower bound is the larger of the total size / machines and the "
        "largest job; the score is the mean over the instances. Higher is better. A crash, a timeout or an "
        "index that is not a machine is not scored."
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances = {split: [make_instance(seed) for seed in seeds] for split, seeds in SEEDS.items()}

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        machines, jobs = task.inputs["machines"], task.inputs["jobs"]
        if not isinstance(value, list) or not all(isinstance(m, int) and not isinstance(m, bool) for m in value):
            return self.unusable("the balancer's placements are not a list of machine indices")
        if len(value) != len(jobs):
            return self.unusable(f"the balancer placed {len(value)} jobs; the instance has {len(jobs)}")
        stray = next((i for i, m in enumerate(value) if not 0 <= m < machines), None)
        if stray is not None:
            return self.unusable(f"job {stray} went to machine {value[stray]}, not one of 0..{machines - 1}")
        loads = [0.0] * machines
        counts = [0] * machines
        for job, machine in zip(jobs, value):
            loads[machine] += job
            counts[machine] += 1
        makespan = max(loads)
        bound = lower_bound(machines, jobs)
        busiest = loads.index(makespan)
        score = bound / makespan
        feedback = (
            f"makespan {makespan:.2f} against the lower bound {bound:.2f} ({score:.4f}); the busiest machine "
            f"{busiest} runs {counts[busiest]} of {len(jobs)} jobs, the least loaded carries {min(loads):.2f}; "
            f"{machines} machines, largest job {max(jobs):.2f}"
        )
        return TaskScore(score=score, passed=math.isclose(makespan, bound), executed=True, feedback=feedback)
