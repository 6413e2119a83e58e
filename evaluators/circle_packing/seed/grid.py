"""Seed program for circle packing: n circles in the unit square, maximise the sum of radii.

`pack_circles(n)` returns one (x, y, r) triple per circle: centre (x, y) and
radius r, all in unit-square coordinates. Every circle must lie inside
[0, 1] x [0, 1] and no two may overlap. The standard library, numpy and
scipy are importable.

This is the `start = "grid"` seed: equal circles on a square grid (2.1667
for n = 26), a strict local optimum that no edit of one to three of its
constants improves. The evolve block holds the imports and the whole
function, signature included, so an edit may restructure freely (helpers, constants, another
algorithm) as long as `pack_circles(n)` keeps its contract.
"""

# EVOLVE-BLOCK-START
import math


def pack_circles(n: int) -> list[tuple[float, float, float]]:
    """Equal circles on a square grid: valid for every n, far from the best packing."""
    columns = math.ceil(math.sqrt(n))
    rows = math.ceil(n / columns)
    radius = 0.5 / max(columns, rows)
    circles = []
    for index in range(n):
        row, column = divmod(index, columns)
        circles.append(((2 * column + 1) * radius, (2 * row + 1) * radius, radius))
    return circles


# EVOLVE-BLOCK-END
