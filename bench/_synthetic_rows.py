"""What bench/synthetic_archive.py's rows are made of, before any database: the `SyntheticSpec`, the lineage's
shape (`grow_lineage`: preferential attachment plus hot clades, depth-capped), the genomes' program texts, and
the stored FM requests and replies."""

from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SyntheticSpec:
    """What to generate. Times in seconds; fractions in [0, 1]."""

    n_agents: int
    seed: int = 0
    n_genomes: int = 300
    max_depth: int = 300  # deepest lineage chain (seed = depth 0)
    hot_clades: int = 4  # chains extended at once; each restarts from a popular agent at max_depth
    chain_probability: float = 0.25  # share of proposals that extend a hot clade's tip
    evaluated_share: float = 0.62  # the rest: invalid (edit failures, crashes, duplicates) and a few failed
    eval_slots: int = 4
    fm_slots: int = 2
    prompt_share: float = 0.05  # proposals whose request messages and reply are stored
    recent_with_prompts: int = 200  # the last proposals always have them (what a live page opens)


def genome_texts(rng: np.random.Generator, count: int) -> list[str]:
    """`count` distinct circle-packing programs of ~50-150 lines: the seed's shape with other constants and helpers."""
    texts: list[str] = []
    for index in range(count):
        spacing = round(float(rng.uniform(0.2, 0.45)), 4)
        per_ring = int(rng.integers(5, 11))
        margin = round(float(rng.uniform(0.005, 0.05)), 4)
        helpers = []
        for h in range(int(rng.integers(1, 7))):
            step = round(float(rng.uniform(0.001, 0.05)), 4)
            rounds = int(rng.integers(5, 200))
            helpers.append(
                f'''

def refine_{h}(centres: list[tuple[float, float]], radii: list[float]) -> list[tuple[float, float]]:
    """Push each centre away from its nearest neighbour by {step} for {rounds} rounds (variant {index}.{h})."""
    moved = list(centres)
    for _ in range({rounds}):
        for i, (x, y) in enumerate(moved):
            nearest = min((j for j in range(len(moved)) if j != i), key=lambda j: math.dist((x, y), moved[j]))
            u, v = moved[nearest]
            length = math.dist((x, y), (u, v)) or 1.0
            x = min(max(x + {step} * (x - u) / length, {margin}), 1 - {margin})
            y = min(max(y + {step} * (y - v) / length, {margin}), 1 - {margin})
            moved[i] = (x, y)
    return moved
'''
            )
        calls = "".join(f"    centres = refine_{h}(centres, largest_radii(centres))\n" for h in range(len(helpers)))
        texts.append(
            f'''"""Circle packing, variant {index}: rings of {per_ring}k, {spacing} apart, {len(helpers)} refiners."""

# EVOLVE-BLOCK-START
import math


def pack_circles(n: int) -> list[tuple[float, float, float]]:
    """Centres on rings, refined, then the largest radii they allow."""
    centres = ring_centres(n)
{calls}    radii = largest_radii(centres)
    return [(x, y, r) for (x, y), r in zip(centres, radii)]


def ring_centres(n: int) -> list[tuple[float, float]]:
    """One centre in the middle, then rings of {per_ring}, {2 * per_ring}, ... centres."""
    centres = [(0.5, 0.5)]
    ring = 1
    while len(centres) < n:
        count = min({per_ring} * ring, n - len(centres))
        for k in range(count):
            angle = 2 * math.pi * k / count
            x = 0.5 + {spacing} * ring * math.cos(angle)
            y = 0.5 + {spacing} * ring * math.sin(angle)
            centres.append((min(max(x, {margin}), 1 - {margin}), min(max(y, {margin}), 1 - {margin})))
        ring += 1
    return centres[:n]


def largest_radii(centres: list[tuple[float, float]]) -> list[float]:
    """Each radius bounded by the walls and half the distance to every other centre."""
    radii = []
    for i, (x, y) in enumerate(centres):
        radius = min(x, y, 1 - x, 1 - y)
        for j, (u, v) in enumerate(centres):
            if j != i:
                radius = min(radius, math.dist((x, y), (u, v)) / 2)
        radii.append(radius)
    return radii
{"".join(helpers)}

# EVOLVE-BLOCK-END
'''
        )
    return texts


@dataclass
class Lineage:
    """Per agent (index 0 = the seed): parent index (-1 none), depth, status code and score."""

    parent: np.ndarray
    depth: np.ndarray
    status: np.ndarray  # 0 evaluated, 1 invalid edit (no genome), 2 invalid run (has a genome), 3 failed
    score: np.ndarray  # NaN unless evaluated


def grow_lineage(spec: SyntheticSpec, rng: np.random.Generator) -> Lineage:
    """Preferential attachment over evaluated agents, plus `hot_clades` chains extended at their tips."""
    n = spec.n_agents
    draw = rng.random(n)
    status = np.where(draw < spec.evaluated_share, 0, np.where(draw < 0.82, 1, np.where(draw < 0.995, 2, 3))).astype(
        np.int8
    )
    status[0] = 0
    parent = np.full(n, -1, dtype=np.int64)
    depth = np.zeros(n, dtype=np.int64)
    score = np.full(n, np.nan)
    score[0] = 1.0917
    choice, pick, clade_pick = rng.random(n), rng.random(n), rng.integers(0, spec.hot_clades, n)
    noise_pa = rng.normal(-0.03, 0.06, n)
    noise_chain = rng.normal(0.004, 0.025, n)
    pool = [0]  # each evaluated agent once, plus once per child: a uniform draw is preferential attachment
    tips = [0] * spec.hot_clades
    for i in range(1, n):
        chained = choice[i] < spec.chain_probability
        clade = int(clade_pick[i])
        p = tips[clade] if chained else pool[int(pick[i] * len(pool))]
        if depth[p] >= spec.max_depth:
            chained = False
            p = pool[int(pick[i] * len(pool))]
            while depth[p] >= spec.max_depth:  # deep agents are few: a redraw or two finds another
                p = pool[int(rng.random() * len(pool))]
        parent[i] = p
        depth[i] = depth[p] + 1
        if status[i] != 0:
            continue
        score[i] = min(max(score[p] + (noise_chain[i] if chained else noise_pa[i]), 0.2), 2.635)
        pool.append(i)
        pool.append(p)
        if chained:
            tips[clade] = i if depth[i] < spec.max_depth else pool[int(rng.random() * len(pool))]
    return Lineage(parent=parent, depth=depth, status=status, score=score)


def messages(index: int, code: str, model: str, purpose: str) -> str:
    """A request's chat messages as stored (JSON list of role/content), ~1-4 KB."""
    system = (
        'You improve a program for the benchmark "circle_packing". Your goal is a higher score.\n'
        "Rules:\n- Keep what the contract asks for: the same names, inputs and outputs.\n"
        "- Write complete, working code. No placeholders.\n- Do not repeat an attempt that failed.\n"
        "- Reply with SEARCH/REPLACE blocks only."
    )
    user = (
        f"## Parent program (agent {index}, {purpose} with {model})\n```python\n{code}```\n"
        "## Feedback\nvalid packing of 26 circles; sum of radii 2.41 (0.22 below the best known 2.635)\n"
        "## Ideas\n- offset (hexagonal) rows\n- grow each circle until it touches a neighbour or a wall\n"
    )
    return json.dumps([{"role": "system", "content": system}, {"role": "user", "content": user}])


def reply(index: int) -> str:
    return (
        f"Agent {index}: spread the outer ring.\n<<<<<<< SEARCH\n        distance = 0.35 * ring\n=======\n"
        f"        distance = {0.2 + (index % 97) / 400:.4f} * ring\n>>>>>>> REPLACE\n"
    )
