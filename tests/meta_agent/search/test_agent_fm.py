"""Agents under evaluation call the real local FM through the gateway, in each sandbox backend.

The meta-agent's own replies are scripted (a fake FM: the child's code must be exact); the agent's
calls go through the gateway to the real SmolLM2 server and are recorded with the agent's id.
"""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from pathlib import Path

import pytest

from cambrian.archive.models import AgentStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.llm import ArchiveLedger, Endpoint, LLMClient, MemoryLedger
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.search import SearchLoop, loop_from_config
from cambrian.meta_agent.testing import ASKS_FM_AGENT, ScriptedFM, SleepBenchmark
from cambrian.sandbox.local import LocalSandbox
from tests.conftest import skip_without_docker
from tests.meta_agent.search.test_loop_fake_fm import fenced

CALLS_FM = """import math
from _cambrian_llm import LLMBudgetExceeded, llm


def pack_circles(n):
    reply = llm("Say hi", max_tokens=8)
    try:
        llm("Again", max_tokens=8)
        llm("And again", max_tokens=8)
    except LLMBudgetExceeded:
        pass
    columns = math.ceil(math.sqrt(n))
    radius = 0.5 / columns
    print("fm said:", reply)
    return [((2 * (i % columns) + 1) * radius, (2 * (i // columns) + 1) * radius, radius) for i in range(n)]
"""


def run_closing_gateway(loop: SearchLoop) -> None:
    """Run the loop to its end, then close the gateway it served agents through."""

    async def run() -> None:
        try:
            await loop.run_until_done()
        finally:
            assert loop.gateway is not None
            await loop.gateway.close()

    asyncio.run(run())


def _sandbox(kind: str, fm_dir: Path):
    if kind == "local":
        return LocalSandbox()
    skip_without_docker()
    from cambrian.sandbox.docker import DockerSandbox

    return DockerSandbox(pool_size=1, run_label="test-agent-fm", fm_dir_root=fm_dir)


@pytest.mark.parametrize("kind", ["local", "docker"])
def test_agent_calls_reach_the_fm_through_the_gateway_and_are_recorded(kind: str, tmp_path: Path, local_fm) -> None:
    fm_dir = Path(tempfile.mkdtemp(prefix="cfm-", dir="/tmp"))
    sandbox = _sandbox(kind, fm_dir)
    cfg = RunConfig.model_validate(
        {
            "name": "t",
            "runs_dir": str(tmp_path),
            "budget": {"iterations": 1},
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}},
            "evaluation": {"timeout_s": 120, "agent_fm_calls": 2},
        }
    )
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="t", benchmark="circle_packing", seed=0, config_json=cfg.to_json())
    agent_llm = LLMClient(local_fm.endpoint(), ledger=ArchiveLedger(archive, int(run.id)), max_tokens=8)
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=cfg,
        benchmark=CirclePacking(start="grid"),
        sandbox=sandbox,
        llm=ScriptedFM([fenced(CALLS_FM)]),
        model_label="scripted",
        gateway=FMGateway(agent_llm, socket_dir=fm_dir),
    )

    try:
        run_closing_gateway(loop)
    finally:
        sandbox.close()
        shutil.rmtree(fm_dir, ignore_errors=True)
    child = archive.agents(int(run.id))[-1]
    assert child.status == AgentStatus.evaluated, child.invalid_reason
    evaluation = archive.evaluations(int(child.id))[0]
    assert "fm said:" in evaluation.stdout_tail
    calls = [c for c in archive.llm_calls(int(run.id)) if c.purpose == "agent"]
    answered = [c for c in calls if c.error is None]
    refused = [c for c in calls if c.error and c.error.startswith("budget_exceeded")]
    assert len(answered) == 2 and len(refused) == 1
    assert all(c.agent_id == child.id for c in calls)
    assert all(c.completion_tokens > 0 for c in answered)


class _AgentCallsPerTask(SleepBenchmark):
    """Four tasks whose seed agent asks the FM once per task (score 1.0 answered, 0.5 refused)."""

    def seed(self) -> Genome:
        return Genome(files={"agent.py": ASKS_FM_AGENT}, entry="agent.py")


def test_the_agent_budget_is_per_task_so_every_task_may_call_the_fm_fake_fm(tmp_path: Path) -> None:
    # One call per task allowed: an evaluation of four tasks gets four (it got one for all four before, so a
    # HumanEval agent calling once per problem was refused from its 21st problem on).
    fm_dir = Path(tempfile.mkdtemp(prefix="cfm-", dir="/tmp"))
    config = RunConfig.model_validate(
        {
            "name": "t",
            "runs_dir": str(tmp_path),
            "budget": {"iterations": 1},
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}},
            "fm": {"repair_rounds": 0, "redraws": 0},
            "evaluation": {"agent_fm_calls": 1, "agent_fm_tokens": 10_000, "repeats": 1},
        }
    )
    archive = Archive.at(tmp_path / "archive.db")
    run = archive.create_run(name="t", benchmark="sleep", seed=0, config_json=config.to_json())
    agents_fm = ScriptedFM(["hi"])
    client = LLMClient(Endpoint(model="openai/scripted", label="scripted"), ledger=MemoryLedger(), max_tokens=8)
    client.complete = agents_fm.complete  # type: ignore[method-assign,assignment]  # the scripted FM answers
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=config,
        benchmark=_AgentCallsPerTask(tasks=4, seconds=0.0),
        sandbox=LocalSandbox(),
        llm=ScriptedFM(["no code"]),
        model_label="scripted",
        gateway=FMGateway(client, socket_dir=fm_dir),
    )

    try:
        run_closing_gateway(loop)
    finally:
        shutil.rmtree(fm_dir, ignore_errors=True)
    seed = archive.seeds(int(run.id))[0]
    assert seed.score == 1.0 and agents_fm.calls == 4
    assert all("fm said: hi" in e.stdout_tail for e in archive.evaluations(int(seed.id)))
