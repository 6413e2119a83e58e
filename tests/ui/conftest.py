"""Runs folders for the UI tests.

`real_run`: an archive written by a real search: the real CLI, the real SmolLM2-135M served locally,
the local sandbox (once per session; minutes on a busy machine, so the tests that use it are slow).
`runs_dir`: archives written through the real `Archive` API (real SQLite, no FM): a run whose code,
prompts, replies, feedback and reasons carry script payloads, a run whose very name is one, a
1,200-agent run with a wide and a deep clade for the tree's level of detail, and folders whose
archive.db is corrupt, someone else's database, or from another schema version.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus, Evaluation, LLMCall, LLMRequest, LLMResponse
from cambrian.archive.store import Archive
from tests.conftest import SHORT_REPLIES

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"
PAYLOAD = f"{SCRIPT} {IMG}"
#: A run whose name is itself markup (a folder name may hold '<', '>', '=' and spaces).
HOSTILE_RUN = "run<img src=x onerror=alert(1)>"
CONFIG = {
    "budget": {"iterations": 10},
    "fm": {"model": "scripted-model", "models": []},
    "search": {"strategy": "greedy", "bandit": {"algorithm": "off"}},
}


def _evaluate(archive: Archive, agent_id: int, score: float, *, descriptor: dict[str, float] | None = None) -> None:
    archive.mark_evaluating(agent_id)
    tasks = [Evaluation(agent_id=agent_id, task_id=f"task-{k}", score=score + k / 10, passed=k == 0) for k in range(2)]
    archive.finish_evaluation(
        agent_id, status=AgentStatus.evaluated, score=score, evaluations=tasks, descriptor=descriptor
    )


def write_hostile_run(runs_dir: Path, name: str) -> dict[str, int]:
    """A small run whose every untrusted text field carries PAYLOAD; returns the agent ids by role."""
    with Archive.at(runs_dir / name / "archive.db") as archive:
        run = archive.create_run(name=name, benchmark="circle_packing", seed=0, config_json=json.dumps(CONFIG))
        seed = archive.add_agent(run.key, files={"main.py": "def solve():\n    return 1\n"}, entry="main.py")
        _evaluate(archive, seed.key, 1.0, descriptor={"size": 1.0, "speed": 2.0})
        request = LLMRequest(
            request_hash="h-child",
            model="scripted-model",
            messages=json.dumps(
                [{"role": "system", "content": f"system {PAYLOAD}"}, {"role": "user", "content": f"user {PAYLOAD}"}]
            ),
            params=json.dumps({"temperature": 0.8}),
        )
        archive.record_llm_exchange(
            LLMCall(
                run_id=run.key,
                iteration=1,
                purpose="mutate",
                proposal_id="p-child",
                model="scripted-model",
                request_hash="h-child",
                prompt_tokens=50,
                completion_tokens=20,
                latency_s=0.5,
            ),
            LLMResponse(request_hash="h-child", model="scripted-model", text=f"reply {PAYLOAD}"),
            request,
        )
        code = f'def solve():\n    """{PAYLOAD}"""\n    return "{SCRIPT}"\n'
        child = archive.add_agent(
            run.key,
            files={"main.py": code, "notes/</script>.txt": PAYLOAD},
            entry="main.py",
            parent_id=seed.key,
            operator="diff",
            model="scripted-model",
            iteration=1,
            proposal_id="p-child",
            feedback=f"feedback {PAYLOAD}",
            repair_note=f"added {IMG}",
            prompt_tokens=50,
            completion_tokens=20,
        )
        archive.mark_evaluating(child.key)
        archive.finish_evaluation(
            child.key,
            status=AgentStatus.evaluated,
            score=2.0,
            descriptor={"size": 3.0, "speed": 1.0},
            evaluations=[
                Evaluation(
                    agent_id=child.key,
                    task_id=f"task {IMG}",
                    score=2.0,
                    feedback=f"task {PAYLOAD}",
                    stderr_tail=PAYLOAD,
                )
            ],
        )
        # An older call of the same agent whose request was never stored (archives before prompts were kept).
        archive.record_llm_exchange(
            LLMCall(run_id=run.key, agent_id=child.key, purpose="agent", model="scripted-model", request_hash="h-old"),
            LLMResponse(request_hash="h-old", model="scripted-model", text="old reply"),
        )
        invalid = archive.add_agent(
            run.key,
            parent_id=child.key,
            operator=f"op {IMG}",
            model=f"model {SCRIPT}",
            iteration=2,
            status=AgentStatus.invalid,
            invalid_reason=f"reason {PAYLOAD}",
        )
        return {"seed": seed.key, "child": child.key, "invalid": invalid.key}


def write_big_run(runs_dir: Path, name: str = "big") -> dict[str, int]:
    """1,200 agents: a seed with 300 children (a wide clade) and one of them heading an 800-deep chain."""
    with Archive.at(runs_dir / name / "archive.db") as archive:
        run = archive.create_run(name=name, benchmark="circle_packing", seed=0, config_json=json.dumps(CONFIG))
        seed = archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        _evaluate(archive, seed.key, 0.0)
        wide = []
        for k in range(300):
            child = archive.add_agent(
                run.key,
                files={"main.py": f"x = {k + 1}\n"},
                entry="main.py",
                parent_id=seed.key,
                operator="diff",
                model="m1",
                iteration=k + 1,
            )
            _evaluate(archive, child.key, k / 1000)
            wide.append(child.key)
        parent = wide[0]
        for k in range(899):
            child = archive.add_agent(
                run.key,
                files={"main.py": f"y = {k}\n"},
                entry="main.py",
                parent_id=parent,
                operator="rewrite",
                model="m2",
                iteration=301 + k,
            )
            _evaluate(archive, child.key, 1.0 + k / 1000)
            parent = child.key
        return {"seed": seed.key, "wide_head": wide[0], "deepest": parent}


def write_broken_runs(runs_dir: Path) -> None:
    """Folders whose archive.db is garbage, another program's database, or an archive from another schema."""
    (runs_dir / "corrupt").mkdir()
    (runs_dir / "corrupt" / "archive.db").write_bytes(b"SQLite format 3\x00" + b"\xde\xad\xbe\xef" * 1000)
    (runs_dir / "foreign").mkdir()
    with sqlite3.connect(runs_dir / "foreign" / "archive.db") as connection:
        connection.execute("CREATE TABLE recipes (name TEXT)")
    for name, version in (("outdated", 1), ("too-new", 999)):
        with Archive.at(runs_dir / name / "archive.db") as archive:
            archive.create_run(name=name, benchmark="circle_packing", seed=0, config_json="{}")
        with sqlite3.connect(runs_dir / name / "archive.db") as connection:
            connection.execute("UPDATE schemaversion SET version = ?", (version,))
            connection.execute("UPDATE alembic_version SET version_num = ?", (f"{version:04d}",))
        connection.close()


@pytest.fixture(scope="session")
def runs_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, int], dict[str, int]]:
    """(runs folder, ids of the hostile run "xss", ids of the run "big"); also HOSTILE_RUN and broken folders."""
    folder = tmp_path_factory.mktemp("ui-runs")
    hostile = write_hostile_run(folder, "xss")
    write_hostile_run(folder, HOSTILE_RUN)
    big = write_big_run(folder)
    write_broken_runs(folder)
    return folder, hostile, big


@pytest.fixture(scope="session")
def real_run(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """(runs folder, run name) of a real 4-iteration circle_packing search by SmolLM2-135M in the local sandbox."""
    folder = tmp_path_factory.mktemp("ui-real")
    command = [
        sys.executable,
        "-m",
        "cambrian",
        "run",
        "circle_packing",
        "--model",
        "smollm2-135m",
        "--sandbox",
        "local",
        "--iterations",
        "4",
        "--name",
        "ui-run",
        "--runs-dir",
        str(folder),
        *SHORT_REPLIES,
    ]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=1800, env={**os.environ})
    assert done.returncode == 0, f"the real run failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    yield folder, "ui-run"
