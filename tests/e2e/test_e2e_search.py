"""End to end through the CLI: a real search with SmolLM2-135M served by xllamacpp.

These are the slowest tests of the suite (a minute or two each on 2 cores).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cambrian.archive.errors import RunNotFound
from cambrian.archive.models import Agent, AgentStatus, RunStatus
from cambrian.archive.store import Archive
from cambrian.meta_agent.operators import RUN_REPAIR_NOTE
from tests.conftest import SHORT_REPLIES

pytestmark = pytest.mark.slow

CAMBRIAN = [sys.executable, "-m", "cambrian"]


def cambrian(*args: str, runs_dir: Path, timeout: float = 600, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    proc = subprocess.run(
        [*CAMBRIAN, *args, "--runs-dir", str(runs_dir)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )
    if check:
        assert proc.returncode == 0, f"cambrian {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def _search_args(name: str, iterations: int) -> list[str]:
    return [
        "run",
        "circle_packing",
        "--name",
        name,
        "--iterations",
        str(iterations),
        "--model",
        "smollm2-135m",
        "--seed",
        "1",
        *SHORT_REPLIES,
        "--set",
        "evaluation.timeout_s=20",
        "--fm-concurrency",
        "2",
        "--eval-concurrency",
        "2",
    ]


def test_search_with_real_local_model_then_browse_and_export(tmp_path: Path, smollm2_path: Path) -> None:
    runs = tmp_path / "runs"
    out = cambrian(*_search_args("e2e", 6), runs_dir=runs)
    assert "best score" in out.stdout
    assert "archive.db" in out.stdout and "cambrian export e2e" in out.stdout

    with Archive.at(runs / "e2e" / "archive.db") as archive:
        run = archive.get_run("e2e")
        assert run.status == RunStatus.finished
        agents = archive.agents(int(run.id))
        seed = agents[0]
        assert seed.operator == "seed" and seed.status == AgentStatus.evaluated and seed.score > 0
        children = [a for a in agents if a.iteration > 0]
        # One first try per iteration; a child whose run failed (a crash, the 20 s limit) may add its repair,
        # a child of the same iteration.
        first_tries = [a for a in children if not _is_run_repair(a)]
        assert sorted(a.iteration for a in first_tries) == list(range(1, 7))
        repairs = [a.iteration for a in children if _is_run_repair(a)]
        assert len(set(repairs)) == len(repairs) and set(repairs) <= set(range(1, 7))  # one round: one repair
        assert all(a.parent_id is not None for a in children)
        assert all(a.status in (AgentStatus.evaluated, AgentStatus.invalid) for a in children)
        assert all(a.invalid_reason for a in children if a.status == AgentStatus.invalid)
        calls = archive.llm_calls(int(run.id))
        assert len(calls) >= 6 and all(c.model == "smollm2-135m" for c in calls)
        assert sum(c.completion_tokens for c in calls) > 0
        assert all(c.agent_id is not None for c in calls if c.error is None)
        frozen = json.loads(run.config_json)
        assert frozen["fm"]["model"] == "smollm2-135m" and frozen["seed"] == 1

    tree = cambrian("tree", "e2e", runs_dir=runs).stdout
    assert "#1" in tree and "seed" in tree
    assert all(f"#{a.id} " in tree for a in children)
    best_path = cambrian("tree", "e2e", "--best-path", runs_dir=runs).stdout
    assert "#1" in best_path

    show = cambrian("show", "e2e", "1", runs_dir=runs).stdout
    assert "pack_circles" in show and "n26" in show and "search score" in show

    status = cambrian("status", "e2e", runs_dir=runs).stdout
    assert "finished" in status and "completion tokens" in status

    runs_list = cambrian("runs", runs_dir=runs).stdout
    assert "e2e" in runs_list

    dest = tmp_path / "exported"
    cambrian("export", "e2e", "--best", "2", "--to", str(dest), runs_dir=runs)
    exported = sorted(dest.iterdir())
    assert exported
    manifest = json.loads((exported[0] / "manifest.json").read_text())
    assert manifest["genome_hash"] and manifest["lineage"][0]["operator"] == "seed"
    assert (exported[0] / "packing.py").exists()


def _committed(db: Path) -> dict[int, tuple[str, float | None, str | None]]:
    # Read-only: the search may be writing the archive (even creating it) at this instant.
    with Archive.at(db, readonly=True) as archive:
        run = archive.get_run("killed")
        return {int(a.id): (a.status.value, a.score, a.genome_hash) for a in archive.agents(int(run.id))}


def _committed_so_far(db: Path) -> int:
    """How many agents the live search has committed (0 until its archive and run row exist)."""
    if not db.exists():
        return 0
    try:
        return len(_committed(db))
    except RunNotFound:  # the schema is committed a moment before the run row
        return 0


@pytest.mark.timeout(2400)  # the kill waits for an event (4 committed agents), however slow a busy machine is
def test_sigkill_mid_run_then_resume_loses_nothing(tmp_path: Path, smollm2_path: Path) -> None:
    runs = tmp_path / "runs"
    db = runs / "killed" / "archive.db"
    proc = subprocess.Popen(
        [*CAMBRIAN, *_search_args("killed", 8), "--runs-dir", str(runs)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        ceiling = time.monotonic() + 1500  # a ceiling only (at load 4-5 a 400 s limit failed); the event decides
        while time.monotonic() < ceiling:
            if _committed_so_far(db) >= 4:
                break
            assert proc.poll() is None, "the run ended before it could be killed"
            time.sleep(0.5)
        else:
            pytest.fail("the run committed fewer than 4 agents in 1500 s")
        # SIGKILL the whole group: cambrian, its model server and any sandboxed program.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)

    before = _committed(db)
    out = cambrian("resume", "killed", runs_dir=runs)
    assert "finished" in out.stdout
    after = _committed(db)
    for agent_id, (status, score, genome) in before.items():
        assert agent_id in after, f"agent {agent_id} was lost"
        new_status, new_score, new_genome = after[agent_id]
        assert new_genome == genome
        if status in ("evaluated", "invalid"):
            assert (new_status, new_score) == (status, score), f"agent {agent_id} changed after resume"
        else:  # proposed / evaluating when killed: evaluated on resume
            assert new_status in ("evaluated", "invalid")
    with Archive.at(db, readonly=True) as archive:
        run = archive.get_run("killed")
        assert run.status == RunStatus.finished
        assert archive.iterations_done(int(run.id)) == 8
        first_tries = [a for a in archive.agents(int(run.id)) if a.iteration > 0 and not _is_run_repair(a)]
        assert sorted(a.iteration for a in first_tries) == list(range(1, 9)), "every iteration proposed exactly once"
        assert not archive.pending(int(run.id), max_attempts=3)


def test_user_errors_print_cause_and_fix_without_traceback(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    cases = [
        (["run", "circle_packing", "--strategy", "bogus"], "unknown strategy"),
        (["run", "no_such_benchmark"], "no_such_benchmark"),
        (["run", "circle_packing", "--set", "budget.iterationz=3"], "unknown key"),
        (["run", "circle_packing", "--model", "no-such-model"], "no-such-model"),
        (["status", "missing-run"], "no run named"),
        (["run", "circle_packing", "--set", "benchmark_options.n=1"], "n"),
    ]
    for args, needle in cases:
        proc = cambrian(*args, runs_dir=runs, check=False, timeout=120)
        assert proc.returncode != 0, args
        assert "Traceback" not in proc.stderr + proc.stdout, (args, proc.stderr)
        assert needle in proc.stderr, (args, proc.stderr)
        assert "fix:" in proc.stderr, (args, proc.stderr)


def _is_run_repair(agent: Agent) -> bool:
    """A child the loop made by sending a failed run back to the FM: it shares its iteration with that child."""
    return (agent.repair_note or "").startswith(RUN_REPAIR_NOTE)
