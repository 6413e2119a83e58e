"""A PostgreSQL server that goes away under a writing archive: the writer waits, reconnects and loses nothing.

Each test starts a server of its own (tests/postgres.py) so it can restart it without disturbing others.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
import traceback
from collections.abc import Callable, Iterator

import psycopg
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, OperationalError

from cambrian.archive._engine import CommitCheck
from cambrian.archive.commands import MarkEvaluating
from cambrian.archive.errors import ArchiveUnreachable
from cambrian.archive.models import AgentStatus, Evaluation, LLMCall
from cambrian.archive.store import Archive
from tests.postgres import PostgresServer, start_private_server


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    yield from start_private_server()


def _write_agents(archive: Archive, run_id: int, seed_id: int, n: int, done: list[int], errors: list[str]) -> None:
    """Store, evaluate and cost `n` agents, one full lifecycle each (four transactions), as the loop does."""
    for i in range(n):
        try:
            child = archive.add_agent(
                run_id,
                files={"main.py": f"x = {i}\n"},
                entry="main.py",
                parent_id=seed_id,
                iteration=i + 1,
                operator="diff",
            )
            archive.record_llm_call(
                LLMCall(
                    run_id=run_id, agent_id=child.id, iteration=i + 1, model="m", request_hash=f"h{i}", cost_usd=0.01
                )
            )
            archive.mark_evaluating(child.key)
            archive.finish_evaluation(
                child.key,
                status=AgentStatus.evaluated,
                score=i / n,
                evaluations=[Evaluation(task_id="t0", score=i / n)],
            )
            done.append(child.key)
        except Exception:  # noqa: BLE001 - collected: the test demands none
            errors.append(traceback.format_exc(limit=6))


@pytest.mark.parametrize("mode", ["fast", "immediate"], ids=["restart", "crash-restart"])
def test_a_writer_rides_out_database_restarts_and_loses_nothing(server: PostgresServer, mode: str) -> None:
    url, n = server.create_database(), 240
    with Archive(url, reconnect_s=120) as archive:
        run = archive.create_run(name="live", benchmark="b", seed=0, config_json="{}")
        seed = archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        done: list[int] = []
        errors: list[str] = []
        writer = threading.Thread(target=_write_agents, args=(archive, run.key, seed.key, n, done, errors))
        writer.start()
        restarts = 0
        for threshold in (n // 4, n // 2, 3 * n // 4):  # three restarts while the writer commits
            while len(done) < threshold and writer.is_alive():
                time.sleep(0.005)
            server.restart(mode)
            restarts += 1
        writer.join(timeout=300)
        assert not writer.is_alive()
        assert errors == [], errors[0]
        assert restarts == 3 and len(done) == n
    with Archive(url, readonly=True) as reader:
        agents = reader.agents(run.key)
        assert [a.key for a in agents] == [seed.key, *done], "an agent was lost or stored twice"
        assert all(a.status is AgentStatus.evaluated and a.eval_attempts == 1 for a in agents[1:])
        assert [len(reader.evaluations(agent_id)) for agent_id in done] == [1] * n
        calls = reader.llm_calls(run.key)
        assert sorted(c.request_hash for c in calls) == sorted(f"h{i}" for i in range(n)), "a ledger row doubled"
        assert reader.cost_summary(run.key).cost_usd == pytest.approx(0.01 * n)


def _lost_answer(commit: Callable[[], None], *, committed: bool) -> Callable[[], None]:
    """A COMMIT whose answer never arrives: the server committed (or, committed=False, rolled back) first."""

    def lossy() -> None:
        if committed:
            commit()
        cause = psycopg.OperationalError("server closed the connection unexpectedly")
        raise OperationalError("COMMIT", None, cause, connection_invalidated=True)

    return lossy


@pytest.mark.parametrize("case", ["committed", "rolled-back", "rolled-back-id-reused"])
def test_a_commit_whose_answer_is_lost_is_resolved_by_asking_the_server(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    """rolled-back-id-reused: the lost transaction's id is, by the time the archive asks, one that another
    transaction committed (as after a crash that handed the unlogged id out again): its own commit mark,
    absent, must decide, so the write runs again instead of being taken for done."""
    committed = case == "committed"
    with Archive(postgres_url) as archive:
        run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
        original = archive._db._commit
        checks: list[CommitCheck] = []
        lost: list[CommitCheck] = []

        def once(commit: Callable[[], None], check: CommitCheck | None) -> None:
            assert check is not None, "every write transaction knows its id and its mark"
            if len(checks) == 1 and not lost:  # the child's first write; the retry's goes through
                lost.append(check)
                if not committed:
                    archive._db._connection.rollback()  # type: ignore[union-attr]  # what a server that aborted did
                if case == "rolled-back-id-reused":
                    check = dataclasses.replace(check, xid=checks[0].xid)  # the seed's insert: committed
                return original(_lost_answer(commit, committed=committed), check)
            checks.append(check)
            return original(commit, check)

        monkeypatch.setattr(archive._db, "_commit", once)
        seed = archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        child = archive.add_agent(run.key, files={"main.py": "x = 1\n"}, entry="main.py", parent_id=seed.key)
        finished = archive.mark_evaluating(child.key)
        assert lost, "the child's insert lost its COMMIT's answer"
        agents = archive.agents(run.key)
        # Committed: the first attempt's agent stands, nothing inserted again. Rolled back: the retry stored it.
        assert [a.key for a in agents] == [seed.key, child.key] and child.key == (2 if committed else 3)
        assert finished.status is AgentStatus.evaluating and finished.eval_attempts == 1


def _kill_kept_connection(archive: Archive) -> None:
    """End the server process of the archive's kept connection, from another connection: a real disconnect
    the archive learns of only when it next uses that connection."""
    with archive._db.transaction(write=False) as connection:
        pid = connection.execute(text("SELECT pg_backend_pid()")).scalar()
    with archive.engine.connect() as other:
        assert other.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar() is True


def test_a_unit_of_work_meeting_a_disconnect_runs_again_where_it_is_run_through_the_retry(
    postgres_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The retry is explicit: `Archive.mark_evaluating` runs its unit through `Database.run`, which reconnects and
    runs it again (once: one attempt counted); the same unit called without it meets the disconnect."""
    with Archive(postgres_url) as archive:
        run = archive.create_run(name="retry", benchmark="b", seed=0, config_json="{}")
        child = archive.add_agent(run.key, files={"main.py": "x = 1\n"}, entry="main.py")
        _kill_kept_connection(archive)
        with caplog.at_level(logging.WARNING, logger="archive"):
            marked = archive.mark_evaluating(child.key)
        assert marked.status is AgentStatus.evaluating and marked.eval_attempts == 1
        assert "went away" in caplog.text and "is back after" in caplog.text
        _kill_kept_connection(archive)
        with pytest.raises(DBAPIError) as lost:
            archive._lifecycle.apply(MarkEvaluating(child.key))  # the unit alone: nothing retries it
        assert lost.value.connection_invalidated
        assert archive.get_agent(child.key).eval_attempts == 1  # a fresh connection: it had not run


def test_commit_marks_stay_few_and_old_ones_go_at_a_writable_open(postgres_url: str) -> None:
    """A connection's next write deletes its previous mark; a mark a killed process left goes after a day."""
    with Archive(postgres_url) as archive:
        run = archive.create_run(name="marks", benchmark="b", seed=0, config_json="{}")
        for i in range(20):
            archive.add_agent(run.key, files={"main.py": f"x = {i}\n"}, entry="main.py")
        with archive.engine.begin() as connection:
            left = connection.execute(text("SELECT count(*) FROM commitmark")).scalar()
            connection.execute(
                text(
                    "INSERT INTO commitmark (token, created_at) VALUES ('killed', now() - "
                    "interval '25 hours'), ('recent', now() - interval '1 hour')"
                )
            )
        assert left is not None and left <= 2, f"{left} marks after 21 writes on one or two connections"
    with Archive(postgres_url):
        pass
    with Archive(postgres_url, readonly=True) as reader:
        with reader.engine.connect() as connection:
            tokens = {row[0] for row in connection.execute(text("SELECT token FROM commitmark"))}
    assert "recent" in tokens and "killed" not in tokens


def test_the_archives_reads_send_no_begin_and_its_writes_and_bulk_tools_do(postgres_url: str) -> None:
    """A read is autocommit statements (two round trips less); a write, and `archive.engine.begin()`, are one
    transaction. In a transaction block now() (its start) is earlier than the statement's start; alone, equal."""
    alone = "SELECT now() = statement_timestamp()"
    with Archive(postgres_url) as archive:
        with archive._db.transaction(write=False) as connection:
            assert connection.execute(text(alone)).scalar() is True
            assert connection.execute(text(alone)).scalar() is True  # each statement its own transaction
        with archive._db.transaction(write=True) as connection:
            assert connection.execute(text(alone)).scalar() is False
        with archive.engine.begin() as connection:
            assert connection.execute(text(alone)).scalar() is False
        run = archive.create_run(name="reads", benchmark="b", seed=0, config_json="{}")
        seed = archive.add_agent(run.key, files={"main.py": "x = 1\n"}, entry="main.py")
        assert archive.agent_context(seed.key, invalid_children=3).agent.key == seed.key  # reads as before
        assert archive.get_agent(seed.key).key == seed.key


def test_a_database_that_stays_away_ends_in_a_clear_error(server: PostgresServer) -> None:
    url = server.create_database()
    with Archive(url, reconnect_s=2) as archive:
        run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
        server.stop()
        started = time.monotonic()
        with pytest.raises(ArchiveUnreachable) as gone:
            archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        assert time.monotonic() - started >= 2  # it waited reconnect_s for the server (however busy the machine)
        assert "has not answered for 2 s" in str(gone.value) and "cambrian resume" in gone.value.fix
        server.start()
        server.wait_ready()
        assert archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py").key == 1  # back again
