"""Evaluation on a real local Ray cluster: a head and a second node, each a `ray start` process of its own.

Tasks spread over both nodes (each node's own local sandbox pool), staged evaluation stops early, agents
reach the FM through each node's relay under the driver's budget, a node killed mid-run costs only its
in-flight task runs, a parent writing its child runs on a node (the driver has no sandbox), a second
Ctrl-C kills the nodes' runs, and bad clusters or nodes are refused with the cause and the fix. A node keeps one
sandbox session per agent and slot (on Docker: one container, never serving two agents) and closes them
when the agent's evaluation ends. The meta-agent's
and the agents' FM are scripted (`ScriptedFM`): the children's code and the replies must be exact.
Marked slow (a cluster takes ~20 s to start on 2 cores); skipped only where ray is not importable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'ray[default]'); the Ray executor needs it")

from cambrian.archive.models import AgentStatus, RunStatus
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.evaluators.runner import Limits
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.llm import Endpoint, LLMClient, MemoryLedger
from cambrian.meta_agent.llm.gateway import FMGateway
from cambrian.meta_agent.search import loop_from_config
from cambrian.meta_agent.search._executor import make_executor
from cambrian.meta_agent.search._ray_executor import RayExecutor
from cambrian.meta_agent.search.evaluation import AgentFMBudget, EvaluationContext
from cambrian.meta_agent.testing import ScriptedFM, SleepBenchmark
from cambrian.sandbox.base import SandboxError
from cambrian.sandbox.local import LocalSandbox
from tests.conftest import skip_without_docker
from tests.meta_agent.search.test_loop_fake_fm import fenced
from tests.ray_cluster import LocalRayCluster

AGENT = """import sys
import time

time.sleep(float(sys.argv[2]))
print("score {score}")
"""
FAILS_T1 = """import sys

print("score 0.0" if sys.argv[1] == "t1" else "score 1.0")
"""
SAYS_HOST = """import re
import sys
import time

# The container's id, from the engine's bind mounts (its hostname is "sandbox" in every container).
found = re.findall(r"/containers/([0-9a-f]{64})/", open("/proc/self/mountinfo").read())
time.sleep(float(sys.argv[2]))
print("host", found[0][:12] if found else "unknown")
print("score 1.0")
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRayCluster]:
    with LocalRayCluster(tmp_path_factory.mktemp("ray"), cpus=2) as running:
        running.start_head("head")
        running.add_node("second")
        yield running


def ray_config(cluster: LocalRayCluster, tmp_path: Path, **sections: Any) -> RunConfig:
    # One evaluation per agent: the tests count the task runs each node made.
    evaluation = {"executor": "ray", "ray_address": cluster.address, "sandbox": "local", "concurrency": 2, "repeats": 1}
    return RunConfig.model_validate(
        {
            "name": "ray",
            "runs_dir": str(tmp_path),
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}},
            "fm": {"concurrency": 1, "repair_rounds": 0, "redraws": 0},
            **sections,
            "evaluation": {**evaluation, **sections.get("evaluation", {})},
        }
    )


# Asks the FM twice per task; scores the share answered.
ASKS_TWICE_AGENT = """import sys
from _cambrian_llm import LLMBudgetExceeded, llm

answered = 0
for _ in range(2):
    try:
        print("fm said:", llm("hello from " + sys.argv[1], max_tokens=8))
        answered += 1
    except LLMBudgetExceeded:
        pass
print(f"score {answered / 2}")
"""


def connect(config: RunConfig) -> RayExecutor:
    executor = make_executor(config, None, warn=lambda message: None)  # the nodes' sandboxes; none here
    assert isinstance(executor, RayExecutor)
    return executor


def evaluate(executor: RayExecutor, benchmark: SleepBenchmark, genome: Genome, **options):
    async def run():
        try:
            context = EvaluationContext(
                benchmark, Limits(), options.pop("fm_budget", AgentFMBudget(0, 0, 0)), options.pop("gateway", None)
            )
            return await executor.evaluate(
                context, genome, agent_id=options.pop("agent_id", 1), iteration=1, split="search"
            )
        finally:
            await executor.finish()

    return asyncio.run(run())


def sleeper(score: float) -> Genome:
    return Genome(files={"agent.py": AGENT.format(score=score)}, entry="agent.py")


def evaluate_at_once(executor: RayExecutor, benchmark: SleepBenchmark, genomes: dict[int, Genome]) -> dict:
    """Evaluate several agents at once (agent id -> genome); their results by agent id."""

    async def run():
        try:
            results = await asyncio.gather(
                *(
                    executor.evaluate(
                        EvaluationContext(benchmark, Limits(), AgentFMBudget(0, 0, 0)),
                        genome,
                        agent_id=agent_id,
                        iteration=1,
                        split="search",
                    )
                    for agent_id, genome in genomes.items()
                )
            )
            return dict(zip(genomes, results))
        finally:
            await executor.finish()

    return asyncio.run(run())


def node_sessions(executor: RayExecutor) -> tuple[int, list[dict[str, int]]]:
    """Sessions the nodes opened since they started, and those each keeps now (by evaluation key)."""
    import ray

    replies = ray.get([node.actor.sessions.remote() for node in executor.nodes])
    return sum(opened for opened, _ in replies), [kept for _, kept in replies]


@pytest.mark.slow
def test_a_search_runs_its_tasks_on_both_nodes_fake_fm(cluster: LocalRayCluster, tmp_path: Path) -> None:
    config = ray_config(cluster, tmp_path, budget={"iterations": 2})
    executor = connect(config)
    try:
        assert executor.slots == 4 and {node.sandbox for node in executor.nodes} == {"local"}
        archive = Archive.at(tmp_path / "archive.db")
        run = archive.create_run(name="ray", benchmark="sleep", seed=0, config_json=config.to_json())
        children = [fenced(AGENT.format(score=0.75)), fenced(AGENT.format(score=0.5))]
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=SleepBenchmark(tasks=4, seconds=0.2),
            sandbox=None,
            executor=executor,
            llm=ScriptedFM(children),
            model_label="scripted",
        )  # the driver needs no sandbox of its own: every agent runs on the nodes
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
def test_a_node_keeps_one_session_per_agent_and_slot_and_closes_them_when_the_evaluation_ends(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    executor = connect(ray_config(cluster, tmp_path))  # 2 nodes x 2 slots
    try:
        result = evaluate(executor, SleepBenchmark(tasks=8, seconds=0.1), sleeper(1.0))
        assert result.score == 1.0 and len(result.task_results) == 8
        opened, kept = node_sessions(executor)
        assert opened == 4 and kept == [{}, {}]  # 8 tasks in 4 sessions, one per slot, closed at the end
        # Two agents at once: each of their sessions serves one of them; none is left afterwards.
        results = evaluate_at_once(executor, SleepBenchmark(tasks=8, seconds=0.1), {1: sleeper(1.0), 2: sleeper(0.5)})
        assert [results[1].score, results[2].score] == [1.0, 0.5]
        more, kept = node_sessions(executor)
        assert 8 <= more - opened < 16 and kept == [{}, {}]
    finally:
        executor.close()


@pytest.mark.slow
def test_on_docker_an_agents_tasks_share_its_containers_and_no_container_serves_two_agents(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    skip_without_docker()
    import docker

    config = ray_config(cluster, tmp_path, evaluation={"sandbox": "docker"}, name=f"ray-{tmp_path.name}")
    executor = connect(config)  # 2 nodes x 2 slots, each node with a pool of 2 containers
    says_host = Genome(files={"agent.py": SAYS_HOST}, entry="agent.py")

    def hosts(result) -> list[str]:
        return [task.stdout_tail.split("host ", 1)[1].split()[0] for task in result.task_results]

    try:
        assert {node.sandbox for node in executor.nodes} == {"docker"}
        # Two stages: the second stage's tasks find the first stage's containers again (one per slot used).
        staged = SleepBenchmark(tasks=6, seconds=0.2, stage_sizes=(2,), thresholds=(0.0,))
        result = evaluate(executor, staged, says_host)
        assert result.stage_reached == 1 and result.score == 1.0
        first, second = hosts(result)[:2], hosts(result)[2:]
        assert "unknown" not in first + second
        assert len(set(first)) == 2 and set(first) <= set(second) and len(set(second)) == 4
        # Two agents at once, 8 tasks each on 4 slots: each gets containers of its own, reused for its tasks.
        results = evaluate_at_once(executor, SleepBenchmark(tasks=8, seconds=0.2), {1: says_host, 2: says_host})
        one, two = set(hosts(results[1])), set(hosts(results[2]))
        assert len(one) < 8 and len(two) < 8 and not one & two and not (one | two) & set(second)
        # The evaluations' containers are removed; what is left is the nodes' pools, refilled.
        client = docker.from_env()
        try:
            deadline = time.monotonic() + 60
            while True:
                labelled = client.containers.list(
                    all=True, sparse=True, filters={"label": f"cambrian.run={config.name}"}
                )
                names = {container.id[:12] for container in labelled}
                if not names & (one | two | set(second)) and len(labelled) <= 4:
                    break
                assert time.monotonic() < deadline, f"evaluation containers left: {names & (one | two)}"
                time.sleep(0.5)
        finally:
            client.close()
        assert node_sessions(executor)[1] == [{}, {}]
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
            executor,
            SleepBenchmark(tasks=4),
            Genome(files={"agent.py": ASKS_TWICE_AGENT}, entry="agent.py"),
            agent_id=5,
            gateway=gateway,
            fm_budget=AgentFMBudget(max_calls=1, max_tokens=10_000, run_seed=0),  # per task: 4 for the evaluation
        )
        # Four tasks on two nodes, each asking twice, one budget of four calls for the agent: four answered,
        # four refused, however the tasks share them.
        assert sum(t.stdout_tail.count("fm said: hi there") for t in result.task_results) == 4
        assert sum(t.score for t in result.task_results) == 2.0
        assert fm.calls == 4 and len(executor.tasks_by_node) == 2
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
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=SleepBenchmark(tasks=6, seconds=3.0),
            sandbox=LocalSandbox(),
            executor=executor,
            llm=ScriptedFM([fenced(AGENT.format(score=0.5))]),
            model_label="scripted",
        )

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


@pytest.mark.slow
def test_a_node_that_joins_mid_run_gets_a_pool_and_takes_tasks(cluster: LocalRayCluster, tmp_path: Path) -> None:
    executor = connect(ray_config(cluster, tmp_path))
    try:
        before = executor.slots
        executor.node_scan_s = 0.0  # every evaluation looks (15 s by default)
        cluster.add_node("late")
        late = cluster.node_id("late")
        # This evaluation's start finds the node; its pool starts in the background (finish() waits for it).
        evaluate(executor, SleepBenchmark(tasks=2, seconds=0.1), sleeper(0.5))
        assert executor.slots == before + 2 and late in {node.node_id for node in executor.nodes}
        result = evaluate(executor, SleepBenchmark(tasks=12, seconds=0.5), sleeper(0.5))
        assert result.valid and result.score == 0.5
        assert executor.tasks_by_node[late] > 0
        assert asyncio.run(executor.join_new_nodes()) == 0  # known nodes are not started twice
    finally:
        executor.close()
        cluster.kill_node("late")


WRITES_WITH_THE_FM = """def solve(task, llm):
    return "def solve(task, llm):\\n    return " + repr(llm("write your child", max_tokens=8)) + "\\n"
"""


@pytest.mark.slow
def test_a_parent_writing_its_child_runs_on_a_node_and_calls_the_fm_through_its_own_grant_fake_fm(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    """A self-modifying search on the cluster with no sandbox on the driver: the parent's run (and the
    child's evaluation) happen on the nodes. Then a parent that asks the FM: through a grant of its own,
    recorded as self_modify for its iteration, the grant closed after its run."""
    from cambrian.evaluators.humaneval import HumanEval
    from tests.meta_agent.search.test_open_ended_loop import SELF_WRITING_AGENT

    class SelfWritingHumanEval(HumanEval):
        def seed(self) -> Genome:
            return Genome(files={"agent.py": SELF_WRITING_AGENT}, entry="agent.py")

    config = ray_config(
        cluster,
        tmp_path,
        budget={"iterations": 1},
        search={"strategy": "greedy", "operators": {"self_modify": 1.0}},
        evaluation={"agent_fm": False},
    )
    executor = connect(config)
    benchmark = SelfWritingHumanEval(stage_sizes=[2], thresholds=[0.5])
    try:
        archive = Archive.at(tmp_path / "archive.db")
        run = archive.create_run(name="ray", benchmark="humaneval", seed=0, config_json=config.to_json())
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=benchmark,
            sandbox=None,
            executor=executor,
            llm=ScriptedFM(["the meta-agent's FM is unused"]),
            model_label="scripted",
        )
        outcome = asyncio.run(loop.run_until_done())
        assert outcome.status == RunStatus.finished
        child = next(a for a in archive.agents(int(run.id)) if a.iteration == 1)
        assert child.operator == "self_modify" and child.status == AgentStatus.evaluated, child.invalid_reason
        files, _ = archive.get_genome(str(child.genome_hash))
        assert "VERSION = 2" in files["agent.py"]
        # Two tasks for the seed, two for the child, one parent run: all on the nodes.
        assert sum(executor.tasks_by_node.values()) == 5
        assert node_sessions(executor)[1] == [{}, {}]  # nothing kept once every run ended

        fm = ScriptedFM(["VERSION = 3"])
        client = LLMClient(Endpoint(model="openai/scripted", label="scripted"), ledger=MemoryLedger(), max_tokens=8)
        client.complete = fm.complete  # type: ignore[method-assign,assignment]  # the scripted FM answers for the real client
        gateway = FMGateway(client, socket_dir=Path("/tmp"))
        parent = Genome(files={"agent.py": WRITES_WITH_THE_FM}, entry="agent.py")

        async def write_child():
            try:
                context = EvaluationContext(benchmark, Limits(), AgentFMBudget(2, 10_000, 0), gateway)
                task = benchmark.self_modify_task("improve yourself")
                return await executor.run_parent(context, parent, task, iteration=7, fm_seed=0)
            finally:
                await executor.finish()
                await gateway.close()

        written = asyncio.run(write_child())
        assert written.error is None and written.returned == "def solve(task, llm):\n    return 'VERSION = 3'\n"
        assert written.calls == 1 and fm.log == [("self_modify", 7)]
        assert not [c for c in gateway._channels.values() if not c.closed]  # its grant ended with its run
    finally:
        executor.close()


@pytest.mark.slow
def test_a_second_ctrl_c_kills_the_runs_on_the_nodes_as_infrastructure_faults(
    cluster: LocalRayCluster, tmp_path: Path
) -> None:
    """`kill_running` (the second Ctrl-C) closes every node's sandbox: the agent's four 60 s runs die now and
    its evaluation ends in SandboxError (an infrastructure fault: the agent stays queued for resume), not
    in a result a minute later."""
    executor = connect(ray_config(cluster, tmp_path))

    async def run_and_kill():
        evaluation = asyncio.ensure_future(
            executor.evaluate(
                EvaluationContext(
                    SleepBenchmark(tasks=4, seconds=60.0, timeout_s=120.0), Limits(), AgentFMBudget(0, 0, 0)
                ),
                sleeper(1.0),
                agent_id=1,
                iteration=1,
                split="search",
            )
        )
        try:
            deadline = time.monotonic() + 120
            while sum(executor.running_by_node.values()) < 4:
                assert time.monotonic() < deadline and not evaluation.done(), "the four runs never started"
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # the runs' processes are up on the nodes
            executor.kill_running()
            with pytest.raises(SandboxError) as killed:
                await evaluation
            return killed.value
        finally:
            await executor.finish()

    try:
        fault = asyncio.run(run_and_kill())
        assert "closed" in str(fault), fault
    finally:
        executor.close()
