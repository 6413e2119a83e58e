"""Processes sharing one SQLite archive file: a read-only reader beside a live writer, racing creators and upgraders.

Real processes (multiprocessing, spawn) on real files, released at the same instant for each
round (a spawned process takes seconds to import, so one set of processes plays every round).
Each worker returns the errors it saw instead of raising, so a failure shows both sides' view.
"""

from __future__ import annotations

import multiprocessing as mp
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from cambrian.archive.models import AgentStatus, Evaluation, LLMCall
from cambrian.archive.schema import SCHEMA_VERSION, UNVERSIONED
from cambrian.archive.store import Archive
from tests.archive.test_archive_schema import make_version_1_archive
from tests.archive.test_migrations import make_old_archive
from tests.postgres import PostgresServer

SPAWN = mp.get_context("spawn")


def _job(index: int, function: Callable[..., Any], rounds: list[tuple], barrier: Any, results: Any) -> None:
    returned = []
    for args in rounds:
        barrier.wait(timeout=180)  # the first wait also covers every process's start-up
        try:
            returned.append(function(*args))
        except BaseException:  # noqa: BLE001 - reported to the test, which fails on it
            returned.append({"crashed": traceback.format_exc()})
    results.put((index, returned))


def together(*jobs: tuple[Callable[..., Any], list[tuple]]) -> list[list[dict[str, Any]]]:
    """Run each (function, [args per round]) in its own process; each round starts in every process at once.

    Returns, per round, the return values of the processes in the order given.
    """
    n_rounds = {len(rounds) for _, rounds in jobs}
    assert len(n_rounds) == 1, "every process plays the same number of rounds"
    barrier, results = SPAWN.Barrier(len(jobs)), SPAWN.Queue()
    processes = [
        SPAWN.Process(target=_job, args=(index, function, rounds, barrier, results))
        for index, (function, rounds) in enumerate(jobs)
    ]
    for process in processes:
        process.start()
    try:
        returned = dict(results.get(timeout=600) for _ in processes)
    finally:
        for process in processes:
            process.join(timeout=60)
            if process.is_alive():
                process.kill()
    by_round = [[returned[index][round_] for index in range(len(jobs))] for round_ in range(n_rounds.pop())]
    for round_, results_ in enumerate(by_round):
        for index, result in enumerate(results_):
            assert "crashed" not in result, f"process {index} crashed in round {round_}:\n{result['crashed']}"
    return by_round


# ----- workers (module level: spawned processes import them) -----


#: Ceiling for a worker waiting on the other side (a busy machine is slow, never this slow).
CEILING_S = 600.0


def write_continuously(path: str, count: int) -> dict[str, Any]:
    """Create the archive, then store, evaluate and cost `count` agents, re-opening every 25; last, leave the
    file `path + ".done"` for the reader. Counted, not timed: a busy machine writes as many, only slower."""
    errors: list[str] = []
    archive = Archive.at(Path(path))
    created_at = time.time()
    created = bool(archive.schema.changes)
    run = archive.create_run(name="live", benchmark="b", seed=0, config_json="{}")
    seed = archive.add_agent(int(run.id), files={"main.py": "x = 0\n"}, entry="main.py")
    stored = 0
    while stored < count:
        stored += 1
        try:
            child = archive.add_agent(
                int(run.id),
                files={"main.py": f"x = {stored}\n"},
                entry="main.py",
                parent_id=int(seed.id),
                iteration=stored,
                operator="diff",
                repair_note="added `import math`" if stored % 2 else None,
            )
            archive.record_llm_call(
                LLMCall(run_id=run.id, agent_id=child.id, iteration=stored, model="m", request_hash=f"h{stored}")
            )
            archive.mark_evaluating(int(child.id))
            archive.finish_evaluation(
                int(child.id),
                status=AgentStatus.evaluated,
                score=stored / 1000,
                descriptor={"x": float(stored)},
                evaluations=[Evaluation(task_id="t0", score=0.5), Evaluation(task_id="t1", passed=True)],
            )
        except Exception:  # noqa: BLE001 - counted: the test demands none
            errors.append(traceback.format_exc(limit=4))
        if stored % 25 == 0:  # a fresh open beside the reader: its schema check, its WAL handling
            archive.close()
            archive = Archive.at(Path(path))
    archive.close()
    Path(path + ".done").touch()
    return {"created": created, "created_at": created_at, "stored": stored, "errors": errors}


def read_while_written(path: str, min_reads: int, period_s: float) -> dict[str, Any]:
    """Open read-only as soon as the file exists (it may be mid-creation), then every `period_s` seconds:
    re-open every other time and run the queries the CLI runs; until the writer is done and at least
    `min_reads` reads were made (under CEILING_S)."""
    target, done = Path(path), Path(path + ".done")
    errors: list[str] = []
    archive: Archive | None = None
    first_open_started: float | None = None
    opens = reads = most_agents = 0
    ceiling = time.monotonic() + CEILING_S
    turn = 0
    while time.monotonic() < ceiling and not (done.exists() and reads >= min_reads):
        if not target.exists():  # a reader never creates the file: wait for the writer to
            time.sleep(0.001)
            continue
        turn += 1
        try:
            if archive is None or turn % 2 == 0:
                if archive is not None:
                    archive.close()
                started = time.time()
                archive = Archive.at(target, readonly=True)
                first_open_started = first_open_started or started
                opens += 1
            runs = archive.list_runs()
            if runs:
                run_id = int(runs[0].id)
                agents = archive.agents(run_id)
                most_agents = max(most_agents, len(agents))
                archive.view(run_id)
                archive.cost_summary(run_id)
                best = archive.best(run_id, 1)
                if best:
                    archive.evaluations(int(best[0].id))
                    archive.ancestors(int(best[0].id))
                    archive.get_genome(str(best[0].genome_hash))
                reads += 1
        except Exception:  # noqa: BLE001 - counted: the test demands none
            errors.append(traceback.format_exc(limit=4))
        time.sleep(period_s)
    if archive is not None:
        archive.close()
    return {
        "errors": errors,
        "opens": opens,
        "reads": reads,
        "most_agents": most_agents,
        "first_open_started": first_open_started,
    }


def open_and_add_a_run(path: str, name: str) -> dict[str, Any]:
    with Archive(path) if "://" in path else Archive.at(Path(path)) as archive:
        run = archive.create_run(name=name, benchmark="b", seed=0, config_json="{}")
        archive.add_agent(int(run.id), files={"main.py": f"name = {name!r}\n"}, entry="main.py")
        return {"found": archive.schema.found, "changes": archive.schema.changes}


# ----- tests -----


def test_a_reader_polling_every_50ms_and_a_live_writer_see_zero_errors(tmp_path: Path) -> None:
    # Counted, not timed: the writer stores 120 agents, the reader reads at least 20 times while it does.
    path = tmp_path / "runs" / "live" / "archive.db"  # fresh: both start before the file exists
    [(writer, reader)] = together(
        (write_continuously, [(str(path), 120)]),
        (read_while_written, [(str(path), 20, 0.05)]),
    )
    assert writer["errors"] == [], "\n".join(writer["errors"][:3])
    assert reader["errors"] == [], "\n".join(reader["errors"][:3])
    assert writer["created"] and writer["stored"] == 120, writer
    assert reader["opens"] >= 10 and reader["reads"] >= 20, reader
    with Archive.at(path, readonly=True) as archive:
        agents = archive.agents(int(archive.get_run("live").id))
    assert len(agents) == writer["stored"] + 1
    assert 0 < reader["most_agents"] <= len(agents)
    assert sum(a.repair_note == "added `import math`" for a in agents) == (writer["stored"] + 1) // 2


def test_a_reader_opening_the_archive_while_the_writer_creates_it_waits_for_the_schema(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"trial{trial}" / "archive.db") for trial in range(5)]
    rounds = together(
        (write_continuously, [(path, 5) for path in paths]),
        (read_while_written, [(path, 1, 0.05) for path in paths]),
    )
    for writer, reader in rounds:
        assert writer["errors"] == [] and reader["errors"] == [], writer["errors"][:2] + reader["errors"][:2]
        assert reader["reads"] >= 1, reader
    # At least one round (usually every one) caught the writer inside its creating open.
    assert any(reader["first_open_started"] < writer["created_at"] for writer, reader in rounds), rounds


def test_processes_creating_the_same_new_archive_at_once_all_succeed(tmp_path: Path) -> None:
    paths = [tmp_path / f"trial{trial}" / "archive.db" for trial in range(4)]
    rounds = together(*[(open_and_add_a_run, [(str(path), f"run{n}") for path in paths]) for n in range(3)])
    for path, results in zip(paths, rounds):
        assert sum(bool(result["changes"]) for result in results) == 1, results
        assert sorted(result["found"] or 0 for result in results) == [0, SCHEMA_VERSION, SCHEMA_VERSION]
        with Archive.at(path, readonly=True) as archive:
            assert sorted(run.name for run in archive.list_runs()) == ["run0", "run1", "run2"]


def test_processes_upgrading_the_same_old_archive_at_once_all_succeed(tmp_path: Path) -> None:
    paths = [make_version_1_archive(tmp_path / f"trial{trial}" / "archive.db") for trial in range(3)]
    rounds = together(*[(open_and_add_a_run, [(str(path), f"run{n}") for path in paths]) for n in range(2)])
    for path, results in zip(paths, rounds):
        upgraded = [result for result in results if result["changes"]]
        assert len(upgraded) == 1 and upgraded[0]["found"] == UNVERSIONED, results
        assert "added column agent.repair_note" in upgraded[0]["changes"]
        with Archive.at(path, readonly=True) as archive:
            assert sorted(run.name for run in archive.list_runs()) == ["old", "run0", "run1"]
            assert len(archive.agents(int(archive.get_run("old").id))) == 2


def test_processes_creating_the_same_new_postgresql_archive_at_once_all_succeed(
    postgres_server: PostgresServer,
) -> None:
    urls = [postgres_server.create_database() for _ in range(3)]
    rounds = together(*[(open_and_add_a_run, [(url, f"run{n}") for url in urls]) for n in range(3)])
    for url, results in zip(urls, rounds):
        assert sum(bool(result["changes"]) for result in results) == 1, results
        assert sorted(result["found"] or 0 for result in results) == [0, SCHEMA_VERSION, SCHEMA_VERSION]
        with Archive(url, readonly=True) as archive:
            assert sorted(run.name for run in archive.list_runs()) == ["run0", "run1", "run2"]


def test_processes_upgrading_the_same_old_postgresql_archive_at_once_all_succeed(
    postgres_server: PostgresServer,
) -> None:
    urls = [postgres_server.create_database() for _ in range(2)]
    for url in urls:
        make_old_archive(url, UNVERSIONED, alembic=False)
    rounds = together(*[(open_and_add_a_run, [(url, f"run{n}") for url in urls]) for n in range(2)])
    for url, results in zip(urls, rounds):
        upgraded = [result for result in results if result["changes"]]
        assert len(upgraded) == 1 and upgraded[0]["found"] == UNVERSIONED, results
        with Archive(url, readonly=True) as archive:
            assert sorted(run.name for run in archive.list_runs()) == ["old", "run0", "run1"]
