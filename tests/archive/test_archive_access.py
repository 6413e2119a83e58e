"""Who opens an archive, and how: a second archive on the same file sees committed rows, threads and a second
archive write one file safely, a closed archive reopens, a read-only open reads everything and writes nothing,
and a reader waits for a file's creator. On SQLite and PostgreSQL (`store_url`), as tests/archive/test_archive_store.py.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from sqlalchemy import inspect as sa_inspect
from sqlalchemy.exc import InternalError, OperationalError

from cambrian.archive.errors import ArchiveNotFound, ArchiveReadOnly, NotAnArchive
from cambrian.archive.models import AgentStatus, LLMCall, LLMResponse, Run, RunStatus
from cambrian.archive.schema import SCHEMA_VERSION
from cambrian.archive.store import Archive
from tests.archive.helpers import SEED_FILES, evaluate, files_with, where


def test_a_second_archive_on_the_same_file_sees_committed_rows(archive: Archive, run: Run, url: str) -> None:
    seed = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    with Archive(url) as other:
        assert other.get_agent(seed.id).genome_hash == seed.genome_hash
        evaluate(other, seed.id, 0.3)
    assert archive.get_agent(seed.id).score == 0.3
    # A real second process writes; this one reads what it committed.
    script = textwrap.dedent(
        f"""
        from cambrian.archive.store import Archive
        with Archive({url!r}) as store:
            child = store.add_agent({run.id}, files={{"main.py": "x = 2\\n"}}, entry="main.py",
                                    parent_id={seed.id}, iteration=1, operator="diff")
            store.mark_evaluating(child.id)
            print(child.id)
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=True)
    child = archive.get_agent(int(done.stdout.strip()))
    assert (child.parent_id, child.status, child.eval_attempts) == (seed.id, AgentStatus.evaluating, 1)
    assert [a.id for a in archive.pending(run.id, max_attempts=3)] == [child.id]


def test_threads_and_a_second_archive_write_one_file_safely(archive: Archive, run: Run, url: str) -> None:
    seed = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")

    def grow(store: Archive, start: int) -> list[int]:
        ids = []
        for value in range(start, start + 15):
            child = store.add_agent(run.id, files=files_with(value), entry="main.py", parent_id=seed.id, iteration=1)
            evaluate(store, child.id, value / 100)
            ids.append(child.id)
        return ids

    with Archive(url) as other, ThreadPoolExecutor(max_workers=4) as pool:
        stores = [archive, archive, archive, other]
        futures = [pool.submit(grow, store, 100 * (n + 1)) for n, store in enumerate(stores)]
        grown = [agent_id for future in futures for agent_id in future.result()]
    assert len(set(grown)) == 60
    evaluated = archive.agents(run.id, status=AgentStatus.evaluated)
    assert sorted(a.id for a in evaluated) == sorted(grown)
    assert all(len(archive.evaluations(agent_id)) == 1 for agent_id in grown)


def test_a_closed_archive_reopens_its_connection(archive: Archive, run: Run) -> None:
    agent = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    archive.close()
    assert archive.get_agent(agent.id).status is AgentStatus.proposed
    assert archive.mark_evaluating(agent.id).eval_attempts == 1


def _stored_bytes(archive: Archive) -> tuple[bytes, ...]:
    """SQLite: the file and its WAL as bytes; PostgreSQL: every row of every table, as text."""
    if archive.engine.dialect.name == "sqlite":
        db_path = Path(archive.engine.url.database or "")
        return tuple(p.read_bytes() for p in (db_path, db_path.with_name(db_path.name + "-wal")) if p.exists())
    with archive.engine.connect() as connection:
        tables = sorted(sa_inspect(connection).get_table_names())
        return tuple(
            repr(sorted(map(tuple, connection.exec_driver_sql(f"SELECT * FROM {t}")))).encode() for t in tables
        )


def test_a_read_only_archive_reads_everything_and_refuses_every_write(archive: Archive, run: Run, url: str) -> None:
    seed = archive.add_agent(run.id, files=SEED_FILES, entry="main.py")
    evaluate(archive, seed.id, 0.4)
    archive.record_llm_call(LLMCall(run_id=run.id, agent_id=seed.id, model="m", request_hash="r1", cost_usd=0.5))
    before = _stored_bytes(archive)
    with Archive(url, readonly=True) as reader:
        assert reader.readonly and not archive.readonly
        assert reader.get_run("demo").id == run.id
        assert reader.get_agent(seed.id).score == 0.4
        assert reader.get_genome(str(seed.genome_hash)) == (SEED_FILES, "main.py")
        assert [e.task_id for e in reader.evaluations(seed.id)] == ["t0"]
        assert reader.view(run.id).ids.tolist() == [seed.id]
        assert reader.cost_summary(run.id).cost_usd == 0.5
        response = LLMResponse(request_hash="r9", model="m", text="t")
        writes = {
            "create_run": lambda: reader.create_run(name="x", benchmark="b", seed=0, config_json="{}"),
            "set_run_status": lambda: reader.set_run_status(run.id, RunStatus.stopped),
            "update_run_config": lambda: reader.update_run_config(run.id, "{}"),
            "put_genome": lambda: reader.put_genome({"a.py": "x = 1\n"}, "a.py"),
            "add_agent": lambda: reader.add_agent(run.id, files=files_with(5), entry="main.py"),
            "mark_evaluating": lambda: reader.mark_evaluating(seed.id),
            "finish_evaluation": lambda: reader.finish_evaluation(seed.id, status=AgentStatus.invalid),
            "mark_failed": lambda: reader.mark_failed(seed.id, "x"),
            "set_holdout_score": lambda: reader.set_holdout_score(seed.id, 0.1),
            "record_llm_call": lambda: reader.record_llm_call(LLMCall(run_id=run.id, model="m", request_hash="r2")),
            "record_llm_exchange": lambda: reader.record_llm_exchange(
                LLMCall(run_id=run.id, model="m", request_hash="r9"), response
            ),
            "store_response": lambda: reader.store_response(response),
            "link_llm_calls": lambda: reader.link_llm_calls(run.id, proposal_id="p", agent_id=seed.id),
        }
        for name, write in writes.items():
            with pytest.raises(ArchiveReadOnly) as refused:
                write()
            assert "read-only" in str(refused.value) and where(url) in str(refused.value), name
            assert "readonly=True" in refused.value.fix, name
        # Past the API, the database itself refuses: SQLite opened the file with mode=ro, PostgreSQL's
        # sessions are read-only transactions.
        refusal = "readonly database" if reader.engine.dialect.name == "sqlite" else "read-only transaction"
        with pytest.raises((OperationalError, InternalError), match=refusal), reader.engine.begin() as connection:
            connection.exec_driver_sql("DELETE FROM llmcall")
        assert reader.get_agent(seed.id).status is AgentStatus.evaluated
    assert _stored_bytes(archive) == before
    assert archive.get_agent(seed.id).status is AgentStatus.evaluated and len(archive.llm_calls(run.id)) == 1


def test_a_read_only_open_of_a_missing_file_names_it_and_creates_nothing(tmp_path: Path) -> None:
    missing = tmp_path / "runs" / "nowhere" / "archive.db"
    for url in (None, f"sqlite:///{missing}"):
        with pytest.raises(ArchiveNotFound) as caught:
            Archive.at(missing, readonly=True) if url is None else Archive(url, readonly=True)
        assert str(missing) in str(caught.value) and "cambrian runs" in caught.value.fix
    assert not (tmp_path / "runs").exists()
    with pytest.raises(NotAnArchive, match="in-memory"):
        Archive("sqlite://", readonly=True)


def test_a_reader_of_an_empty_file_waits_for_its_creator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "archive.db"
    path.touch()  # what a creating process has made before its schema transaction commits
    creator = threading.Timer(0.3, lambda: Archive.at(path).close())
    creator.start()
    with Archive.at(path, readonly=True) as reader:
        assert reader.schema.found == SCHEMA_VERSION and reader.list_runs() == []
    creator.join()
    abandoned = tmp_path / "empty.db"
    abandoned.touch()
    monkeypatch.setattr("cambrian.archive._database.BUSY_TIMEOUT_S", 0.2)  # how long a reader waits for a creator
    with pytest.raises(NotAnArchive, match="empty") as caught:
        Archive.at(abandoned, readonly=True)
    assert "creates an archive" in caught.value.fix and abandoned.stat().st_size == 0
