"""What the search knows of each evaluated agent beyond its score: task counts, descriptors, embeddings.

`BehaviourSpace` turns one evaluation (or, on resume, the stored rows) into the
extra columns of the archive view that open-ended selection reads:

- successes / failures: the agent's passed and not-passed task runs (HGM pools
  them over clades);
- descriptor: the benchmark's behaviour features (`TaskScore.descriptor`,
  named with ranges in `benchmark.descriptor_bounds`) followed by generic
  ones every benchmark has: `code_size` (log10 of the genome's characters),
  `pass_fraction` (passed tasks over the search tasks) and `pass_signature`
  (which tasks passed, as a categorical id hashed from the set). MAP-Elites bins agents by them;
- embedding: where the `novelty` strategy measures distance, either the
  behaviour vector (benchmark descriptors in [0, 1], then per-task scores) or
  the code embedding (`search.novelty.space`).

The near-duplicate gate always compares code embeddings. Everything here is
derived from what the archive stores, so a resumed run rebuilds the same view.
"""

from __future__ import annotations

import asyncio
import hashlib
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cambrian.archive.novelty import NGRAM_FEATURES, CodeEmbedder, DuplicateGate, EndpointEmbedder, behaviour_vector
from cambrian.archive.store import Archive
from cambrian.archive.view import ArchiveView
from cambrian.evaluators.base import Benchmark, descriptor_bounds
from cambrian.meta_agent.config import NoveltyConfig

#: Generic descriptors every benchmark gets, with their binning ranges (None: categorical).
GENERIC_DESCRIPTORS: tuple[tuple[str, tuple[float, float] | None], ...] = (
    ("code_size", (2.0, 5.0)),  # log10 characters: 100 .. 100k
    ("pass_fraction", (0.0, 1.0)),
    ("pass_signature", None),
)

#: Stored per agent (the signature id is re-derived from the task rows).
_STORED_GENERIC = ("code_size", "pass_fraction")


@dataclass(frozen=True)
class TaskRow:
    """One search-split task run, as the evaluation produced it or the archive stored it."""

    task_id: str
    score: float
    passed: bool
    executed: bool


@dataclass(frozen=True)
class AgentColumns:
    """The view columns of one evaluated agent, and the descriptor values to store with it."""

    successes: float
    failures: float
    descriptor: tuple[float, ...]
    embedding: np.ndarray
    stored_descriptor: dict[str, float]


def code_size(files: Mapping[str, str]) -> float:
    """log10 of the genome's total characters (at least 1 character)."""
    return math.log10(max(1, sum(len(text) for text in files.values())))


class BehaviourSpace:
    """Builds view columns for a run's agents; holds the code embedder and the near-duplicate gate.

    code_embedder: the embedding model's embedder, when `novelty.embedding_model` is set (its `dim` is the
    model's); None uses the local hashing vectorizer.
    """

    def __init__(
        self,
        benchmark: Benchmark,
        config: NoveltyConfig,
        *,
        code_embedder: EndpointEmbedder | None = None,
    ) -> None:
        self.config = config
        self.task_ids = [task.id for task in benchmark.tasks("search")]
        bounds = descriptor_bounds(benchmark)
        self.benchmark_names: tuple[str, ...] = tuple(bounds)
        self._benchmark_bounds = [bounds[name] for name in self.benchmark_names]
        self.names: tuple[str, ...] = self.benchmark_names + tuple(name for name, _ in GENERIC_DESCRIPTORS)
        self.bounds = tuple(self._benchmark_bounds) + tuple(bound for _, bound in GENERIC_DESCRIPTORS)
        self._embedder: CodeEmbedder | EndpointEmbedder | None = code_embedder
        self.gate = (
            DuplicateGate(threshold=config.duplicate_threshold, embedder=self.embedder)
            if config.duplicate_threshold is not None
            else None
        )
        self._code_embeddings: dict[int, np.ndarray] = {}  # agent id -> embedding, until the view has it

    @property
    def embedder(self) -> CodeEmbedder | EndpointEmbedder:
        """The code embedder, made on first use (scikit-learn takes seconds to import; behaviour-only runs skip it)."""
        if self._embedder is None:
            self._embedder = CodeEmbedder(n_features=self.config.embedding_dim or NGRAM_FEATURES)
        return self._embedder

    @property
    def embedding_dim(self) -> int:
        if self.config.space == "code":
            return self._embedder.dim if self._embedder is not None else self.config.embedding_dim or NGRAM_FEATURES
        return len(self.benchmark_names) + len(self.task_ids)

    def empty_view(self) -> ArchiveView:
        return ArchiveView(
            descriptor_names=self.names,
            descriptor_bounds=self.bounds,
            embedding_dim=self.embedding_dim,
            knn_k=self.config.k,
        )

    def code_embedding(self, files: Mapping[str, str]) -> np.ndarray:
        return np.asarray(self.embedder.embed(files), dtype=np.float32)

    async def code_embedding_async(self, files: Mapping[str, str]) -> np.ndarray:
        """`code_embedding` for the running search: in a worker thread where an endpoint embeds (an FM's
        /v1/embeddings took 3-6 s an agent on two cores, during which the event loop, every proposal and
        evaluation, stood still); in line for the n-grams, which take microseconds."""
        if isinstance(self._embedder, EndpointEmbedder):
            return await asyncio.to_thread(self.code_embedding, files)
        return self.code_embedding(files)

    async def column_embedding(self, files: Mapping[str, str]) -> np.ndarray | None:
        """The code embedding `columns` reads in the "code" space (`code_embedding_async`); None in the other."""
        return await self.code_embedding_async(files) if self.config.space == "code" else None

    def columns(
        self,
        *,
        files: Mapping[str, str],
        tasks: Sequence[TaskRow],
        descriptor: Mapping[str, float],
        code_embedding: np.ndarray | None = None,
    ) -> AgentColumns:
        """The view columns of one evaluated agent from its genome, task runs and benchmark descriptor."""
        passed = [row.task_id for row in tasks if row.passed]
        successes = float(len(passed))
        failures = float(sum(1 for row in tasks if row.executed and not row.passed))
        signature = _signature_id(passed)
        generic = {
            "code_size": code_size(files),
            "pass_fraction": successes / max(1, len(self.task_ids)),
            "pass_signature": float(signature),
        }
        values = tuple(float(descriptor.get(name, math.nan)) for name in self.benchmark_names) + tuple(
            generic[name] for name, _ in GENERIC_DESCRIPTORS
        )
        if self.config.space == "code":
            embedding = code_embedding if code_embedding is not None else self.code_embedding(files)
        else:
            normalised = [
                _normalise(value, bound)
                for value, bound in zip(values[: len(self.benchmark_names)], self._benchmark_bounds)
            ]
            embedding = behaviour_vector(
                {row.task_id: row.score for row in tasks}, task_ids=self.task_ids, descriptor=normalised
            )
        stored = {name: float(descriptor[name]) for name in self.benchmark_names if name in descriptor}
        stored.update({name: generic[name] for name in _STORED_GENERIC})
        return AgentColumns(
            successes=successes,
            failures=failures,
            descriptor=values,
            embedding=np.asarray(embedding, dtype=np.float32),
            stored_descriptor=stored,
        )

    def rebuild(self, archive: Archive, run_id: int, genome_of: Callable[[str], Mapping[str, str]]) -> ArchiveView:
        """The run's view with every column, from the archive (resume); also refills the duplicate gate.

        genome_of: genome hash -> files (the loop's cached reader).
        """
        base = archive.view(run_id)
        tasks: dict[int, list[TaskRow]] = {}
        for agent_id, task_id, score, passed, executed in archive.search_task_results(run_id):
            tasks.setdefault(agent_id, []).append(TaskRow(task_id, score, passed, executed))
        stored = archive.descriptors(run_id)
        in_view = {int(agent_id) for agent_id in base.ids.tolist()}
        columns: dict[int, AgentColumns] = {}
        for agent in archive.agents(run_id):
            if agent.genome_hash is None:
                continue
            files = genome_of(agent.genome_hash)
            embedding = self.code_embedding(files) if (self.gate is not None or self.config.space == "code") else None
            if self.gate is not None and embedding is not None:
                self.gate.add(agent.key, embedding)
            if agent.key in in_view:
                columns[agent.key] = self.columns(
                    files=files,
                    tasks=tasks.get(agent.key, []),
                    descriptor=stored.get(agent.key, {}),
                    code_embedding=embedding,
                )
        rows = [columns[int(agent_id)] for agent_id in base.ids.tolist()]
        n, width = len(rows), len(self.names)
        return ArchiveView.from_arrays(
            base.ids,
            base.scores,
            parent_ids=base.parent_ids,
            successes=np.array([c.successes for c in rows], dtype=np.float64),
            failures=np.array([c.failures for c in rows], dtype=np.float64),
            descriptors=np.array([c.descriptor for c in rows], dtype=np.float64).reshape(n, width),
            embeddings=np.array([c.embedding for c in rows], dtype=np.float32).reshape(n, self.embedding_dim),
            descriptor_names=self.names,
            descriptor_bounds=self.bounds,
            knn_k=self.config.k,
        )


def _signature_id(passed: Sequence[str]) -> int:
    """A categorical id for the set of passed tasks: 48 bits of its hash (exact as a float64), so it does not
    depend on the order agents were evaluated in, and a resumed run labels cells as the live one did."""
    digest = hashlib.sha256("\n".join(sorted(passed)).encode()).hexdigest()
    return int(digest[:12], 16)


def _normalise(value: float, bound: tuple[float, float] | None) -> float:
    """A descriptor value mapped to [0, 1] by its range (categorical and unknown values: as given / 0)."""
    if not math.isfinite(value):
        return 0.0
    if bound is None:
        return value
    low, high = bound
    return min(1.0, max(0.0, (value - low) / (high - low))) if high > low else 0.0
