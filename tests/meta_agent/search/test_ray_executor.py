"""Evaluation on a real local Ray cluster: a head and a second node, each a `ray start` process of its own.

Tasks spread over both nodes (each node's own local sandbox pool), staged evaluation stops early, agents
reach the FM through each node's relay under the driver's budget, a node killed mid-run costs only its
in-flight task runs, and bad clusters or nodes are refused with the cause and the fix. The meta-agent's
and the agents' FM are scripted (`ScriptedFM`): the children's code and the replies must be exact.
Marked slow (a cluster takes ~20 s to start on 2 cores); skipped only where ray is not importable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'ray[default]'); the Ray executor needs it")

from archive.models import AgentStatus, RunStatus
from archive.store import Archive
from evaluators.base import Genome
from evaluators.runner import Limits
from meta_agent.config import RunConfig
from meta_agent.errors import ClusterError
from meta_agent.llm import Endpoint, FMGateway, LLMClient, MemoryLedger
from meta_agent.search import AgentFMBudget, SearchLoop
from meta_agent.search._executor import make_executor
from meta_agent.search._ray_executor import RayExecutor
from meta_agent.testing import ScriptedFM, SleepBenchmark
from sandbox.base import SandboxError
from sandbox.local import LocalSandbox
from tests.meta_agent.search.test_loop_fake_fm import fenced
from tests.ray_cluster import LocalRayCluster, free_port

AGENT = """import sys
import time

time.sleep(float(sys.argv[2]))
print("score {score}")
"""
FAILS_T1 = """import sys

print("score 0.0" if sys.argv[1] == "t1" else "score 1.0")
"""
CALLS_FM = """import sys
from _cambrian_llm import LLMBudgetExceeded, llm

try:
    print("fm said:", llm("hello from " + sys.argv[1], max_tokens=8))
    print("score 1.0")
except LLMBudgetExceeded:
    print("score 0.5")
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    with LocalRayCluster(tmp_path_factory.mktemp("ray"), cpus=2) as running:
        running.start_head("head")
        running.add_node("second")
        yield running


def ray_config(cluster: LocalRayCluster, tmp_path: Path, **sections: dict) -> RunConfig:
    evaluation = {"executor": "ray", "ray_address": cluster.address, "sandbox": "local", "concurrency": 2}
    return RunConfig.model_validate(
        {
            "name": "ray",
            "runs_dir": str(tmp_path),
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}},
            "fm": {"concurrency": 1, "repair_rounds": 0},
            **sections,
            "evaluation": {**evaluation, **sections.get("evaluation", {})},
        }
    )


def connect(config: RunConfig) -> RayExecutor:
    executor = make_executor(config, LocalSandbox(), warn=lambda message: None)
    assert isinstance(executor, RayExecutor)
    return executor


def evaluate(executor: RayExecutor, benchmark: SleepBenchmark, genome: Genome, **options):
    async def run():
        try:
            return await executor.evaluate(
                benchmark, genome, agent_id=options.pop("agent_id", 1), iteration=1, split="search",
                limits=Limits(), fm_budget=options.pop("fm_budget", AgentFMBudget(0, 0, 0)),
                gateway=options.pop("gateway", None),
            )  # fmt: skip
        finally:
            await executor.finish()

    return asyncio.run(run())


def sleeper(score: float) -> Genome:
    return Genome(files={"agent.py": AGENT.format(score=score)}, entry="agent.py")


@pytest.mark.slow
def test_a_search_runs_its_tasks_on_both_nodes_fake_fm(cluster: LocalRayCluster, tmp_path: Path) -> None:
    config = ray_config(cluster, tmp_path, budget={"iterations": 2})
    executor = connect(config)
    try:
        assert executor.slots == 4 and {node.sandbox for node in executor.nodes} == {"local"}
        archive = Archive.at(tmp_path / "archive.db")
        run = archive.create_run(name="ray", benchmark="sleep", seed=0, config_json=config.to_json())
        children = [fenced(AGENT.format(score=0.75)), fenced(AGENT.format(score=0.5))]
        loop = SearchLoop.from_config(
            archive=archive, run=run, config=config, benchmark=SleepBenchmark(tasks=4, seconds=0.2),
            sandbox=LocalSandbox(), executor=executor, llm=ScriptedFM(children), model_label="scripted",
        )  # fmt: skip
        outcome = asyncio.run(loop.run_until_done())
        assert outcome.status == RunStatus.finished and outcome.infra_faults == 0
        agents = archive.agents(int(run.id))
        assert [a.status for a in agents] == [AgentStatus.evaluated] * 3
        assert sorted(a.score for a in agents) == [0.5, 0.75, 1.0]
        assert all(len(archive.evaluations(int(a.id))) == 4 for a in agents)
        ran_on = {node_id for node_id, count in executor.tasks_by_node.items() if count}
        assert ran_on == {cluster.node_id("head"), cluster.node_id("second")}
        assert sum(executor.tasks_by_node.values()) == 12
    finally:
        executor.close()


@pytest.mark.slow
def test_staged_evaluation_stops_early_on_the_cluster(cluster: LocalRayCluster, tmp_path: Path) -> None:
    executor = connect(ray_config(cluster, tmp_path))
    try:
        benchmark = SleepBenchmark(tasks=6, seconds=0.1, stage_sizes=(2,), thresholds=(1.0,))
        stopped = evaluate(executor, benchmark, Genome(files={"agent.py": FAILS_T1}, entry="agent.py"))
        assert stopped.stage_reached == 0 and [t.task_id for t in stopped.task_results] == ["t0", "t1"]
        assert stopped.score == pytest.approx(1 / 6) and stopped.ran_score == pytest.approx(0.5)
        # The first stage's two tasks ran at once, one on each node (free slots go to the nodes in turn).
        assert sorted(executor.tasks_by_node.values()) == [1, 1]
        passed = evaluate(executor, benchmark, sleeper(1.0))
        assert passed.stage_reached == 1 and len(passed.task_results) == 6 and passed.score == 1.0
    finally:
        executor.close()


@pytest.mark.slow
def test_agents_on_the_nodes_reach_the_fm_under_one_central_budget_fake_fm(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    executor = connect(ray_config(cluster, tmp_path))
    fm = ScriptedFM(["hi there"])
    client = LLMClient(Endpoint(model="openai/scripted", label="scripted"), ledger=MemoryLedger(), max_tokens=8)
    client.complete = fm.complete  # type: ignore[method-assign,assignment]  # the scripted FM answers for the real client
    gateway = FMGateway(client, socket_dir=Path("/tmp"))
    try:
        result = evaluate(
            executor, SleepBenchmark(tasks=4), Genome(files={"agent.py": CALLS_FM}, entry="agent.py"),
            agent_id=5, gateway=gateway, fm_budget=AgentFMBudget(max_calls=2, max_tokens=10_000, run_seed=0),
        )  # fmt: skip
        # Four tasks on two nodes, one budget of two calls for the agent: two answered, two refused.
        assert sorted(t.score for t in result.task_results) == [0.5, 0.5, 1.0, 1.0]
        assert sum("fm said: hi there" in t.stdout_tail for t in result.task_results) == 2
        assert fm.calls == 2 and len(executor.tasks_by_node) == 2
        assert gateway.channel(5) is None  # the evaluation's channel (and its token) ended with it
    finally:
        asyncio.run(gateway.close())
        executor.close()


@pytest.mark.slow
def test_a_node_killed_mid_run_costs_only_its_in_flight_tasks_fake_fm(cluster: LocalRayCluster, tmp_path: Path) -> None:
    cluster.add_node("victim")
    config = ray_config(cluster, tmp_path, budget={"iterations": 1})
    executor = connect(config)
    try:
        victim = cluster.node_id("victim")
        assert executor.slots == 6
        archive = Archive.at(tmp_path / "archive.db")
        run = archive.create_run(name="ray", benchmark="sleep", seed=0, config_json=config.to_json())
        loop = SearchLoop.from_config(
            archive=archive, run=run, config=config, benchmark=SleepBenchmark(tasks=6, seconds=3.0),
            sandbox=LocalSandbox(), executor=executor, llm=ScriptedFM([fenced(AGENT.format(score=0.5))]),
            model_label="scripted",
        )  # fmt: skip

        async def run_and_kill():
            search = asyncio.create_task(loop.run_until_done())
            deadline = time.monotonic() + 120
            while executor.running_by_node[victim] == 0:
                assert time.monotonic() < deadline and not search.done(), "no task ever ran on the victim node"
                await asyncio.sleep(0.1)
            await asyncio.to_thread(cluster.kill_node, "victim")
            return await search

        outcome = asyncio.run(run_and_kill())
        assert outcome.status == RunStatus.finished
        assert outcome.infra_faults >= 1  # counted as the infrastructure's, not any agent's
        agents = archive.agents(int(run.id))
        assert [a.status for a in agents] == [AgentStatus.evaluated] * 2
        assert [a.eval_attempts for a in agents] == [1, 1]  # no agent evaluation failed or was retried
        assert sorted(a.score for a in agents) == [0.5, 1.0]
        assert all(len(archive.evaluations(int(a.id))) == 6 for a in agents)
        assert not executor.nodes[[n.node_id for n in executor.nodes].index(victim)].alive
    finally:
        executor.close()


@pytest.mark.slow
def test_a_node_without_the_docker_sandbox_the_config_demands_is_refused_by_name(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    config = ray_config(cluster, tmp_path, evaluation={"sandbox": "docker", "image": "cambrian-test-missing:none"})
    with pytest.raises(SandboxError) as refused:
        connect(config)
    assert "Ray node" in str(refused.value) and "docker sandbox" in str(refused.value)
    assert "on that node" in refused.value.fix and "evaluation.sandbox = auto" in refused.value.fix


def test_no_cluster_at_the_address_is_a_clear_error_at_once(tmp_path: Path) -> None:
    config = RunConfig.model_validate(
        {"name": "ray", "runs_dir": str(tmp_path),
         "evaluation": {"executor": "ray", "ray_address": f"127.0.0.1:{free_port()}"}}
    )  # fmt: skip
    started = time.monotonic()
    with pytest.raises(ClusterError) as refused:
        connect(config)
    assert "no Ray cluster answers at 127.0.0.1:" in str(refused.value) and "ray start --head" in refused.value.fix
    assert time.monotonic() - started < 10
