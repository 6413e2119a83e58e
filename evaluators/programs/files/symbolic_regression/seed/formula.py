"""A formula for y in terms of x0 and x1."""


# EVOLVE-BLOCK-START
def f(x0: float, x1: float) -> float:
    """The predicted y at the point (x0, x1)."""
    return 0.5 * x0 + 0.5 * x1 + 0.0


# EVOLVE-BLOCK-END
