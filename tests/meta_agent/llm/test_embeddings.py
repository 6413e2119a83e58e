"""Code embeddings from a local model: the real SmolLM2-135M served in embedding mode (`LocalEmbeddings`), long
texts in chunks, a dead server as an error with its fix, and the store that embeds each text once."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from cambrian.meta_agent.llm import EmbeddingUnavailable
from cambrian.meta_agent.llm.embeddings import LocalEmbeddings, StoredEmbeddings

#: SmolLM2-135M's hidden size: the length of its embeddings.
SMOLLM2_WIDTH = 576
PROGRAM = "def area(width: float, height: float) -> float:\n    return width * height\n"


@pytest.fixture(scope="module")
def embeddings(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalEmbeddings]:
    """SmolLM2-135M's embedding server with a 64-token context (48-token chunks: a short program needs several)."""
    log = tmp_path_factory.mktemp("embeddings") / "server.log"
    server = LocalEmbeddings(smollm2_path, alias="smollm2-135m", context_tokens=64, log_path=log)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_the_server_embeds_each_text_in_the_models_width(embeddings: LocalEmbeddings) -> None:
    first, empty, again = embeddings.embed([PROGRAM, "", PROGRAM])
    assert embeddings.dim == SMOLLM2_WIDTH and len(first) == len(empty) == SMOLLM2_WIDTH
    assert empty == [0.0] * SMOLLM2_WIDTH  # no tokens, no vector: the origin
    assert np.all(np.isfinite(first)) and np.linalg.norm(first) > 0.5
    np.testing.assert_allclose(first, again, atol=1e-5)  # the same text, the same vector
    other = embeddings.embed(["import math\nprint(math.pi)\n"])[0]
    assert not np.allclose(first, other, atol=1e-3)


def test_a_text_longer_than_the_servers_context_is_embedded_in_chunks_and_its_tail_counts(
    embeddings: LocalEmbeddings,
) -> None:
    """The server holds 64 tokens; a longer text is not cut: an edit in its last chunk still moves it."""
    long = "".join(f"def f{i}(x):\n    return x * {i} + {i * i}\n\n" for i in range(18))
    assert embeddings.chunk_tokens == 48 and len(embeddings.tokens(long)) > 4 * embeddings.chunk_tokens
    edited = long.replace("return x * 17 + 289", "return x * 17 - 289")
    original, changed = (np.asarray(v) for v in embeddings.embed([long, edited]))
    cosine = float(original @ changed / np.linalg.norm(original) / np.linalg.norm(changed))
    assert len(original) == SMOLLM2_WIDTH and cosine < 1 - 1e-7


def test_last_token_pooling_embeds_a_text_longer_than_the_context_too(smollm2_path: Path, tmp_path: Path) -> None:
    with LocalEmbeddings(smollm2_path, alias="smollm2-135m", context_tokens=64, pooling="last") as server:
        text = "".join(f"def f{i}(x):\n    return x * {i}\n\n" for i in range(12))
        assert len(server.tokens(text)) > 2 * server.chunk_tokens
        (vector,) = server.embed([text])
    assert len(vector) == SMOLLM2_WIDTH and np.all(np.isfinite(vector))


def test_the_embedding_server_answers_completions_too(embeddings: LocalEmbeddings) -> None:
    """What the module docstring says was measured: embedding mode keeps completions (it is not why a run
    embeds on a server of its own; an embedding waiting behind a completion is)."""
    reply = httpx.post(
        f"{embeddings.server.base_url}/chat/completions",
        json={"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4, "temperature": 0},
        timeout=300,
    )
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]


def test_a_dead_embedding_server_is_an_error_naming_the_cause_and_the_fix(smollm2_path: Path, tmp_path: Path) -> None:
    server = LocalEmbeddings(smollm2_path, alias="smollm2-135m", log_path=tmp_path / "embeddings.log")
    server.start()
    try:
        pid = server.server.pid
        assert pid is not None
        os.killpg(pid, signal.SIGKILL)  # as the OOM killer would
        deadline = time.monotonic() + 60
        while server.server.running and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(EmbeddingUnavailable) as info:
            server.embed([PROGRAM])
    finally:
        server.stop()
    message = str(info.value)
    assert "embedding server of smollm2-135m has exited (status -9)" in message
    assert "cambrian resume" in info.value.fix and str(tmp_path / "embeddings.log") in info.value.fix
    assert "search.novelty.embedding_model" in info.value.fix


def test_a_context_below_32_tokens_is_refused(smollm2_path: Path) -> None:
    with pytest.raises(ValueError, match="context_tokens must be >= 32"):
        LocalEmbeddings(smollm2_path, alias="x", context_tokens=16)


class _Counting:
    """texts -> vectors (each text's length and its count of "x"), counting what it was asked for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    def __call__(self, texts: list[str]) -> list[list[float]]:
        self.asked += texts
        return [[float(len(text)), float(text.count("x"))] for text in texts]


def test_stored_embeddings_embed_each_text_once_and_a_new_store_reads_them_back(tmp_path: Path) -> None:
    path = tmp_path / "run" / "embeddings-m.jsonl"
    embed = _Counting()
    store = StoredEmbeddings(embed, path, identity={"model": "m", "dim": 2})
    assert store(["ab", "xx", "ab"]) == [[2.0, 0.0], [2.0, 2.0], [2.0, 0.0]]
    assert store(["xx"]) == [[2.0, 2.0]] and embed.asked == ["ab", "xx"]

    again = _Counting()
    reopened = StoredEmbeddings(again, path, identity={"model": "m", "dim": 2})
    assert len(reopened) == 2 and reopened(["ab", "xyz"]) == [[2.0, 0.0], [3.0, 1.0]]
    assert again.asked == ["xyz"]
    lines = path.read_text().splitlines()
    assert json.loads(lines[0]) == {"model": "m", "dim": 2}
    assert [json.loads(line)["sha256"] for line in lines[1:]] == [
        hashlib.sha256(text.encode()).hexdigest() for text in ("ab", "xx", "xyz")
    ]


def test_a_store_cut_short_or_made_by_another_embedder_is_recovered(tmp_path: Path) -> None:
    path = tmp_path / "embeddings-m.jsonl"
    StoredEmbeddings(_Counting(), path, identity={"model": "m"})(["ab", "cd"])
    path.write_text(path.read_text()[:-9])  # a kill in the middle of the last line
    embed = _Counting()
    store = StoredEmbeddings(embed, path, identity={"model": "m"})
    assert len(store) == 1 and store(["cd", "ef"]) == [[2.0, 0.0], [2.0, 0.0]] and embed.asked == ["cd", "ef"]
    assert len(StoredEmbeddings(_Counting(), path, identity={"model": "m"})) == 3  # the cut line was skipped

    other = StoredEmbeddings(_Counting(), path, identity={"model": "another"})
    assert len(other) == 0 and path.read_text() == json.dumps({"model": "another"}) + "\n"
