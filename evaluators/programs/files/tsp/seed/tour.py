"""The order in which a travelling salesman visits points of the unit square."""


# EVOLVE-BLOCK-START
def tour(points: list[list[float]]) -> list[int]:
    """A permutation of range(len(points)); the tour returns from its last point to its first."""
    return list(range(len(points)))


# EVOLVE-BLOCK-END
