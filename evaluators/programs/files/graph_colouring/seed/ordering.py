"""The order in which the greedy loop of colouring.py colours the vertices."""


# EVOLVE-BLOCK-START
def vertex_order(n: int, neighbours: list[list[int]]) -> list[int]:
    """Every vertex 0..n-1 once, the first to be coloured first; neighbours[v] lists the vertices adjacent to v."""
    return list(range(n))


# EVOLVE-BLOCK-END
