"""Seed program for the curve-fitting example: `f(x)` should match the points in the contract.

Only the standard library is guaranteed to be importable inside the sandbox.
"""

# EVOLVE-BLOCK-START


def f(x: float) -> float:
    """A flat line through the mean of the points: valid, far from a good fit."""
    return 1.0


# EVOLVE-BLOCK-END
