"""Runs whose code embeddings come from a local model (`search.novelty.embedding_model = "smollm2-135m"`): the
real SmolLM2-135M served by a llama.cpp server of the run's own in embedding mode, the deceptive benchmark's
children made by `ast_mutate` (no FM needed for proposals), the real local sandbox and SQLite archive.

What a run stores (one vector per genome, read back on resume), what it refuses before it starts (a missing
model file, an embedding size the model does not make, a litellm endpoint that does not answer), and a server
killed in the middle of a run: a non-zero exit naming the cause and the fix, nothing committed lost, resumed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import cambrian
from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.novelty import genome_text
from cambrian.archive.store import Archive
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.llm import EmbeddingUnavailable
from cambrian.meta_agent.search import Reporter, resume_run
from tests.e2e.test_e2e_search import CAMBRIAN
from tests.e2e.test_e2e_search import cambrian as cambrian_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]  # real searches, however slow a busy machine is

SMOLLM2_WIDTH = 576


def _config(**novelty: Any) -> dict[str, Any]:
    settings = {"embedding_model": "smollm2-135m", "space": "code", **novelty}
    return {"search": {"operators": {"ast_mutate": 1.0}, "strategy": "novelty", "novelty": settings}}


def _stored(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the rows of a run's embeddings file."""
    header, *rows = (json.loads(line) for line in path.read_text().splitlines())
    return header, rows


def _sha(files: dict[str, str]) -> str:
    return hashlib.sha256(genome_text(files).encode()).hexdigest()


def _embedding_servers_of(pid: int) -> list[int]:
    """The embedding servers (llama.cpp children started with --embeddings) whose parent is process `pid`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if parent == pid and b"--embeddings" in command:
            found.append(int(entry.name))
    return found


def test_a_run_with_a_local_embedding_model_stores_each_genomes_embedding_and_resume_reuses_them(
    smollm2_path: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="cambrian")
    run = cambrian.search(
        "deceptive", iterations=4, sandbox="local", runs_dir=tmp_path, name="fm-embeddings", config=_config()
    )
    assert run.status == "finished"
    messages = [record.getMessage() for record in caplog.records]
    assert any(m.startswith("starting a local embedding server for smollm2-135m") for m in messages)
    assert any(f"({SMOLLM2_WIDTH} dimensions; 0 genomes embedded before)" in m for m in messages)
    assert not _embedding_servers_of(os.getpid())  # stopped with the run

    path = tmp_path / "fm-embeddings" / "embeddings-smollm2-135m.jsonl"
    header, rows = _stored(path)
    assert header == {"model": "smollm2-135m", "dim": SMOLLM2_WIDTH, "pooling": "mean", "chunk_tokens": 496}
    keys = [row["sha256"] for row in rows]
    assert len(keys) == len(set(keys))  # each genome embedded once
    evaluated = [run.agent(row["id"]) for row in run.lineage() if row["status"] == "evaluated"]
    assert len(evaluated) >= 2 and {_sha(dict(agent.files)) for agent in evaluated} <= set(keys)
    assert all(len(row["vector"]) == SMOLLM2_WIDTH for row in rows)

    caplog.clear()
    reporter = Reporter(
        info=logging.getLogger("cambrian").info,
        warn=logging.getLogger("cambrian").warning,
        event=lambda event: None,
        progress=lambda done, total: contextlib.nullcontext(),
    )
    resume_run(tmp_path, "fm-embeddings", {"iterations": 7}, reporter)
    assert any(
        f"({SMOLLM2_WIDTH} dimensions; {len(rows)} genomes embedded before)" in r.getMessage() for r in caplog.records
    )
    _, after = _stored(path)
    assert [row["sha256"] for row in after[: len(rows)]] == keys  # kept, not embedded again
    assert len({row["sha256"] for row in after}) == len(after) >= len(rows)
    assert len(run.lineage()) > len(evaluated)


def test_an_embedding_model_nothing_uses_starts_no_server(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="cambrian")
    config = {"search": {"operators": {"ast_mutate": 1.0}, "novelty": {"embedding_model": "smollm2-135m"}}}
    run = cambrian.search("deceptive", iterations=1, sandbox="local", runs_dir=tmp_path, name="unused", config=config)
    assert run.status == "finished"
    assert any("search.novelty.embedding_model = 'smollm2-135m' is not used" in r.getMessage() for r in caplog.records)
    assert not list((tmp_path / "unused").glob("embeddings-*"))


def test_a_missing_model_file_is_refused_before_the_run_exists(tmp_path: Path) -> None:
    missing = tmp_path / "absent.gguf"
    with pytest.raises(ConfigError) as info:
        cambrian.search(
            "deceptive",
            iterations=1,
            sandbox="local",
            runs_dir=tmp_path,
            name="m",
            config=_config(embedding_model=str(missing)),
        )
    assert f"no model file at {missing}" in str(info.value) and "cambrian models list" in info.value.fix
    assert not (tmp_path / "m").exists()


def test_an_embedding_size_the_model_does_not_make_is_refused_and_the_run_removed(
    smollm2_path: Path, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        cambrian.search(
            "deceptive", iterations=1, sandbox="local", runs_dir=tmp_path, name="d", config=_config(embedding_dim=256)
        )
    assert f"embedding_dim is 256, but the embedding model smollm2-135m makes vectors of {SMOLLM2_WIDTH}" in str(
        info.value
    )
    assert f"set it to {SMOLLM2_WIDTH}" in info.value.fix
    assert not (tmp_path / "d" / "archive.db").exists()  # nothing was evaluated: no run is left to resume


def test_a_litellm_embedding_endpoint_that_does_not_answer_fails_before_any_work(tmp_path: Path) -> None:
    config = _config(embedding_model="openai/text-embedding-3-small")
    config["fm"] = {"api_base": "http://127.0.0.1:9/v1"}  # nothing listens on port 9 (discard)
    with pytest.raises(EmbeddingUnavailable) as info:
        cambrian.search("deceptive", iterations=1, sandbox="local", runs_dir=tmp_path, name="l", config=config)
    assert "the embedding model 'openai/text-embedding-3-small' failed" in str(info.value)
    assert "search.novelty.embedding_model" in info.value.fix
    assert not (tmp_path / "l" / "archive.db").exists()


def test_a_killed_embedding_server_stops_the_run_with_its_cause_and_fix_and_resume_finishes_it(
    smollm2_path: Path, tmp_path: Path
) -> None:
    runs = tmp_path / "runs"
    args = ["run", "deceptive", "--name", "killed", "--iterations", "12", "--sandbox", "local"]
    sets = ["search.operators={ast_mutate = 1}", "search.strategy=novelty", "search.novelty.space=code"]
    sets.append("search.novelty.embedding_model=smollm2-135m")
    command = [*CAMBRIAN, *args, *(f"--set={item}" for item in sets), "--runs-dir", str(runs)]
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    search = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stored = runs / "killed" / "embeddings-smollm2-135m.jsonl"
    try:
        # Kill the server once it has embedded three genomes (a header line, then one line each).
        while not (stored.exists() and len(stored.read_text().splitlines()) >= 4):
            assert search.poll() is None, f"the run ended first:\n{search.communicate()}"
            time.sleep(0.5)
        (server,) = _embedding_servers_of(search.pid)
        os.killpg(server, signal.SIGKILL)
        out, err = search.communicate(timeout=600)
    finally:
        if search.poll() is None:
            search.kill()
            search.communicate()
    assert search.returncode == 2, out + err
    assert "error: the local embedding server of smollm2-135m has exited (status -9)" in err
    assert "fix: resume the run (`cambrian resume RUN`: it starts a new server)" in err
    assert "Traceback" not in err

    with Archive.at(runs / "killed" / "archive.db", readonly=True) as archive:
        row = archive.get_run("killed")
        assert row.status == RunStatus.failed and "embedding server" in str(row.error)
        before = {int(a.id) for a in archive.agents(int(row.id)) if a.status == AgentStatus.evaluated}
    assert len(before) >= 3

    cambrian_cli("resume", "killed", runs_dir=runs)
    with Archive.at(runs / "killed" / "archive.db", readonly=True) as archive:
        row = archive.get_run("killed")
        agents = archive.agents(int(row.id))
        assert row.status == RunStatus.finished
        assert before <= {int(a.id) for a in agents if a.status == AgentStatus.evaluated}  # nothing lost
        assert sorted({a.iteration for a in agents if a.iteration > 0}) == list(range(1, 13))
    assert not _embedding_servers_of(os.getpid())
