"""The order in which a travelling salesman visits points of the unit square."""

# EVOLVE-BLOCK-START
import math


def tour(points: list[list[float]]) -> list[int]:
    """A permutation of range(len(points)): nearest neighbour from point 0, then 2-opt until no move helps."""
    n = len(points)
    if n < 4:
        return list(range(n))
    dist = [[math.dist(p, q) for q in points] for p in points]
    order = [0]
    unvisited = set(range(1, n))
    while unvisited:
        here = order[-1]
        nearest = min(unvisited, key=lambda j: (dist[here][j], j))
        order.append(nearest)
        unvisited.remove(nearest)
    improved = True
    while improved:
        improved = False
        for i in range(n - 1):
            for j in range(i + 2, n if i > 0 else n - 1):  # i = 0, j = n - 1: the two edges share order[0]
                a, b, c, d = order[i], order[i + 1], order[j], order[(j + 1) % n]
                if dist[a][c] + dist[b][d] - dist[a][b] - dist[c][d] < -1e-12:
                    order[i + 1 : j + 1] = reversed(order[i + 1 : j + 1])
                    improved = True
    return order


# EVOLVE-BLOCK-END
