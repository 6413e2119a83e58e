"""Novelty geometry: code embeddings, behaviour vectors, k-NN distances and the near-duplicate gate.

An agent's embedding places it in a space where distance means "different code" (the
default: hashed character n-grams of its files, no fitting step, no network) or
"different behaviour" (its per-task scores). `ArchiveView` keeps each agent's nearest
distances with the block routines here; the `DuplicateGate` refuses a candidate whose
code is nearly identical to an accepted agent's before it costs an evaluation.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from cambrian.archive.errors import ArchiveError

# Distance temporaries stay near this many elements (~16 MB of float32) per block.
_BLOCK_ELEMENTS = 1 << 22
# Extra nearest candidates kept from the float32 screen, re-measured exactly in float64.
_CANDIDATE_MARGIN = 16
#: The hashing vectorizer's embedding length unless a run sets search.novelty.embedding_dim.
NGRAM_FEATURES = 256


def distances_to(embeddings: np.ndarray, query: np.ndarray) -> np.ndarray:
    """Euclidean distances (float64, exact to float64 rounding) from `query` (E,) to each row
    of `embeddings` (m x E); computed in blocks of rows so temporaries stay small at any m."""
    out = np.empty(len(embeddings), dtype=np.float64)
    origin = query.astype(np.float64)
    rows_per_block = max(1, _BLOCK_ELEMENTS // max(len(origin), 1))
    for start in range(0, len(embeddings), rows_per_block):
        diff = embeddings[start : start + rows_per_block].astype(np.float64)
        diff -= origin
        out[start : start + rows_per_block] = np.einsum("ij,ij->i", diff, diff)
    return np.sqrt(out, out=out)


def knn_table(embeddings: np.ndarray, k: int) -> np.ndarray:
    """n x k float64: each row's ascending distances to its k nearest OTHER rows (+inf padding).

    A float32 screen (|a|^2 + |b|^2 - 2ab: one BLAS call per block of query rows) keeps each
    row's k + 16 nearest candidates; those are re-measured exactly in float64, so the result
    matches `distances_to` unless float32 rounding reorders 17 or more near-equal candidates.
    Memory stays bounded at any n; the work is O(n^2 E), about 2-3 s at 10k x 128 on 2 cores.
    """
    n, dim = embeddings.shape
    table = np.full((n, k), np.inf)
    if n <= 1:
        return table
    take = min(k, n - 1)
    if dim == 0:
        # Empty embeddings coincide: every other row is at distance 0.
        table[:, :take] = 0.0
        return table
    embeddings = np.ascontiguousarray(embeddings, dtype=np.float32)
    n_candidates = min(k + _CANDIDATE_MARGIN, n - 1)
    with np.errstate(over="ignore"):
        sq_norms = np.einsum("ij,ij->i", embeddings, embeddings)
    rows_per_block = max(1, min(1024, _BLOCK_ELEMENTS // n))
    for start in range(0, n, rows_per_block):
        queries = embeddings[start : start + rows_per_block]
        # Huge values overflow float32 here (inf, inf - inf = NaN); fmax maps NaN to 0, which
        # makes such pairs candidates, and the float64 pass below measures them exactly.
        with np.errstate(over="ignore", invalid="ignore"):
            screen = queries @ embeddings.T
            screen *= -2.0
            screen += sq_norms[start : start + len(queries), None]
            screen += sq_norms[None, :]
        np.fmax(screen, 0.0, out=screen)
        local = np.arange(len(queries))
        screen[local, start + local] = np.inf  # a row is not its own neighbour
        columns = _smallest_columns(screen, n_candidates)
        diff = embeddings[columns].astype(np.float64)
        diff -= queries[:, None, :].astype(np.float64)
        exact = np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))
        # Only an all-infinite screen row (float32 overflow) can pick the row itself; never count it.
        exact[columns == (start + local)[:, None]] = np.inf
        exact.sort(axis=1)
        table[start : start + len(queries), :take] = exact[:, :take]
    return table


def _smallest_columns(values: np.ndarray, count: int) -> np.ndarray:
    """b x count column indices of each row's `count` smallest values (ties: lower column first)."""
    threshold = np.partition(values, count - 1, axis=1)[:, count - 1 : count]
    keep = values <= threshold
    surplus = np.flatnonzero(np.count_nonzero(keep, axis=1) > count)
    if surplus.size:
        # Ties at the threshold: keep only as many of the tied columns as the row still needs.
        block = values[surplus]
        tied = block == threshold[surplus]
        needed = count - (block < threshold[surplus]).sum(axis=1, keepdims=True)
        keep[surplus] = (block < threshold[surplus]) | (tied & (np.cumsum(tied, axis=1) <= needed))
    # Flat indices come out row by row, `count` per row (flatnonzero is ~10x faster than 2-D nonzero).
    return (np.flatnonzero(keep) % values.shape[1]).reshape(len(values), count)


def merge_into_knn(knn: np.ndarray, distances: np.ndarray) -> None:
    """Insert one new point, at `distances` (m,) from the m rows of `knn` (m x k), in place.

    Only rows whose kth distance exceeds their distance to the new point change.
    """
    affected = np.flatnonzero(distances < knn[:, -1])
    if affected.size:
        merged = np.concatenate([knn[affected], distances[affected, None]], axis=1)
        merged.sort(axis=1)
        knn[affected] = merged[:, :-1]


def _unit(matrix: np.ndarray) -> np.ndarray:
    """Rows scaled to unit L2 length (float32); all-zero rows stay zero."""
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return (matrix / np.where(norms > 0, norms, 1.0)).astype(np.float32)


def genome_text(files: Mapping[str, str]) -> str:
    """A genome's files as one text: sorted by path, each under a `# file: PATH` header line."""
    return "\n".join(f"# file: {path}\n{files[path]}" for path in sorted(files))


class _Embedder:
    """What both embedders share: `dim`, and `embed`/`embed_many` over `genome_text`; a subclass turns
    a non-empty list of texts into a len(texts) x dim float32 matrix of unit rows (`_vectors`)."""

    _dim: int

    @property
    def dim(self) -> int:
        """Embedding length."""
        return self._dim

    def embed(self, files: Mapping[str, str]) -> np.ndarray:
        """One genome's embedding: float32 vector of length `dim`, unit L2 norm (zero if no text)."""
        return self.embed_many([files])[0]

    def embed_many(self, genomes: Sequence[Mapping[str, str]]) -> np.ndarray:
        """len(genomes) x dim float32, one unit-norm row per genome."""
        if not genomes:
            return np.zeros((0, self._dim), dtype=np.float32)
        return self._vectors([genome_text(files) for files in genomes])

    def _vectors(self, texts: list[str]) -> np.ndarray:
        raise TypeError(f"{type(self).__name__} must define _vectors")  # an abstract hook, never user-facing


class CodeEmbedder(_Embedder):
    """Hashed character n-gram vectors of a genome's code: deterministic, no fitting, no network.

    scikit-learn's `HashingVectorizer(analyzer="char_wb", alternate_sign=False, norm="l2")`
    over `genome_text(files)`; cosine similarity of two embeddings is their dot product.
    """

    def __init__(self, *, n_features: int = NGRAM_FEATURES, ngram_range: tuple[int, int] = (3, 5)) -> None:
        """n_features: embedding length (>= 1; collisions grow as it shrinks). ngram_range: (min, max) chars."""
        # scikit-learn costs about a second to import; only runs that embed code pay it.
        from sklearn.feature_extraction.text import HashingVectorizer

        if isinstance(n_features, bool) or int(n_features) != n_features or n_features < 1:
            raise NoveltyConfigError(
                f"n_features must be an integer >= 1, got {n_features!r}", fix="use e.g. n_features=256"
            )
        low, high = ngram_range
        if not (1 <= low <= high):
            raise NoveltyConfigError(
                f"ngram_range must be (min, max) with 1 <= min <= max, got {ngram_range!r}",
                fix="use e.g. ngram_range=(3, 5)",
            )
        self._dim = int(n_features)
        self._vectorizer = HashingVectorizer(
            analyzer="char_wb",
            ngram_range=(int(low), int(high)),
            n_features=self._dim,
            alternate_sign=False,
            norm="l2",
        )

    def _vectors(self, texts: list[str]) -> np.ndarray:
        return self._vectorizer.transform(texts).toarray().astype(np.float32)


class NoveltyConfigError(ArchiveError, ValueError):
    """A bad embedder or near-duplicate gate setting (dimension, n-gram range, threshold)."""


class EmbeddingEndpointError(ArchiveError, ValueError):
    """An embedding endpoint returned vectors of the wrong shape or with NaN/inf values."""


class EndpointEmbedder(_Embedder):
    """Genome embeddings from an embedding endpoint the caller wraps in `embed_fn`.

    `embed_fn(texts) -> one vector per text` (e.g. around `litellm.embedding`); the vectors
    are checked against `dim` and scaled to unit length, like `CodeEmbedder`'s.
    """

    def __init__(self, *, embed_fn: Callable[[list[str]], list[list[float]]], dim: int) -> None:
        """embed_fn: texts -> vectors of length `dim` (>= 1)."""
        if isinstance(dim, bool) or int(dim) != dim or dim < 1:
            raise NoveltyConfigError(
                f"embedding dim must be an integer >= 1, got {dim!r}",
                fix="set it to the embedding model's output length (e.g. 1536 for text-embedding-3-small)",
            )
        self._embed_fn = embed_fn
        self._dim = int(dim)

    def _vectors(self, texts: list[str]) -> np.ndarray:
        """One endpoint call for all texts; shape and values checked."""
        matrix = np.asarray(self._embed_fn(texts), dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[0] != len(texts) or matrix.shape[1] != self._dim:
            raise EmbeddingEndpointError(
                f"the embedding endpoint returned shape {matrix.shape} for {len(texts)} texts; "
                f"expected {len(texts)} x {self._dim}",
                fix=f"set the embedding dimension to the model's true size (got {matrix.shape[-1]}) "
                "or choose the embedding model the run was configured with",
            )
        if not np.all(np.isfinite(matrix)):
            raise EmbeddingEndpointError(
                "the embedding endpoint returned NaN or infinite values",
                fix="check the embedding model and endpoint; it returned an unusable vector",
            )
        return _unit(matrix)


def behaviour_vector(
    task_scores: Mapping[str, float], *, task_ids: Sequence[str], descriptor: Sequence[float] = ()
) -> np.ndarray:
    """An agent's behaviour as float32: descriptor values (NaN -> 0), then per-task scores in
    `task_ids` order (a task the agent was not scored on -> 0.0). Length len(descriptor) + len(task_ids)."""
    head = np.nan_to_num(np.asarray(descriptor, dtype=np.float64), nan=0.0)
    tail = np.array([float(task_scores.get(task_id, 0.0)) for task_id in task_ids], dtype=np.float64)
    return np.concatenate([head, tail]).astype(np.float32)


def _check_threshold(threshold: float) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0 < threshold <= 1:
        raise NoveltyConfigError(
            f"near-duplicate threshold must be a cosine similarity in (0, 1], got {threshold!r}",
            fix="use e.g. 0.995 (1.0 refuses only identical code; lower values refuse more)",
        )
    return float(threshold)


def near_duplicate(embedding: np.ndarray, embeddings: np.ndarray, *, threshold: float) -> tuple[int, float] | None:
    """(row, cosine similarity) of the row of `embeddings` most similar to `embedding`, when that
    similarity is >= `threshold` (in (0, 1]; 1e-6 of float32 rounding allowed); else None.

    Rows and query must be unit length, so one matrix-vector product gives every cosine.
    """
    threshold = _check_threshold(threshold)
    if len(embeddings) == 0:
        return None
    similarities = embeddings @ np.asarray(embedding, dtype=embeddings.dtype)
    row = int(np.argmax(similarities))
    # float32 dot products of equal unit vectors can land a hair under 1.0.
    similarity = min(float(similarities[row]), 1.0)
    return (row, similarity) if similarity >= threshold - 1e-6 else None


@dataclass(frozen=True)
class NearDuplicate:
    """A candidate refused by the gate: the accepted agent it nearly copies, and how closely."""

    agent_id: int
    similarity: float


class DuplicateGate:
    """Refuses candidates whose code embedding is within `threshold` cosine similarity of an
    accepted member's. Members live in a float32 matrix that doubles when full."""

    def __init__(self, *, threshold: float = 0.995, embedder: CodeEmbedder | EndpointEmbedder) -> None:
        """threshold: cosine similarity in (0, 1] at or above which a candidate is a near duplicate."""
        self._threshold = _check_threshold(threshold)
        self._embedder = embedder
        self._matrix = np.empty((16, embedder.dim), dtype=np.float32)
        self._agent_ids: list[int] = []

    @property
    def threshold(self) -> float:
        """Cosine similarity in (0, 1] at or above which `check` refuses."""
        return self._threshold

    def __len__(self) -> int:
        return len(self._agent_ids)

    def check(self, files: Mapping[str, str] | np.ndarray) -> NearDuplicate | None:
        """The accepted member `files` (or a ready embedding) nearly duplicates, or None if it is new enough."""
        embedding = self._embedding(files)
        hit = near_duplicate(embedding, self._matrix[: len(self)], threshold=self._threshold)
        return None if hit is None else NearDuplicate(agent_id=self._agent_ids[hit[0]], similarity=hit[1])

    def add(self, agent_id: int, files_or_embedding: Mapping[str, str] | np.ndarray) -> np.ndarray:
        """Accept `agent_id` as a member; returns its embedding (unit float32) for reuse, e.g. in the view."""
        embedding = self._embedding(files_or_embedding)
        if len(self) == len(self._matrix):
            grown = np.empty((2 * len(self._matrix), self._matrix.shape[1]), dtype=np.float32)
            grown[: len(self)] = self._matrix
            self._matrix = grown
        self._matrix[len(self)] = embedding
        self._agent_ids.append(int(agent_id))
        return embedding

    def _embedding(self, files_or_embedding: Mapping[str, str] | np.ndarray) -> np.ndarray:
        if isinstance(files_or_embedding, np.ndarray):
            vector = files_or_embedding.astype(np.float32).reshape(-1)
            if vector.shape != (self._embedder.dim,):
                raise ValueError(f"embedding has length {vector.size}, the gate's embedder makes {self._embedder.dim}")
            norm = float(np.linalg.norm(vector))
            return vector / norm if norm > 0 else vector
        return self._embedder.embed(files_or_embedding)
