"""End to end: agents that call the FM, on HumanEval, with the real SmolLM2 through Docker and the gateway."""

from __future__ import annotations

from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.store import Archive
from tests.conftest import SHORT_REPLIES, skip_without_docker
from tests.e2e.test_e2e_search import cambrian

# A real model search: on a busy machine (load 4-13) it ran past the 900 s default; what it checks is not time.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]


def test_humaneval_search_through_docker_records_every_agent_fm_call(tmp_path: Path, smollm2_path: Path) -> None:
    """Agents call their own model (evaluation.agent_model: the same weights under another name, a second
    server) while proposals come from fm.model; the ledger names the model of every call."""
    skip_without_docker()
    runs = tmp_path / "runs"
    agent_model = tmp_path / "agent-smollm2.gguf"
    agent_model.symlink_to(smollm2_path)
    out = cambrian(
        "run",
        "humaneval",
        "--name",
        "he",
        "--iterations",
        "3",
        "--model",
        "smollm2-135m",
        "--sandbox",
        "docker",
        "--seed",
        "2",
        "--fm-concurrency",
        "1",
        "--eval-concurrency",
        "2",
        *SHORT_REPLIES,
        "--set",
        f"evaluation.agent_model={agent_model}",
        "--set",
        "benchmark_options.stage_sizes=[5]",
        "--set",
        "benchmark_options.thresholds=[0.2]",
        runs_dir=runs,
    )
    assert "run he finished" in out.stdout, out.stdout + out.stderr
    assert "agents call agent-smollm2 (evaluation.agent_model)" in out.stdout + out.stderr
    with Archive.at(runs / "he" / "archive.db") as archive:
        run = archive.get_run("he")
        assert run.status == RunStatus.finished
        agents = archive.agents(int(run.id))
        assert archive.iterations_done(int(run.id)) == 3
        evaluated = [a for a in agents if a.status == AgentStatus.evaluated]
        assert evaluated and evaluated[0].operator == "seed"
        for agent in evaluated:
            rows = archive.evaluations(int(agent.id))
            assert rows and all(r.split == "search" for r in rows)
            # SmolLM2 passes (almost) nothing: a failing agent stops after the 5-task first stage.
            if agent.stage_reached == 0:
                assert len(rows) == 5
        calls = archive.llm_calls(int(run.id))
        agent_calls = [c for c in calls if c.purpose == "agent"]
        ids = {int(a.id) for a in agents}
        assert agent_calls, "the agents' own FM calls are in the ledger"
        assert all(c.agent_id in ids for c in agent_calls)
        assert {c.agent_id for c in agent_calls} >= {int(evaluated[0].id)}
        assert {c.model for c in agent_calls} == {"agent-smollm2"}
        assert {c.model for c in calls if c.purpose != "agent"} == {"smollm2-135m"}
