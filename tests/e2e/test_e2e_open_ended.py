"""End to end through the CLI: open-ended strategies with the FM-free baseline, and self-modification, where
the parent HumanEval agent writes its own child in Docker through the gateway, with the real SmolLM2."""

from __future__ import annotations

from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.store import Archive
from tests.conftest import skip_without_docker
from tests.e2e.test_e2e_search import cambrian

pytestmark = pytest.mark.slow


def test_map_elites_with_the_baseline_operator_then_status_shows_the_arms(tmp_path: Path, smollm2_path: Path) -> None:
    runs = tmp_path / "runs"
    out = cambrian(
        "run",
        "deceptive",
        "--name",
        "trap",
        "--iterations",
        "12",
        "--strategy",
        "map_elites",
        "--model",
        "smollm2-135m",
        "--sandbox",
        "local",
        "--seed",
        "3",
        "--set",
        "search.operators={ast_mutate = 1.0}",
        "--set",
        "search.bandit.algorithm=ucb1",
        runs_dir=runs,
    )
    assert "run trap finished" in out.stdout, out.stdout + out.stderr
    status = cambrian("status", "trap", runs_dir=runs).stdout
    assert "strategy map_elites" in status
    assert "bandit: ucb1" in status and "ast_mutate" in status
    with Archive.at(runs / "trap" / "archive.db") as archive:
        run = archive.get_run("trap")
        assert run.status == RunStatus.finished and archive.iterations_done(int(run.id)) == 12
        evaluated = [a for a in archive.agents(int(run.id)) if a.status == AgentStatus.evaluated]
        assert all(set(archive.descriptors(int(run.id))[int(a.id)]) >= {"ones_block_0", "code_size"} for a in evaluated)


def test_self_modify_the_parent_agent_writes_its_child_in_docker(tmp_path: Path, smollm2_path: Path) -> None:
    skip_without_docker()
    runs = tmp_path / "runs"
    out = cambrian(
        "run",
        "humaneval",
        "--name",
        "dgm",
        "--iterations",
        "1",
        "--model",
        "smollm2-135m",
        "--sandbox",
        "docker",
        "--seed",
        "4",
        "--fm-concurrency",
        "1",
        "--eval-concurrency",
        "1",
        "--set",
        "fm.max_tokens=300",
        "--set",
        "search.operators={self_modify = 1.0}",
        "--set",
        "evaluation.timeout_s=600",
        "--set",
        "benchmark_options.stage_sizes=[2]",
        "--set",
        "benchmark_options.thresholds=[0.5]",
        runs_dir=runs,
        timeout=1200,
    )
    assert "run dgm finished" in out.stdout, out.stdout + out.stderr
    with Archive.at(runs / "dgm" / "archive.db") as archive:
        run_id = int(archive.get_run("dgm").id)
        children = [a for a in archive.agents(run_id) if a.iteration > 0]
        assert {a.iteration for a in children} == {1}
        assert all(a.operator == "self_modify" and a.parent_id == 1 for a in children)
        # The parent's own FM calls while writing each child are in the ledger, linked to that child.
        calls = [c for c in archive.llm_calls(run_id) if c.purpose == "self_modify"]
        assert calls and {c.agent_id for c in calls} <= {a.id for a in children}
        assert all(c.agent_id is not None for c in calls)
        for child in children:
            # SmolLM2 rarely writes a working agent: whatever came of it, the reason is public and stored.
            assert child.status in (AgentStatus.evaluated, AgentStatus.invalid)
            if child.status == AgentStatus.invalid:
                assert child.invalid_reason
            mine = [c for c in calls if c.agent_id == child.id]
            assert child.prompt_tokens == sum(c.prompt_tokens for c in mine)
