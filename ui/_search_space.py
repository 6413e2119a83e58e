"""The search-space panel: a run's agents as points on a 2-D map, so a user sees whether the archive is diverse
or collapsed (`search_space`).

A pure read over an open (read-only) `Archive`, returning a JSON-able dict of columns ready for plotly.
The agents are projected to 2-D by PCA from their behaviour descriptors or, when the run has none, from
their code (archive.novelty's hashed character n-gram vectors, one point per distinct genome). Above a few
thousand agents the map keeps the best half by score and an even spread of the rest (`_sample`), so a
100k-agent run draws in the same time as a small one. The other analytics panels are in `_analytics`.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np
from sqlalchemy import Table, case, select

from cambrian.archive.models import Agent, AgentDescriptor, AgentStatus, GenomeFile
from cambrian.archive.novelty import CodeEmbedder
from cambrian.archive.store import Archive
from cambrian.ui._columns import float_matrix

__all__ = ["search_space"]

_AGENT: Table = Agent.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
_DESCRIPTOR: Table = AgentDescriptor.__table__  # type: ignore[attr-defined]  # as above
_GENOME_FILE: Table = GenomeFile.__table__  # type: ignore[attr-defined]  # as above

#: Genome hashes per IN (...) list: under SQLite's bound-parameter limit on every version.
_IN_CHUNK = 900


def _sample(ids: np.ndarray, scores: np.ndarray, max_points: int) -> np.ndarray:
    """Row indices of at most `max_points` rows in priority order.

    Kept: the best half by score (NaN last; ties: lower id) and rows spread evenly over the others in
    id order, every row when they fit. The order alternates one of the best and one of the spread, so
    a caller that stops early (the code map's genome budget) still keeps both kinds.
    """
    ranked = np.lexsort((ids, -np.nan_to_num(scores, nan=-np.inf)))
    if len(ids) <= max_points:
        best, spread = ranked[: (len(ranked) + 1) // 2], np.sort(ranked[(len(ranked) + 1) // 2 :])
    else:
        best, rest = ranked[: max_points // 2], np.sort(ranked[max_points // 2 :])
        spread = np.unique(rest[np.linspace(0, len(rest) - 1, max_points - len(best)).round().astype(np.int64)])
    order = np.empty(len(best) + len(spread), dtype=np.int64)
    shared = min(len(best), len(spread))
    order[0 : 2 * shared : 2], order[1 : 2 * shared : 2] = best[:shared], spread[:shared]
    order[2 * shared :] = best[shared:] if len(best) > shared else spread[shared:]
    return order


def _project(matrix: np.ndarray) -> tuple[np.ndarray, list[float]]:
    """n x 2 coordinates of the rows of `matrix` by PCA, and each axis's share of the variance in [0, 1];
    zeros where there is nothing to spread (fewer than 2 rows, or no variance).

    ARPACK with a fixed start vector (random_state=0) finds the two components without a full SVD
    (milliseconds at 5000 x 256) and gives the same answer every time; tiny matrices take the full SVD.
    """
    from sklearn.decomposition import PCA  # scikit-learn costs about a second to import: only this view pays it

    coords = np.zeros((len(matrix), 2))
    if len(matrix) < 2 or matrix.shape[1] == 0 or not np.any(matrix.std(axis=0) > 0):
        return coords, [0.0, 0.0]
    components = min(2, matrix.shape[1], len(matrix))
    solver = "arpack" if min(matrix.shape) > components else "full"
    pca = PCA(n_components=components, svd_solver=solver, random_state=0)
    coords[:, :components] = pca.fit_transform(matrix.astype(np.float64))
    shares = [float(v) if math.isfinite(v) else 0.0 for v in pca.explained_variance_ratio_]
    return coords, shares + [0.0] * (2 - components)


def search_space(
    archive: Archive,
    run_id: int,
    *,
    max_points: int = 5000,
    max_genomes: int = 500,
    space: Literal["auto", "behaviour", "code"] = "auto",
) -> dict[str, Any]:
    """The run's agents as points on a 2-D map, so a user sees whether the archive is diverse or collapsed.

    space: "behaviour" projects the evaluated agents' descriptors (archive.descriptors; exactly two
    are the axes as they are, more are standardised and reduced by PCA); "code" projects every agent
    that has code by PCA of archive.novelty.CodeEmbedder's hashed character n-gram vectors of its
    genome (one point per distinct genome, shared by the agents that have it); "auto" takes behaviour
    when at least two agents have at least two descriptors, else code.
    Above `max_points` (>= 1) agents the map keeps the best half by score and spreads the rest evenly
    over the others by id (deterministic). A code map embeds at most `max_genomes` (>= 1) distinct
    genomes (each costs 2-5 ms): beyond that it keeps the agents whose genomes come first, taking
    one of the best and one of the spread in turn. `sampled` says whether agents were left out.

    Returns `projection` ("behaviour" | "code" | "none"), `method` (in words), `axes` (two labels),
    `explained_variance` (each axis's share in [0, 1]; None for raw descriptor axes), `n_agents`
    (agents eligible for the map), `n_points`, `sampled`, `distinct_genomes` (among the points; code
    maps), and `points`, ordered by id: columns `id`, `x`, `y`, `score` (None unless evaluated),
    `status`, `operator`.
    """
    max_points, max_genomes = max(1, int(max_points)), max(1, int(max_genomes))
    archive.get_run(run_id)  # RunNotFound for a wrong id, like the other views
    a, d = _AGENT.c, _DESCRIPTOR.c
    agent_query = select(a.id, a.score, a.genome_hash.is_not(None)).where(a.run_id == run_id).order_by(a.id)
    descriptors_of_run = (
        select(d.agent_id)
        .select_from(_DESCRIPTOR.join(_AGENT, a.id == d.agent_id))
        .where(a.run_id == run_id, a.status == AgentStatus.evaluated)
    )
    with archive.engine.connect() as connection:
        agents = float_matrix(connection, agent_query)
        names = (
            [str(n) for n in connection.execute(descriptors_of_run.with_only_columns(d.name).distinct()).scalars()]
            if space != "code"
            else []
        )
        names.sort()
        # The name as its index in `names`, computed in SQL: no text crosses into Python per row.
        name_index = case({name: k for k, name in enumerate(names)}, value=d.name, else_=-1)
        descriptors = (
            float_matrix(connection, descriptors_of_run.with_only_columns(d.agent_id, name_index, d.value))
            if names
            else np.zeros((0, 3))
        )
    all_ids = agents[:, 0].astype(np.int64)
    described = np.unique(descriptors[:, 0].astype(np.int64))
    use_behaviour = space == "behaviour" or (space == "auto" and len(names) >= 2 and len(described) >= 2)
    rows = _rows_of(all_ids, described) if use_behaviour else np.flatnonzero(agents[:, 2] > 0)
    n_eligible = len(rows)
    rows = rows[_sample(all_ids[rows], agents[rows, 1], max_points)]

    distinct_genomes: int | None = None
    explained: list[float] | None = None
    axes = ["PC 1", "PC 2"]
    if use_behaviour:
        rows = np.sort(rows)
        ids = all_ids[rows]
        matrix = np.full((len(ids), len(names)), np.nan)
        owners = descriptors[:, 0].astype(np.int64)
        position = np.minimum(np.searchsorted(ids, owners), max(len(ids) - 1, 0))
        mine = ids[position] == owners if len(ids) else np.zeros(len(owners), dtype=bool)
        matrix[position[mine], descriptors[mine, 1].astype(np.int64)] = descriptors[mine, 2]
        if len(names) == 2:
            coords, axes = np.nan_to_num(matrix, nan=0.0), list(names)
            method = f"the descriptors {names[0]} and {names[1]} as they are"
        else:
            with np.errstate(all="ignore"):  # an all-NaN column (no sampled agent has it) -> 0
                means = np.nan_to_num(np.nanmean(matrix, axis=0)) if len(ids) else np.zeros(len(names))
            matrix = np.where(np.isnan(matrix), means[None, :], matrix)
            spread = matrix.std(axis=0) if len(ids) else np.ones(len(names))
            matrix = (matrix - matrix.mean(axis=0)) / np.where(spread > 0, spread, 1.0)
            coords, explained = _project(matrix)
            method = f"PCA of {len(names)} standardised behaviour descriptors ({', '.join(names)})"
        texts = _agent_texts(archive, ids)
    else:
        texts = _agent_texts(archive, all_ids[rows])
        hashes = [texts[int(agent_id)][2] for agent_id in all_ids[rows]]
        kept: dict[str, int] = {}
        for genome in hashes:
            if genome not in kept and len(kept) < max_genomes:
                kept[genome] = len(kept)
        rows = np.array([row for row, genome in zip(rows, hashes) if genome in kept], dtype=np.int64)
        rows = np.sort(rows)
        ids = all_ids[rows]
        unique = sorted(kept)
        distinct_genomes = len(unique)
        embedder = CodeEmbedder()
        # One embedding and one PCA row per distinct genome: agents that share code share a point.
        genome_coords, explained = _project(embedder.embed_many(_genome_files(archive, unique)))
        index = {genome: k for k, genome in enumerate(unique)}
        coords = genome_coords[[index[texts[int(agent_id)][2]] for agent_id in ids]] if len(ids) else np.zeros((0, 2))
        method = f"PCA of the code's hashed character n-gram vectors ({embedder.dim} features, archive.novelty)"
    projection = ("behaviour" if use_behaviour else "code") if len(ids) else "none"
    scores = agents[rows, 1]
    return {
        "run_id": run_id,
        "projection": projection,
        "method": method if len(ids) else "no agent has code or descriptors yet",
        "axes": axes,
        "explained_variance": explained,
        "n_agents": n_eligible,
        "n_points": len(ids),
        "sampled": n_eligible > len(ids),
        "distinct_genomes": distinct_genomes,
        "points": {
            "id": ids.tolist(),
            "x": coords[:, 0].tolist(),
            "y": coords[:, 1].tolist(),
            "score": [None if math.isnan(v) else float(v) for v in scores],
            "status": [texts[int(agent_id)][0] for agent_id in ids],
            "operator": [texts[int(agent_id)][1] for agent_id in ids],
        },
    }


def _rows_of(sorted_ids: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Indices into `sorted_ids` of the values of `wanted` it holds (others skipped)."""
    if not len(sorted_ids):
        return np.zeros(0, dtype=np.int64)
    position = np.minimum(np.searchsorted(sorted_ids, wanted), len(sorted_ids) - 1)
    return position[sorted_ids[position] == wanted]


def _agent_texts(archive: Archive, ids: np.ndarray) -> dict[int, tuple[str, str, str]]:
    """agent id -> (status, operator, genome hash or "") for these agents, read in chunks of ids."""
    a = _AGENT.c
    found: dict[int, tuple[str, str, str]] = {}
    wanted = [int(i) for i in ids]
    with archive.engine.connect() as connection:
        for start in range(0, len(wanted), _IN_CHUNK):
            query = select(a.id, a.status, a.operator, a.genome_hash).where(a.id.in_(wanted[start : start + _IN_CHUNK]))
            for agent_id, status, operator, genome in connection.execute(query):
                found[int(agent_id)] = (str(getattr(status, "value", status)), str(operator), genome or "")
    return found


def _genome_files(archive: Archive, hashes: list[str]) -> list[dict[str, str]]:
    """The files (path -> text) of each genome in `hashes`, in that order."""
    files: dict[str, dict[str, str]] = {h: {} for h in hashes}
    g = _GENOME_FILE.c
    with archive.engine.connect() as connection:
        for start in range(0, len(hashes), _IN_CHUNK):
            query = select(g.genome_hash, g.path, g.text).where(g.genome_hash.in_(hashes[start : start + _IN_CHUNK]))
            for genome, path, text in connection.execute(query):
                files[str(genome)][str(path)] = str(text)
    return [files[h] for h in hashes]
