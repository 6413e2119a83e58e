"""Greedy graph colouring: each vertex, in the order `vertex_order` gives, takes the smallest colour that its
coloured neighbours leave free."""

from ordering import vertex_order


# EVOLVE-BLOCK-START
def colour(n: int, edges: list[list[int]]) -> list[int]:
    """The colour (0, 1, ...) of each vertex 0..n-1, no edge [u, v] joining two vertices of one colour.

    DSatur: the next vertex is the uncoloured one whose neighbours show the most distinct colours, ties
    going to the earliest in `vertex_order`; the order is thus decided as the colouring goes.
    """
    adjacent: list[set[int]] = [set() for _ in range(n)]
    for u, v in edges:
        adjacent[u].add(v)
        adjacent[v].add(u)
    neighbours = [sorted(vertices) for vertices in adjacent]
    rank = {vertex: position for position, vertex in enumerate(vertex_order(n, neighbours))}
    colours = [-1] * n
    seen: list[set[int]] = [set() for _ in range(n)]
    uncoloured = set(range(n))
    while uncoloured:
        vertex = min(uncoloured, key=lambda v: (-len(seen[v]), rank[v]))
        colours[vertex] = next(c for c in range(n) if c not in seen[vertex])
        uncoloured.remove(vertex)
        for other in neighbours[vertex]:
            seen[other].add(colours[vertex])
    return colours


# EVOLVE-BLOCK-END
