"""The fast_primes benchmark's timer: the agent's count_primes against the baseline (runs in the sandbox)."""

import importlib
import importlib.util
import math
from time import perf_counter  # bound before the agent's module loads, so that it cannot swap this clock

ROUNDS = 3


def baseline_count_primes(n):
    """The seed's algorithm, kept here: trial division of every k < n by every odd d up to sqrt(k)."""
    count = 0
    for k in range(2, n):
        if k % 2 == 0:
            count += k == 2
            continue
        d = 3
        while d * d <= k:
            if k % d == 0:
                break
            d += 2
        else:
            count += 1
    return count


def evaluate(module, ns):
    """{"counts": the agent's answers for ns, "baseline_s": ..., "agent_s": ...}: the fastest of ROUNDS each."""
    clock = perf_counter  # a local, taken before the agent's code runs: patching the module's name cannot reach it
    spec = importlib.import_module(module).__spec__  # a broken module fails here, with its own traceback
    baseline_s = agent_s = math.inf
    counts = None
    for _ in range(ROUNDS):
        started = clock()
        [baseline_count_primes(n) for n in ns]
        baseline_s = min(baseline_s, clock() - started)
        # A fresh copy of the module each round: an answer cached in one round cannot make the next one fast.
        fresh = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(fresh)
        count_primes = fresh.count_primes
        started = clock()
        answers = [count_primes(n) for n in ns]
        agent_s = min(agent_s, clock() - started)
        if counts is not None and answers != counts:
            raise ValueError(f"count_primes gave {answers} for n = {ns} in one round and {counts} in another")
        counts = answers
    return {"counts": counts, "baseline_s": baseline_s, "agent_s": agent_s}
