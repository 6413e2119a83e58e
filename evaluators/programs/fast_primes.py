"""`fast_primes` (program search: make a correct function faster).

The agent writes `count_primes(n) -> int`, how many primes are below n; the seed divides every number by
every odd d up to its square root (correct and slow). The probe (the benchmark's own code) times the agent
against its own copy of the seed's algorithm, the baseline, on a task's three values of n: baseline and
agent alternately, 3 rounds, the minimum time of each kept. The timings are measured inside the sandbox,
relative to a baseline timed in the same process, so the machine's speed cancels out; they still vary a
little from run to run, and so does the score (a few percent): that is expected for this task.

Every count is checked here against a sieve; one wrong count makes the result unusable. Score per task:
1 + log10(baseline time / agent time), from 0 (clipped) to 4 (capped, 1000 times faster): the seed scores
about 1, ten times faster 2. The reference, a sieve of Eratosthenes on a bytearray, scores about 2.9.
Tasks: 4 search and 4 holdout, each with 3 values of n from 40,000 to 100,000 drawn from fixed seeds.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

N_RANGE = (40_000, 100_000)
VALUES_PER_TASK = 3
SEEDS = {"search": (71, 72, 73, 74), "holdout": (81, 82, 83, 84)}
ROUNDS = 3  # of the probe: every round runs the baseline and the agent once on all of a task's n
MAX_SCORE = 4.0  # 1000 times the baseline's speed: past it, timer noise outweighs the gain


def make_instance(seed: int) -> dict[str, Any]:
    """VALUES_PER_TASK distinct values of n in N_RANGE."""
    rng = random.Random(seed)
    return {"ns": rng.sample(range(N_RANGE[0], N_RANGE[1] + 1), VALUES_PER_TASK)}


def prime_counts(ns: Sequence[int]) -> dict[int, int]:
    """The number of primes below each n, by one sieve of Eratosthenes up to the largest."""
    limit = max([2, *ns])
    sieve = bytearray([1]) * limit
    sieve[: min(2, limit)] = bytes(min(2, limit))
    for p in range(2, math.isqrt(limit - 1) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytes(len(range(p * p, limit, p)))
    return {n: sum(sieve[:n]) for n in ns}


def _seconds(value: Any) -> float | None:
    """`value` as a positive, finite number of seconds, else None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        return None
    return float(value)


class FastPrimes(ProgramBenchmark):
    """Count the primes below n, faster than trial division; scored by the measured speedup."""

    name = "fast_primes"
    description = "Speed up a correct prime counter (trial division): scored by measured speedup."
    entry = "primes.py"
    entry_function = "count_primes"
    probe = "probe.py"
    task_text = (
        "The entry file defines `def count_primes(n: int) -> int`: how many primes are below n (n >= 0; "
        f"count_primes(10) is 4). Each task calls it on {VALUES_PER_TASK} values of n from {N_RANGE[0]:,} to "
        f"{N_RANGE[1]:,}, timed against the starting program's trial division (the baseline) in the same "
        f"process: baseline and yours alternately, {ROUNDS} rounds, the fastest of each kept. Your module is "
        "loaded afresh before each round, so nothing it caches carries over from one round to the next.\n"
        "Every count must be right: one wrong count and the task is not scored. Score per task: 1 + "
        "log10(baseline time / your time), clipped to [0, 4]: as fast as the baseline scores 1, 10 times "
        "faster 2, 100 times faster 3. The score is the mean over the tasks; timings vary a few percent "
        "from run to run. Higher is better. A crash or a timeout is not scored."
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances = {split: [make_instance(seed) for seed in seeds] for split, seeds in SEEDS.items()}
        every_n = [n for instances in self._instances.values() for inst in instances for n in inst["ns"]]
        self._counts = prime_counts(every_n)

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        ns = task.inputs["ns"]
        if not isinstance(value, dict) or not {"counts", "baseline_s", "agent_s"} <= value.keys():
            return self.unusable("the timer did not return its counts and timings")
        counts = value["counts"]
        if not isinstance(counts, list) or len(counts) != len(ns):
            return self.unusable(f"the timer did not return {len(ns)} counts")
        for n, count in zip(ns, counts):
            if isinstance(count, bool) or not isinstance(count, int):
                return self.unusable(f"count_primes({n}) returned {count!r}, not an int")
            if count != self._counts[n]:
                return self.unusable(f"count_primes({n}) returned {count}, which is not the number of primes below {n}")
        baseline_s, agent_s = _seconds(value["baseline_s"]), _seconds(value["agent_s"])
        if baseline_s is None or agent_s is None:
            return self.unusable("the timer did not return two positive times")
        # Each kept time is the fastest of ROUNDS timed calls, all inside the run the host timed.
        if ROUNDS * (baseline_s + agent_s) > result.duration_s:
            return self.unusable("the timings claim more time than the run took")
        speedup = baseline_s / agent_s
        score = min(MAX_SCORE, max(0.0, 1.0 + math.log10(speedup)))
        capped = ", the highest there is" if score == MAX_SCORE else ""
        feedback = (
            f"all {len(ns)} counts right; {speedup:.3g} times the baseline's speed: {agent_s * 1e3:.3g} ms against "
            f"{baseline_s * 1e3:.3g} ms for n = {', '.join(map(str, ns))} (score {score:.3f}{capped})"
        )
        return TaskScore(score=score, passed=True, executed=True, feedback=feedback)
