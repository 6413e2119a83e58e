"""Seed program for one ARC task: `transform(grid)` maps an input grid to its output grid.

A grid is a list of rows, each a list of ints 0..9 (colours); all rows have
the same length. The seed returns a copy of its input (the identity), which
already earns partial credit on tasks whose output keeps most of the input.
The standard library, numpy and scipy are importable.
"""

# EVOLVE-BLOCK-START


def transform(grid: list[list[int]]) -> list[list[int]]:
    """Identity: a copy of the input grid."""
    return [list(row) for row in grid]


# EVOLVE-BLOCK-END
