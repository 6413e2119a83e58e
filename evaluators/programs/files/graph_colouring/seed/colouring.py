"""Greedy graph colouring: each vertex, in the order `vertex_order` gives, takes the smallest colour that its
coloured neighbours leave free."""

from ordering import vertex_order


# EVOLVE-BLOCK-START
def colour(n: int, edges: list[list[int]]) -> list[int]:
    """The colour (0, 1, ...) of each vertex 0..n-1, no edge [u, v] joining two vertices of one colour."""
    adjacent: list[set[int]] = [set() for _ in range(n)]
    for u, v in edges:
        adjacent[u].add(v)
        adjacent[v].add(u)
    neighbours = [sorted(vertices) for vertices in adjacent]
    colours = [-1] * n
    for vertex in vertex_order(n, neighbours):
        taken = {colours[other] for other in neighbours[vertex]}
        colours[vertex] = next(c for c in range(n) if c not in taken)
    return colours


# EVOLVE-BLOCK-END
