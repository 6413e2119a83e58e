"""The order in which the greedy loop of colouring.py colours the vertices."""


# EVOLVE-BLOCK-START
def vertex_order(n: int, neighbours: list[list[int]]) -> list[int]:
    """Every vertex 0..n-1 once, the most neighbours first (ties: the smaller index); neighbours[v] lists the
    vertices adjacent to v."""
    return sorted(range(n), key=lambda vertex: -len(neighbours[vertex]))


# EVOLVE-BLOCK-END
