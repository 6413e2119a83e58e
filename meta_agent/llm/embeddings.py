"""Code embeddings from a local model: its own llama.cpp server in embedding mode, called over /v1/embeddings.

`LocalEmbeddings` starts (and stops) a `LocalServer` of a GGUF model with embeddings on, one slot and one
thread per core it may use, and turns texts into vectors through the server's OpenAI-compatible API (the
`openai` client). Measured with xllamacpp (bench/embeddings.py, docs/results/generality.md): one server
can answer completions and embeddings alike (the same completion text either way), but an embedding request
waits while that server generates (6.0-6.3 s for an embedding that takes 1.3 s alone, behind a 400-token
reply), so a run's embeddings get a server of their own instead of the FM's.

Long programs are split, never cut: a text is tokenized by the server (`/tokenize`), its tokens go to the
server in chunks that fit the server's context, and the text's vector is the token-weighted mean of its chunks'
unit vectors. Truncating would make every edit past the cut invisible (a gate would call such children
duplicates of their parents). A 512-token context keeps the server near 370 MB (2,048: 1 GB, measured with
SmolLM2-135M) at the same speed, and fit every registry model's training context.

A server that died or stops answering raises `EmbeddingUnavailable` naming its log, and the run stops.

`StoredEmbeddings` keeps each text's vector in a JSON-lines file (a run's folder), so a text is embedded once
however often it is asked for (the duplicate gate and the view ask for a child's twice) and a resumed run
embeds only its new agents.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np

from cambrian.meta_agent.llm._errors import EmbeddingUnavailable
from cambrian.meta_agent.llm.serve import LocalServer, Pooling, default_threads

__all__ = ["CONTEXT_TOKENS", "LocalEmbeddings", "StoredEmbeddings"]

#: The embedding server's context in tokens: see the module docstring.
CONTEXT_TOKENS = 512
#: Tokens of that context a chunk leaves free: llama.cpp refuses an input as long as the context (measured
#: with "last" pooling: "request (512 tokens) exceeds the available context size (512 tokens)"), and a model
#: may add a BOS or EOS token of its own.
_SPARE_TOKENS = 16


class LocalEmbeddings:
    """A local model's embedding server and `embed(texts) -> vectors` through it.

    model_path: a GGUF file. alias: the model's name in messages and requests. threads: llama.cpp
    threads (default: one per core this process may use). context_tokens: the server's context (>= 32;
    at most the model's training context is used); `chunk_tokens`, the most tokens embedded at once, is
    16 fewer. pooling: "mean" (of the tokens'
    vectors) or "last" (the last token's). timeout_s: per request; log_path: the server's output
    (default: a temp file, removed at stop).
    """

    def __init__(
        self,
        model_path: Path,
        *,
        alias: str,
        threads: int | None = None,
        context_tokens: int = CONTEXT_TOKENS,
        pooling: Pooling = "mean",
        timeout_s: float = 300.0,
        log_path: Path | None = None,
    ) -> None:
        if context_tokens < 2 * _SPARE_TOKENS:
            raise ValueError(f"context_tokens must be >= {2 * _SPARE_TOKENS}, got {context_tokens}")
        self.alias = alias
        self.pooling = pooling
        self.timeout_s = timeout_s
        self.server = LocalServer(
            model_path,
            alias=alias,
            n_ctx=context_tokens,
            n_parallel=1,
            threads=threads if threads is not None else default_threads(),
            backend="llamacpp",
            log_path=log_path,
            embeddings=pooling,
        )
        self.chunk_tokens = context_tokens - _SPARE_TOKENS
        self._dim: int | None = None
        self._client: Any = None  # openai.OpenAI, made at start

    @property
    def dim(self) -> int:
        """The embedding length (the model's width, e.g. 576 for SmolLM2-135M); known once started."""
        if self._dim is None:
            raise RuntimeError("start() the embedding server first")
        return self._dim

    def start(self, timeout_s: float = 180.0) -> None:
        """Start the server, learn the model's training context and width from it (one short embedding)."""
        import openai  # imported here: a run without a local embedding model never needs it

        self.server.start(timeout_s=timeout_s)
        try:
            self._client = openai.OpenAI(
                base_url=self.server.base_url, api_key="local", timeout=self.timeout_s, max_retries=1
            )
            self.chunk_tokens = min(self.chunk_tokens, self._trained_context() - _SPARE_TOKENS)
            self._dim = len(self._embed_chunks([self.tokens("def f():\n    return 0\n")])[0])
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Stop the server (its log stays where log_path put it)."""
        if self._client is not None:
            self._client.close()
            self._client = None
        self.server.stop()

    def __enter__(self) -> LocalEmbeddings:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def embed(self, texts: list[str]) -> list[list[float]]:
        """One vector of length `dim` per text (an empty text: zeros), long texts in chunks (module docstring)."""
        tokens = [self.tokens(text) for text in texts]
        chunks = [[ids[i : i + self.chunk_tokens] for i in range(0, len(ids), self.chunk_tokens)] for ids in tokens]
        flat = [chunk for text_chunks in chunks for chunk in text_chunks]
        vectors = iter(self._embed_chunks(flat) if flat else [])
        out: list[list[float]] = []
        for text_chunks in chunks:
            if not text_chunks:
                out.append([0.0] * self.dim)
                continue
            weights = np.array([len(chunk) for chunk in text_chunks], dtype=np.float64)
            rows = np.array([_unit(next(vectors)) for _ in text_chunks])
            out.append((weights @ rows / weights.sum()).tolist())
        return out

    def tokens(self, text: str) -> list[int]:
        """The text's tokens, from the server's own tokenizer (llama.cpp's /tokenize, beside the OpenAI API)."""
        import httpx

        url = self.server.base_url.removesuffix("/v1") + "/tokenize"
        reply = self._call("tokenize", lambda: self._client.post(url, body={"content": text}, cast_to=httpx.Response))
        return [int(token) for token in reply.json()["tokens"]]

    def _embed_chunks(self, chunks: Sequence[list[int]]) -> list[list[float]]:
        reply = self._call(
            "embed",
            lambda: self._client.embeddings.create(model=self.alias, input=list(chunks), encoding_format="float"),
        )
        data = sorted(reply.data, key=lambda item: item.index)
        if len(data) != len(chunks):
            raise self._unavailable(f"it returned {len(data)} vectors for {len(chunks)} chunks")
        return [list(item.embedding) for item in data]

    def _trained_context(self) -> int:
        """The model's training context, as the server reports it (`/v1/models` meta); the chunk size if absent."""
        listing = self._call("list its model", lambda: self._client.models.list())
        for model in listing.data:
            meta = getattr(model, "meta", None) or {}
            if isinstance(meta, dict) and int(meta.get("n_ctx_train") or 0) > 0:
                return int(meta["n_ctx_train"])
        return self.chunk_tokens

    def _call(self, what: str, request: Any) -> Any:
        """`request()`, with the server's failures as EmbeddingUnavailable naming the cause."""
        import openai

        try:
            return request()
        except openai.APIStatusError as exc:
            raise self._unavailable(f"it refused to {what} (HTTP {exc.status_code}: {_message(exc)})") from None
        except openai.APITimeoutError:
            raise self._unavailable(f"it did not {what} within {self.timeout_s:g} s") from None
        except openai.APIConnectionError as exc:
            raise self._unavailable(f"it could not be reached to {what} ({exc})") from None

    def _unavailable(self, problem: str) -> EmbeddingUnavailable:
        server = self.server
        if server.running:
            where = f"the local embedding server of {self.alias} at {server.base_url}"
            fix = (
                f"resume the run (`cambrian resume RUN`: it starts a new server); its log is {server.log_path}. On a "
                "busy machine raise fm.timeout_s; to go on without FM embeddings, remove search.novelty.embedding_model"
            )
            return EmbeddingUnavailable(f"{where}: {problem}", fix=fix)
        status = server.exit_status()
        return EmbeddingUnavailable(
            f"the local embedding server of {self.alias} has exited"
            + (f" (status {status})" if status is not None else "")
            + f"; log tail:\n{server.log_tail(1500)}",
            fix=f"resume the run (`cambrian resume RUN`: it starts a new server); if it dies again read its log at "
            f"{server.log_path}, or remove search.novelty.embedding_model to use the character n-grams",
        )


class StoredEmbeddings:
    """texts -> vectors through `embed`, each text's vector kept by the sha256 of the text, in memory and in a
    JSON-lines file at `path`: a first line naming the embedder (`identity`: model, pooling, chunk size...),
    then one {"sha256", "vector"} per text. A file made by another embedder is started afresh; a line cut
    short by a kill is skipped (its text is embedded again when asked for).
    """

    def __init__(
        self, embed: Callable[[list[str]], list[list[float]]], path: Path, *, identity: Mapping[str, object]
    ) -> None:
        self._embed = embed
        self.path = Path(path)
        self._identity = dict(identity)
        self._vectors: dict[str, list[float]] = {}
        self._load()

    def __len__(self) -> int:
        return len(self._vectors)

    def __call__(self, texts: list[str]) -> list[list[float]]:
        keys = [hashlib.sha256(text.encode()).hexdigest() for text in texts]
        missing = {key: text for key, text in zip(keys, texts) if key not in self._vectors}
        if missing:
            vectors = self._embed(list(missing.values()))
            with self.path.open("a", encoding="utf-8") as out:
                for key, vector in zip(missing, vectors):
                    self._vectors[key] = [float(v) for v in vector]
                    out.write(json.dumps({"sha256": key, "vector": self._vectors[key]}) + "\n")
        return [self._vectors[key] for key in keys]

    def _load(self) -> None:
        text = self.path.read_text(encoding="utf-8") if self.path.is_file() else ""
        lines = text.splitlines()
        if not lines or _json_or_none(lines[0]) != self._identity:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(self._identity) + "\n", encoding="utf-8")
            return
        if not text.endswith("\n"):  # a line cut short: the next one starts on a line of its own
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n")
        for line in lines[1:]:
            row = _json_or_none(line)
            if isinstance(row, dict) and isinstance(row.get("sha256"), str) and isinstance(row.get("vector"), list):
                self._vectors[row["sha256"]] = row["vector"]


def _json_or_none(line: str) -> object:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _unit(vector: Sequence[float]) -> np.ndarray:
    array = np.asarray(vector, dtype=np.float64)
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def _message(exc: Any) -> str:
    """The server's error message from an openai APIStatusError (llama.cpp: {"error": {"message": ...}})."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
    return str(exc)
