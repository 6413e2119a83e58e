"""The edits bench/embeddings.py measures: real programs of Cambrian's benchmarks, each with trivial edits
(a constant changed, a docstring or comment reworded, a local variable renamed) and real ones (a loop
rewritten as a comprehension or back, another algorithm: the suite's reference program or seed).

A near-duplicate gate should find every trivial edit closer to its parent than any real one. Each edit is
written out here as text replacements (each must match exactly as often as stated), so the cases can be
read and re-run; the parents are the benchmarks' own seeds and reference programs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TRIVIAL = "trivial"
REAL = "real"


@dataclass(frozen=True)
class Edit:
    """One variant of a parent: its kind (constant, docstring, rename, comprehension, algorithm), its class
    (trivial or real), a line saying what changed, and the variant's files."""

    kind: str
    label: str
    what: str
    files: Mapping[str, str]


@dataclass(frozen=True)
class Case:
    """A parent program (files by path) and its edits."""

    name: str
    parent: Mapping[str, str]
    edits: tuple[Edit, ...]


def _replaced(files: Mapping[str, str], path: str, *pairs: tuple[str, str], count: int = 1) -> dict[str, str]:
    """`files` with each (old, new) replaced in `path`; each old must occur exactly `count` times."""
    text = files[path]
    for old, new in pairs:
        found = text.count(old)
        if found != count:
            raise AssertionError(f"{path}: {old!r} occurs {found} times, expected {count}")
        text = text.replace(old, new)
    return {**files, path: text}


def _edit(kind: str, what: str, files: Mapping[str, str]) -> Edit:
    label = REAL if kind in ("comprehension", "algorithm") else TRIVIAL
    return Edit(kind=kind, label=label, what=what, files=files)


def cases() -> list[Case]:
    """Every parent with its edits: eight programs of 200 to 12,000 characters, 33 edits."""
    from cambrian.evaluators.circle_packing import CirclePacking
    from cambrian.evaluators.registry import get_benchmark

    def seed(name: str) -> dict[str, str]:
        return dict(get_benchmark(name, {}).seed().files)

    def reference(name: str) -> dict[str, str]:
        return dict(get_benchmark(name, {}).reference().files)  # type: ignore[attr-defined]

    rings = dict(CirclePacking(start="rings").seed().files)
    grid = dict(CirclePacking(start="grid").seed().files)
    return [
        _circle_packing(rings, grid),
        _fast_primes(seed("fast_primes"), reference("fast_primes")),
        _tsp(reference("tsp"), seed("tsp")),
        _graph_colouring(reference("graph_colouring"), seed("graph_colouring")),
        _load_balancing(seed("load_balancing"), reference("load_balancing")),
        _strip_packing(seed("strip_packing"), reference("strip_packing")),
        Case(
            "knapsack (seed)",
            seed("knapsack"),
            (
                _edit(
                    "docstring",
                    "the docstring reworded",
                    _replaced(
                        seed("knapsack"),
                        "priority.py",
                        (
                            "Items with a higher priority are tried first.",
                            "An item of higher priority is tried earlier.",
                        ),
                    ),
                ),
                _edit("algorithm", "the reference: value per unit of weight", reference("knapsack")),
            ),
        ),
        Case(
            "job_order (seed)",
            seed("job_order"),
            (
                _edit(
                    "rename",
                    "job -> item in the comprehension and the key",
                    _replaced(
                        seed("job_order"),
                        "order.py",
                        ('job["id"] for job in', 'item["id"] for item in'),
                        ('lambda job: -job["weight"]', 'lambda item: -item["weight"]'),
                    ),
                ),
                _edit("algorithm", "the reference: Smith's rule (weight per unit of length)", reference("job_order")),
            ),
        ),
    ]


def _circle_packing(rings: dict[str, str], grid: dict[str, str]) -> Case:
    path = "packing.py"
    return Case(
        "circle_packing (rings seed)",
        rings,
        (
            _edit("constant", "ring spacing 0.35 -> 0.34", _replaced(rings, path, ("0.35 * ring", "0.34 * ring"))),
            _edit(
                "docstring",
                "pack_circles' docstring reworded",
                _replaced(
                    rings,
                    path,
                    (
                        "Centres on rings around the middle, then the largest radii they allow: valid for every n, "
                        "far from best.",
                        "Centres on rings around the centre, then the biggest radii they permit: valid for any n, "
                        "far from the best.",
                    ),
                ),
            ),
            _edit(
                "rename",
                "radius -> bound in largest_radii",
                _replaced(
                    rings,
                    path,
                    ("        radius = min(x, y, 1 - x, 1 - y)", "        bound = min(x, y, 1 - x, 1 - y)"),
                    ("radius = min(radius, math.dist", "bound = min(bound, math.dist"),
                    ("radii.append(radius)", "radii.append(bound)"),
                ),
            ),
            _edit(
                "comprehension",
                "largest_radii's loops as one list comprehension",
                _replaced(
                    rings,
                    path,
                    (
                        "    radii = []\n"
                        "    for i, (x, y) in enumerate(centres):\n"
                        "        radius = min(x, y, 1 - x, 1 - y)\n"
                        "        for j, (u, v) in enumerate(centres):\n"
                        "            if j != i:\n"
                        "                radius = min(radius, math.dist((x, y), (u, v)) / 2)\n"
                        "        radii.append(radius)\n"
                        "    return radii\n",
                        "    return [\n"
                        "        min([x, y, 1 - x, 1 - y] + [math.dist((x, y), (u, v)) / 2 for j, (u, v) in "
                        "enumerate(centres) if j != i])\n"
                        "        for i, (x, y) in enumerate(centres)\n"
                        "    ]\n",
                    ),
                ),
            ),
            _edit("algorithm", "the grid seed: equal circles on a square grid", grid),
        ),
    )


def _fast_primes(seed: dict[str, str], reference: dict[str, str]) -> Case:
    path = "primes.py"
    return Case(
        "fast_primes (seed)",
        seed,
        (
            _edit("constant", "d += 2 -> d += 1", _replaced(seed, path, ("d += 2", "d += 1"))),
            _edit(
                "docstring",
                "the docstring reworded",
                _replaced(
                    seed,
                    path,
                    (
                        "How many primes are below n (n >= 0): trial division of every k < n by every odd d up to "
                        "sqrt(k).",
                        "The number of primes less than n (n >= 0), by trial division of each k < n by the odd d up "
                        "to sqrt(k).",
                    ),
                ),
            ),
            _edit(
                "rename",
                "count -> total",
                _replaced(
                    seed,
                    path,
                    ("count = 0", "total = 0"),
                    ("count += k == 2", "total += k == 2"),
                    ("count += 1", "total += 1"),
                    ("return count", "return total"),
                ),
            ),
            _edit(
                "comprehension",
                "the loops as one generator expression",
                {
                    path: seed[path][: seed[path].index("    count = 0")] + "    return sum(\n"
                    "        k == 2 if k % 2 == 0 else all(k % d for d in range(3, int(k**0.5) + 1, 2))\n"
                    "        for k in range(2, n)\n"
                    "    )\n\n\n" + seed[path][seed[path].index("# EVOLVE-BLOCK-END") :]
                },
            ),
            _edit("algorithm", "the reference: a sieve of Eratosthenes", reference),
        ),
    )


def _tsp(reference: dict[str, str], seed: dict[str, str]) -> Case:
    path = "tour.py"
    return Case(
        "tsp (reference)",
        reference,
        (
            _edit("constant", "2-opt tolerance -1e-12 -> -1e-9", _replaced(reference, path, ("-1e-12", "-1e-9"))),
            _edit(
                "docstring",
                "an inline comment reworded",
                _replaced(
                    reference,
                    path,
                    (
                        "# i = 0, j = n - 1: the two edges share order[0]",
                        "# with i = 0 and j = n - 1 both edges touch order[0]: skip that pair",
                    ),
                ),
            ),
            _edit(
                "rename",
                "nearest -> closest",
                _replaced(
                    reference,
                    path,
                    ("nearest = min(", "closest = min("),
                    ("order.append(nearest)", "order.append(closest)"),
                    ("unvisited.remove(nearest)", "unvisited.remove(closest)"),
                ),
            ),
            _edit(
                "comprehension",
                "the distance matrix's comprehension as two loops",
                _replaced(
                    reference,
                    path,
                    (
                        "    dist = [[math.dist(p, q) for q in points] for p in points]\n",
                        "    dist = []\n"
                        "    for p in points:\n"
                        "        row = []\n"
                        "        for q in points:\n"
                        "            row.append(math.dist(p, q))\n"
                        "        dist.append(row)\n",
                    ),
                ),
            ),
            _edit("algorithm", "the seed: the identity tour (no nearest neighbour, no 2-opt)", seed),
        ),
    )


def _graph_colouring(reference: dict[str, str], seed: dict[str, str]) -> Case:
    path = "colouring.py"
    return Case(
        "graph_colouring (reference, 2 files)",
        reference,
        (
            _edit("constant", "the uncoloured mark -1 -> -2", _replaced(reference, path, ("[-1] * n", "[-2] * n"))),
            _edit(
                "docstring",
                "the DSatur docstring reworded",
                _replaced(
                    reference,
                    path,
                    (
                        "ties\n    going to the earliest in `vertex_order`",
                        "ties\n    broken by the position in `vertex_order`",
                    ),
                ),
            ),
            _edit(
                "rename",
                "uncoloured -> remaining",
                _replaced(
                    reference,
                    path,
                    ("uncoloured = set", "remaining = set"),
                    ("while uncoloured:", "while remaining:"),
                    ("min(uncoloured,", "min(remaining,"),
                    ("uncoloured.remove", "remaining.remove"),
                ),
            ),
            _edit(
                "comprehension",
                "the adjacency loop as one comprehension",
                _replaced(
                    reference,
                    path,
                    (
                        "    adjacent: list[set[int]] = [set() for _ in range(n)]\n"
                        "    for u, v in edges:\n"
                        "        adjacent[u].add(v)\n"
                        "        adjacent[v].add(u)\n"
                        "    neighbours = [sorted(vertices) for vertices in adjacent]\n",
                        "    neighbours = [sorted({v for u, v in edges if u == w} | {u for u, v in edges if v == w}) "
                        "for w in range(n)]\n",
                    ),
                ),
            ),
            _edit("algorithm", "the seed: greedy in index order (no DSatur, no degree order)", seed),
        ),
    )


def _load_balancing(seed: dict[str, str], reference: dict[str, str]) -> Case:
    path = "balancer.py"
    return Case(
        "load_balancing (seed)",
        seed,
        (
            _edit(
                "constant",
                "arrived starts at 1, not 0",
                _replaced(seed, path, ("self.arrived = 0", "self.arrived = 1")),
            ),
            _edit(
                "docstring",
                "assign's docstring reworded",
                _replaced(
                    seed,
                    path,
                    ("round robin, whatever its size.", "the next machine in turn, whatever the job's size."),
                ),
            ),
            _edit(
                "rename",
                "machine -> chosen in assign",
                _replaced(
                    seed,
                    path,
                    ("        machine = self.arrived", "        chosen = self.arrived"),
                    ("return machine", "return chosen"),
                ),
            ),
            _edit("algorithm", "the reference: the least loaded machine", reference),
        ),
    )


def _strip_packing(seed: dict[str, str], reference: dict[str, str]) -> Case:
    path = "packer.py"
    return Case(
        "strip_packing (seed, 12k characters)",
        seed,
        (
            _edit(
                "constant",
                "SHELF_SLACK 1.0 -> 1.05",
                _replaced(seed, path, ("SHELF_SLACK = 1.0", "SHELF_SLACK = 1.05")),
            ),
            _edit(
                "docstring",
                "drop_height's docstring reworded",
                _replaced(
                    seed,
                    path,
                    (
                        "It falls from above everything, so it stops on the first rectangle it meets; a gap "
                        "under that\n    one stays empty.",
                        "Dropped from above all the others, it halts on the first rectangle in its way; any gap\n"
                        "    beneath that one is left empty.",
                    ),
                ),
            ),
            _edit(
                "rename", "fitting -> candidates in best fit", _replaced(seed, path, ("fitting", "candidates"), count=3)
            ),
            _edit(
                "comprehension",
                "drop_height's loop as max() over a generator",
                _replaced(
                    seed,
                    path,
                    (
                        "    resting = 0.0\n"
                        "    for placed in placements:\n"
                        "        if placed.x < x + rect.width - EPS and x < placed.right - EPS:\n"
                        "            resting = max(resting, placed.top)\n"
                        "    return resting\n",
                        "    return max(\n"
                        "        (p.top for p in placements if p.x < x + rect.width - EPS and x < p.right - EPS), "
                        "default=0.0\n"
                        "    )\n",
                    ),
                ),
            ),
            _edit("algorithm", "the reference: bottom-left fill, several orders, the lowest kept", reference),
        ),
    )
