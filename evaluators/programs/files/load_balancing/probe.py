"""The load-balancing benchmark's dispatcher: it feeds the agent's Balancer one job at a time (runs in the sandbox)."""

import importlib
import operator


def evaluate(module, machines, jobs):
    """The machine the agent's Balancer chose for each job, in arrival order."""
    balancer = importlib.import_module(module).Balancer(machines)
    placed = []
    for index, job in enumerate(jobs):
        machine = balancer.assign(float(job))
        # Integers of any kind (numpy's too) are indices; a bool or a float is not.
        if isinstance(machine, bool) or not hasattr(type(machine), "__index__"):
            raise TypeError(f"assign returned {machine!r} for job {index}; it must return a machine index")
        machine = operator.index(machine)
        if not 0 <= machine < machines:
            raise ValueError(f"assign returned {machine} for job {index}; machines are numbered 0..{machines - 1}")
        placed.append(machine)
    return placed
