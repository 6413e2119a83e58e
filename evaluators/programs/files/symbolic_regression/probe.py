"""The symbolic regression benchmark's caller: the agent's f on every point of a task (runs in the sandbox)."""

import importlib
import math
import numbers


def evaluate(module, points):
    """The agent's predictions, one float per point [x0, x1], in order."""
    f = importlib.import_module(module).f
    predictions = []
    for x0, x1 in points:
        y = f(float(x0), float(x1))
        if isinstance(y, bool) or not isinstance(y, numbers.Real) or not math.isfinite(y):
            raise TypeError(f"f({x0}, {x1}) returned {y!r}; it must return a finite number")
        predictions.append(float(y))
    return predictions
