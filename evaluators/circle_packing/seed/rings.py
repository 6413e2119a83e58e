"""Seed program for circle packing: n circles in the unit square, maximise the sum of radii.

`pack_circles(n)` returns one (x, y, r) triple per circle: centre (x, y) and
radius r, all in unit-square coordinates. Every circle must lie inside
[0, 1] x [0, 1] and no two may overlap. The standard library, numpy and
scipy are importable.

The seed places the centres on rings around the middle (the shape of the
seed in OpenEvolve's and ShinkaEvolve's circle-packing examples) and then
gives each circle the largest radius its walls and neighbours allow, so any
layout of centres is a valid packing. The evolve block holds the imports and
every function, signatures included, so an edit may restructure freely
(helpers, constants, another algorithm) as long as `pack_circles(n)` keeps
its contract.
"""

# EVOLVE-BLOCK-START
import math


def pack_circles(n: int) -> list[tuple[float, float, float]]:
    """Centres on rings around the middle, then the largest radii they allow: valid for every n, far from best."""
    centres = ring_centres(n)
    radii = largest_radii(centres)
    return [(x, y, r) for (x, y), r in zip(centres, radii)]


def ring_centres(n: int) -> list[tuple[float, float]]:
    """One centre in the middle, then rings of 8, 16, 24, ... centres, 0.35 apart, kept inside the square."""
    centres = [(0.5, 0.5)]
    ring = 1
    while len(centres) < n:
        count = min(8 * ring, n - len(centres))
        distance = 0.35 * ring
        for k in range(count):
            angle = 2 * math.pi * k / count
            x = 0.5 + distance * math.cos(angle)
            y = 0.5 + distance * math.sin(angle)
            centres.append((min(max(x, 0.01), 0.99), min(max(y, 0.01), 0.99)))
        ring += 1
    return centres[:n]


def largest_radii(centres: list[tuple[float, float]]) -> list[float]:
    """Each radius as large as the nearest wall and half the distance to the nearest other centre: no overlaps."""
    radii = []
    for i, (x, y) in enumerate(centres):
        radius = min(x, y, 1 - x, 1 - y)
        for j, (u, v) in enumerate(centres):
            if j != i:
                radius = min(radius, math.dist((x, y), (u, v)) / 2)
        radii.append(radius)
    return radii


# EVOLVE-BLOCK-END
