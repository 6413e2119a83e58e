"""Children made and checked in worker processes (`EditPool`, `search.edit_processes`) are exactly the ones the
loop's own thread makes: the same genomes, repairs and refusals."""

from __future__ import annotations

import asyncio
import functools
import logging
import multiprocessing
import os
import sys
import types
from pathlib import Path

import pytest

from cambrian.archive.store import Archive
from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.edits import CheckedChild, EditError, EditPool, check_child, edit_processes
from cambrian.meta_agent.operators import ParentInfo, PromptContext, RewriteOperator
from cambrian.meta_agent.search import loop_from_config
from cambrian.meta_agent.testing import ScriptedFM
from cambrian.sandbox.local import LocalSandbox

PARENT = CirclePacking(start="grid").seed()
CODE = PARENT.files[PARENT.entry]


def fenced(code: str) -> str:
    return f"Here it is.\n```python\n{code}```\n"


def context() -> PromptContext:
    return PromptContext(contract="", benchmark="circle_packing", parent=ParentInfo(1, PARENT, 2.0, ""))


SMALLER = CODE.replace("radius = 0.5 / max(columns, rows)", "radius = 0.5 / max(columns, rows) * 0.999")
REPLIES = {
    "valid": fenced(SMALLER),
    "needs an import": fenced(SMALLER.replace("import math\n", "")),  # the check adds it back
    "not python": fenced(SMALLER.replace("return circles", "return circles(")),
    "no code": "I would rather not.",
}


def derive_in(pool: EditPool, reply: str) -> CheckedChild | str:
    make = functools.partial(RewriteOperator().child, context(), reply)
    try:
        return asyncio.run(pool.derive(make, PARENT))
    except EditError as exc:
        return f"{exc} | {exc.fix}"


@pytest.mark.parametrize("name", sorted(REPLIES))
def test_a_worker_process_makes_the_same_child_or_refusal_as_the_loop_thread(name: str) -> None:
    pool = EditPool(1, entry_function="pack_circles")
    try:
        assert derive_in(pool, REPLIES[name]) == derive_in(EditPool(0, entry_function="pack_circles"), REPLIES[name])
        assert pool._executor is not None  # it really went to a process
    finally:
        pool.close()


def test_work_that_does_not_pickle_runs_in_the_loop_thread_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    pool = EditPool(1, entry_function="pack_circles")
    child = Genome(files={PARENT.entry: CODE + "\nVARIANT = hash(2)\n"}, entry=PARENT.entry)
    caplog.set_level(logging.WARNING)
    try:
        for _ in range(2):
            checked = asyncio.run(pool.derive(lambda: child, PARENT))  # a lambda does not pickle
            assert checked == check_child(child, PARENT, entry_function="pack_circles")
        assert pool._executor is None
        assert len([r for r in caplog.records if "cannot be sent to an edit process" in r.message]) == 1
    finally:
        pool.close()


def _child_that_kills_its_worker() -> Genome:
    if multiprocessing.parent_process() is not None:  # in the edit process: die as an OOM kill would
        os._exit(9)
    return Genome(files={PARENT.entry: SMALLER}, entry=PARENT.entry)


def test_a_dead_worker_costs_nothing_the_rest_is_checked_in_the_loop_thread() -> None:
    pool = EditPool(1, entry_function="pack_circles")
    try:
        checked = asyncio.run(pool.derive(_child_that_kills_its_worker, PARENT))
        assert checked.genome.files[PARENT.entry] == SMALLER
        assert pool.processes == 0 and pool._executor is None  # no respawn at every reply
    finally:
        pool.close()


def test_work_a_worker_cannot_load_is_done_in_the_loop_thread(caplog: pytest.LogCaptureFixture) -> None:
    # A function of a module only this process has: it pickles here and cannot be unpickled there.
    phantom = types.ModuleType("cambrian_phantom_module")
    exec("def make(genome):\n    return genome\n", phantom.__dict__)
    sys.modules[phantom.__name__] = phantom
    child = Genome(files={PARENT.entry: SMALLER}, entry=PARENT.entry)
    pool = EditPool(1, entry_function="pack_circles")
    caplog.set_level(logging.WARNING)
    try:
        checked = asyncio.run(pool.derive(functools.partial(phantom.make, child), PARENT))
        assert checked.genome == child
        assert any("cannot be sent to an edit process" in r.message for r in caplog.records)
    finally:
        pool.close()
        del sys.modules[phantom.__name__]


def test_auto_leaves_two_cores_and_takes_at_most_four(monkeypatch: pytest.MonkeyPatch) -> None:
    for cores, expected in ((1, 0), (2, 0), (3, 1), (6, 4), (64, 4)):
        monkeypatch.setattr("os.cpu_count", lambda cores=cores: cores)
        assert edit_processes("auto") == expected
    assert edit_processes(3) == 3
    with pytest.raises(ValueError, match="processes >= 0"):
        RunConfig.model_validate({"search": {"edit_processes": -1}})


def run_search(tmp_path: Path, processes: int) -> list[tuple]:
    replies = [REPLIES["valid"], REPLIES["not python"], REPLIES["needs an import"], REPLIES["no code"]]
    config = RunConfig.model_validate(
        {
            "name": "t",
            "runs_dir": str(tmp_path),
            "budget": {"iterations": 4},
            "fm": {"concurrency": 1, "repair_rounds": 0, "redraws": 0},
            "evaluation": {"concurrency": 1},
            "search": {"strategy": "greedy", "operators": {"rewrite": 1.0}, "edit_processes": processes},
        }
    )
    with Archive.at(tmp_path / "archive.db") as archive:
        run = archive.create_run(name="t", benchmark="circle_packing", seed=0, config_json=config.to_json())
        loop = loop_from_config(
            archive=archive,
            run=run,
            config=config,
            benchmark=CirclePacking(start="grid"),
            sandbox=LocalSandbox(),
            llm=ScriptedFM(replies),
            model_label="scripted",
        )
        asyncio.run(loop.run_until_done())
        assert loop.proposer.edits._executor is None  # the run's end stopped the processes
        return [
            (a.iteration, a.status, a.genome_hash, a.invalid_reason, a.repair_note, a.score)
            for a in archive.agents(run.key)
        ]


def test_a_search_with_an_edit_process_stores_exactly_what_one_without_stores_fake_fm(tmp_path: Path) -> None:
    stored = run_search(tmp_path / "pool", 1)
    assert stored == run_search(tmp_path / "inline", 0)
    statuses = [status for iteration, status, *_ in stored if iteration > 0]
    assert statuses.count("evaluated") == 2 and statuses.count("invalid") == 2
    assert any(note and "added `import math`" in note for *_, note, _ in stored)
