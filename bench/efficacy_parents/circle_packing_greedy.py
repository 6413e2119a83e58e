"""A second parent for crossover in bench/fm_efficacy.py: greedy placement, structurally unlike the seed's grid.

Each circle goes where the largest radius fits, found on a lattice of candidate
centres; the radius is capped so later circles still find room.
"""

# EVOLVE-BLOCK-START
import math


def pack_circles(n: int) -> list[tuple[float, float, float]]:
    """Greedy: place each circle at the lattice point with the most room (capped radius)."""
    steps = 60
    cap = 0.6 / math.sqrt(n)
    circles: list[tuple[float, float, float]] = []
    for _ in range(n):
        best = (0.0, 0.5, 0.5)
        for i in range(1, steps):
            for j in range(1, steps):
                x, y = i / steps, j / steps
                room = min(x, y, 1 - x, 1 - y, cap)
                for cx, cy, cr in circles:
                    room = min(room, math.hypot(x - cx, y - cy) - cr)
                if room > best[0]:
                    best = (room, x, y)
        radius, x, y = best
        circles.append((x, y, max(radius, 0.0)))
    return circles


# EVOLVE-BLOCK-END
