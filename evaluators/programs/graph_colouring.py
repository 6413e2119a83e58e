"""`graph_colouring` (program search, a two-file genome: a greedy colourer and the vertex order it follows).

The entry file `colouring.py` defines `colour(n, edges)`; it imports `vertex_order(n, neighbours)` from
the genome's second file, `ordering.py`, and gives each vertex, in that order, the smallest colour its
coloured neighbours leave free. Both files have an EVOLVE-BLOCK. The seed visits the vertices by
index; the reference is DSatur (colour next the vertex that sees the most distinct colours, ties to
the largest degree, which `ordering.py` supplies). Score per instance: the best known number of
colours / the number the program used, where the best known is the chromatic number of a graph built
bipartite and otherwise the count of the host's own DSatur; above 1 when a program beats DSatur.
Instances: 50..80 vertices: two random graphs G(n, p) of different densities, a crown graph and a
sparse random bipartite graph, the last two numbered so that the index order is the worst; 4 search
and 4 holdout instances from fixed seeds.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

from cambrian.evaluators.base import FeedbackPolicy, Task, TaskScore
from cambrian.evaluators.programs._base import ProgramBenchmark
from cambrian.sandbox.base import RunResult

#: Per split: (kind, vertices, edge probability, seed). In a bipartite kind the even vertices form one side.
GRAPHS: dict[str, tuple[tuple[str, int, float, int], ...]] = {
    "search": (("random", 70, 0.1, 11), ("random", 60, 0.3, 12), ("crown", 60, 1.0, 13), ("bipartite", 70, 0.15, 14)),
    "holdout": (("random", 80, 0.15, 21), ("random", 50, 0.25, 22), ("crown", 54, 1.0, 23), ("bipartite", 64, 0.2, 24)),
}


def make_graph(kind: str, n: int, p: float, seed: int) -> list[list[int]]:
    """The edges [u, v], u < v, sorted, of a graph on vertices 0..n-1.

    random: G(n, p). crown: K(n/2, n/2) less a perfect matching, even vertex 2i joined to every odd
    vertex but 2i + 1, which makes greedy in index order use n/2 colours. bipartite: each even-odd
    pair joined with probability p, the sides again interleaved.
    """
    rng = random.Random(seed)
    if kind == "random":
        return [[u, v] for u in range(n) for v in range(u + 1, n) if rng.random() < p]
    if kind == "crown":
        return [
            [u, v] for u in range(n) for v in range(u + 1, n) if (v - u) % 2 == 1 and not (u % 2 == 0 and v == u + 1)
        ]
    if kind == "bipartite":
        return [[u, v] for u in range(n) for v in range(u + 1, n) if (v - u) % 2 == 1 and rng.random() < p]
    raise ValueError(f"unknown graph kind {kind!r}")


def neighbour_sets(n: int, edges: Sequence[Sequence[int]]) -> list[set[int]]:
    """The vertices adjacent to each vertex 0..n-1."""
    adjacent: list[set[int]] = [set() for _ in range(n)]
    for u, v in edges:
        adjacent[u].add(v)
        adjacent[v].add(u)
    return adjacent


def dsatur_colours(n: int, edges: Sequence[Sequence[int]]) -> int:
    """How many colours DSatur uses: the next vertex sees the most distinct colours, then has the most
    neighbours, then the smallest index; it takes the smallest free colour."""
    adjacent = neighbour_sets(n, edges)
    colours = [-1] * n
    seen: list[set[int]] = [set() for _ in range(n)]
    for _ in range(n):
        vertex = max((v for v in range(n) if colours[v] < 0), key=lambda v: (len(seen[v]), len(adjacent[v]), -v))
        colours[vertex] = next(c for c in range(n) if c not in seen[vertex])
        for other in adjacent[vertex]:
            seen[other].add(colours[vertex])
    return len(set(colours))


class GraphColouring(ProgramBenchmark):
    """Graph colouring by a greedy colourer (colouring.py) and the vertex order it follows (ordering.py)."""

    name = "graph_colouring"
    description = "Greedy graph colouring split over two files: the colouring loop and the vertex order."
    entry = "colouring.py"
    entry_function = "colour"
    task_text = (
        "The program has two files. The entry file `colouring.py` defines "
        "`def colour(n: int, edges: list[list[int]]) -> list[int]`: given an undirected graph on the vertices "
        "0..n-1 and its edges as pairs [u, v], it returns the colour (an int >= 0) of every vertex, in vertex "
        "order, such that no edge joins two vertices of the same colour. It imports "
        "`vertex_order(n, neighbours)` from the second file, `ordering.py` (neighbours[v]: the sorted list of "
        "the vertices adjacent to v), which returns the order in which the greedy loop colours the vertices. "
        "Both files may change between their markers. Each instance is a graph of 50..80 vertices: random "
        "graphs of several densities, and graphs that are bipartite.\n"
        "Score per instance: the best known number of colours divided by the number of distinct colours used; "
        "the best known is 2 for a bipartite graph and otherwise what the DSatur heuristic uses, so beating "
        "DSatur scores above 1. The score is the mean over the instances. Higher is better. A crash, a timeout "
        "or a colouring that gives two adjacent vertices the same colour is not scored."
    )

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        super().__init__(timeout_s=timeout_s, memory_mb=memory_mb, feedback_policy=feedback_policy)
        self._instances: dict[str, list[dict[str, Any]]] = {}
        self._best: dict[tuple[str, int], tuple[int, str]] = {}
        for split, graphs in GRAPHS.items():
            self._instances[split] = []
            for i, (kind, n, p, seed) in enumerate(graphs):
                edges = make_graph(kind, n, p, seed)
                self._instances[split].append({"n": n, "edges": edges})
                if kind == "random":
                    self._best[(split, i)] = (dsatur_colours(n, edges), "DSatur's count")
                else:  # built bipartite, with edges: exactly two colours
                    self._best[(split, i)] = (2, "the graph is bipartite")

    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        n, edges = task.inputs["n"], task.inputs["edges"]
        if not isinstance(value, list) or not all(isinstance(c, int) and not isinstance(c, bool) for c in value):
            return self.unusable("colour did not return a list of integer colours")
        if len(value) != n:
            return self.unusable(f"colour returned {len(value)} colours for a graph of {n} vertices")
        negative = next((v for v, c in enumerate(value) if c < 0), None)
        if negative is not None:
            return self.unusable(f"vertex {negative} has colour {value[negative]}; colours are integers >= 0")
        clash = next(((u, v) for u, v in edges if value[u] == value[v]), None)
        if clash is not None:
            u, v = clash
            return self.unusable(f"the edge [{u}, {v}] joins two vertices of colour {value[u]}")
        used = len(set(value))
        best, source = self._best[self.instance_key(task)]
        score = best / used
        feedback = f"{used} colours used where {best} suffice ({source}): {score:.4f}; {n} vertices, {len(edges)} edges"
        return TaskScore(score=score, passed=used <= best, executed=True, feedback=feedback)
