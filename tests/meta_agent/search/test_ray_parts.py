"""The Ray executor's parts that need no cluster: the free slots' order (new slots serve waiting tasks, a slot
goes first to the evaluation whose session it keeps), a clear error when no cluster answers, and a
self-modifying search built with no sandbox on the driver (the parent runs where evaluations do)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install 'ray[default]'); the Ray executor needs it")

from cambrian.archive.store import Archive
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ClusterError
from cambrian.meta_agent.search import loop_from_config
from cambrian.meta_agent.search._ray_slots import FreeSlots, NodeHandle, Slot
from cambrian.meta_agent.testing import ScriptedFM
from cambrian.sandbox.local import LocalSandbox
from tests.meta_agent.search.test_ray_executor import connect
from tests.ray_cluster import free_port


def test_slots_added_while_tasks_wait_serve_them_in_turn() -> None:
    old, new = (NodeHandle(name, "127.0.0.1", "host", "local", actor=None) for name in ("old", "new"))

    async def run() -> None:
        free = FreeSlots([Slot(old, 0)])
        assert (await free.take("a")).node is old
        waiting = [asyncio.ensure_future(free.take(name)) for name in ("b", "c")]
        await asyncio.sleep(0)
        free.add(Slot(new, index) for index in range(3))
        assert [(await w).node for w in waiting] == [new, new] and len(free.all) == 4
        assert (await free.take("d")).node is new  # the third new slot was left free

    asyncio.run(run())


def test_a_free_slot_goes_first_to_the_evaluation_whose_session_it_keeps() -> None:
    nodes = [NodeHandle(f"node{i}", "127.0.0.1", "host", "local", actor=None) for i in range(2)]

    async def run() -> None:
        free = FreeSlots(Slot(node, 0) for node in nodes)
        first, second = await free.take("a"), await free.take("a")
        assert [first.node, second.node] == nodes and first.holder == second.holder == "a"  # nodes in turn
        b_waits = asyncio.ensure_future(free.take("b"))
        await asyncio.sleep(0)
        a_waits = asyncio.ensure_future(free.take("a"))
        await asyncio.sleep(0)
        free.give_back(first)  # b has waited longer, but the slot keeps a's session
        assert await a_waits is first and not b_waits.done()
        free.give_back(second)
        assert await b_waits is second and second.holder == "b"  # a's session there is closed for b's
        assert free.forget("a") == {nodes[0]} and first.holder is None
        free.give_back(second)
        free.give_back(first)
        # A new evaluation takes a slot that keeps no session before one that keeps b's.
        assert await free.take("c") is first and await free.take("b") is second

    asyncio.run(run())


def test_no_cluster_at_the_address_is_a_clear_error_at_once(tmp_path: Path) -> None:
    config = RunConfig.model_validate(
        {
            "name": "ray",
            "runs_dir": str(tmp_path),
            "evaluation": {"executor": "ray", "ray_address": f"127.0.0.1:{free_port()}"},
        }
    )
    with pytest.raises(ClusterError) as refused:
        connect(config)
    assert "no Ray cluster answers at 127.0.0.1:" in str(refused.value) and "ray start --head" in refused.value.fix


def test_the_driver_needs_a_sandbox_only_for_the_local_executor(tmp_path: Path) -> None:
    """Under Ray every agent runs on the nodes, a parent writing its child (self_modify) included: a
    self-modifying search is built with no sandbox on the driver; the local executor needs this machine's."""
    from cambrian.evaluators.humaneval import HumanEval
    from cambrian.meta_agent.search._executor import LocalExecutor

    def config(executor: str, operators: dict[str, float]) -> RunConfig:
        return RunConfig.model_validate(
            {
                "name": "r",
                "runs_dir": str(tmp_path),
                "benchmark": "humaneval",
                "search": {"operators": operators},
                "evaluation": {"executor": executor},
            }
        )

    archive = Archive.at(tmp_path / "archive.db")
    self_modifying = config("ray", {"self_modify": 1.0})
    run = archive.create_run(name="r", benchmark="humaneval", seed=0, config_json=self_modifying.to_json())
    loop = loop_from_config(
        archive=archive,
        run=run,
        config=self_modifying,
        benchmark=HumanEval(),
        sandbox=None,
        executor=LocalExecutor(LocalSandbox(), slots=1),
        llm=ScriptedFM([]),
        model_label="scripted",
    )
    assert loop.proposer.executor is loop.executor  # where the parent runs: with the evaluations
    with pytest.raises(ValueError, match="give a sandbox"):
        loop_from_config(
            archive=archive,
            run=run,
            config=config("local", {"diff": 1.0}),
            benchmark=HumanEval(),
            sandbox=None,
            llm=ScriptedFM([]),
            model_label="scripted",
        )
