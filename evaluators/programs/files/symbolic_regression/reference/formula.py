"""A formula for y in terms of x0 and x1."""

# EVOLVE-BLOCK-START
import math


def f(x0: float, x1: float) -> float:
    """The predicted y at the point (x0, x1): the formula the data came from."""
    return 1.5 * x0**2 - 0.8 * math.sin(3.0 * x1) + 0.3 * x0 * x1


# EVOLVE-BLOCK-END
