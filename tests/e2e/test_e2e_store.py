"""Whole searches through the CLI with the archive on a real PostgreSQL (`--store`): a driver killed with
SIGKILL resumes from PostgreSQL exactly as from SQLite, and a database restarted mid-run costs nothing.

Like tests/e2e/test_e2e_search.py's SIGKILL test, but the proposals come from ast_mutate (no FM: the model
named is a hosted one with a placeholder key nothing uses), so no model server is started and a run of
40 iterations takes well under a minute on the deceptive benchmark in the local sandbox.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.archive.errors import ArchiveError
from cambrian.archive.models import RunStatus
from cambrian.archive.store import Archive
from tests.postgres import PostgresServer, start_private_server

CAMBRIAN = [sys.executable, "-m", "cambrian"]
ITERATIONS = 40


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    yield from start_private_server()


def _env() -> dict[str, str]:
    return {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "CAMBRIAN_TEST_UNUSED_KEY": "never-used"}


def _run_args(name: str, store: str, runs: Path) -> list[str]:
    return [
        *CAMBRIAN,
        "run",
        "deceptive",
        "--name",
        name,
        "--iterations",
        str(ITERATIONS),
        "--seed",
        "3",
        "--sandbox",
        "local",
        "--set",
        "search.operators={ast_mutate = 1.0}",
        "--model",
        "openai/gpt-4o-mini",
        "--api-key-env",
        "CAMBRIAN_TEST_UNUSED_KEY",
        "--store",
        store,
        "--runs-dir",
        str(runs),
    ]


def _committed(store: str, name: str) -> dict[int, tuple[str, float | None, str | None]]:
    """agent id -> (status, score, genome) as committed so far (empty before the run exists)."""
    try:
        with Archive(store, readonly=True) as archive:
            run = archive.get_run(name)
            return {a.key: (a.status.value, a.score, a.genome_hash) for a in archive.agents(run.key)}
    except ArchiveError:
        return {}


def _wait_for(store: str, name: str, proc: subprocess.Popen, agents: int) -> None:
    deadline = time.monotonic() + 300
    while len(_committed(store, name)) < agents:
        assert proc.poll() is None, "the run ended before it could be interrupted"
        assert time.monotonic() < deadline, f"the run committed fewer than {agents} agents in 300 s"
        time.sleep(0.1)


def test_sigkill_mid_run_then_resume_from_postgresql_loses_nothing(server: PostgresServer, tmp_path: Path) -> None:
    store, runs = server.create_database(), tmp_path / "runs"
    proc = subprocess.Popen(
        _run_args("killed", store, runs),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        env=_env(),
    )
    try:
        _wait_for(store, "killed", proc, 8)
        os.killpg(proc.pid, signal.SIGKILL)  # cambrian and any sandboxed program
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    before = _committed(store, "killed")
    resumed = subprocess.run(
        [*CAMBRIAN, "resume", "killed", "--store", store, "--runs-dir", str(runs)],
        capture_output=True,
        text=True,
        timeout=600,
        env=_env(),
    )
    assert resumed.returncode == 0 and "run killed finished" in resumed.stdout, resumed.stdout + resumed.stderr
    after = _committed(store, "killed")
    for agent_id, (status, score, genome) in before.items():
        assert agent_id in after, f"agent {agent_id} was lost"
        new_status, new_score, new_genome = after[agent_id]
        assert new_genome == genome
        if status in ("evaluated", "invalid"):
            assert (new_status, new_score) == (status, score), f"agent {agent_id} changed after resume"
        else:  # proposed / evaluating when killed: evaluated on resume
            assert new_status in ("evaluated", "invalid")
    with Archive(store, readonly=True) as archive:
        run = archive.get_run("killed")
        assert run.status == RunStatus.finished
        assert archive.iterations_done(run.key) == ITERATIONS
        children = [a for a in archive.agents(run.key) if a.iteration > 0]
        assert sorted(a.iteration for a in children) == list(range(1, ITERATIONS + 1)), "each iteration once"
        assert not archive.pending(run.key, max_attempts=3)


def test_a_database_restart_mid_run_makes_the_loop_wait_and_lose_nothing(
    server: PostgresServer, tmp_path: Path
) -> None:
    store, runs = server.create_database(), tmp_path / "runs"
    proc = subprocess.Popen(
        _run_args("steady", store, runs), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env()
    )
    try:
        _wait_for(store, "steady", proc, 6)
        server.restart("fast")
        _wait_for(store, "steady", proc, 16)
        server.restart("immediate")  # as if the server crashed
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0 and "run steady finished" in out, out + err
    assert "went away" in err and "is back after" in err, err  # one warning per outage, and its end
    with Archive(store, readonly=True) as archive:
        run = archive.get_run("steady")
        assert run.status == RunStatus.finished and archive.iterations_done(run.key) == ITERATIONS
        children = [a for a in archive.agents(run.key) if a.iteration > 0]
        assert sorted(a.iteration for a in children) == list(range(1, ITERATIONS + 1)), "each iteration once"
        assert all(a.status.value in ("evaluated", "invalid") for a in children)
