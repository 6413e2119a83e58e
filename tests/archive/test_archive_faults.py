"""A PostgreSQL server that goes away under a writing archive: the writer waits, reconnects and loses nothing.

Each test starts a server of its own (tests/postgres.py) so it can restart it without disturbing others.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from sqlalchemy.exc import OperationalError

from archive.errors import ArchiveUnreachable
from archive.models import AgentStatus, Evaluation, LLMCall
from archive.store import Archive
from tests.postgres import PostgresServer, start_private_server


@pytest.fixture
def server() -> Iterator[PostgresServer]:
    yield from start_private_server()


def _write_agents(archive: Archive, run_id: int, seed_id: int, n: int, done: list[int], errors: list[str]) -> None:
    """Store, evaluate and cost `n` agents, one full lifecycle each (four transactions), as the loop does."""
    for i in range(n):
        try:
            child = archive.add_agent(run_id, files={"main.py": f"x = {i}\n"}, entry="main.py", parent_id=seed_id,
                                      iteration=i + 1, operator="diff")  # fmt: skip
            archive.record_llm_call(LLMCall(run_id=run_id, agent_id=child.id, iteration=i + 1, model="m",
                                            request_hash=f"h{i}", cost_usd=0.01))  # fmt: skip
            archive.mark_evaluating(child.key)
            archive.finish_evaluation(child.key, status=AgentStatus.evaluated, score=i / n,
                                      evaluations=[Evaluation(task_id="t0", score=i / n)])  # fmt: skip
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


@pytest.mark.parametrize("committed", [True, False], ids=["committed", "rolled-back"])
def test_a_commit_whose_answer_is_lost_is_resolved_by_asking_the_server(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, committed: bool
) -> None:
    with Archive(postgres_url) as archive:
        run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
        seed = archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        original = archive._commit
        lost: list[Any] = []

        def once(commit: Callable[[], None], xid: int | None) -> None:
            if not lost:  # the first COMMIT only; the retry's goes through
                lost.append(xid)
                if not committed:
                    archive._connection.rollback()  # type: ignore[union-attr]  # what a server that aborted did
                return original(_lost_answer(commit, committed=committed), xid)
            return original(commit, xid)

        monkeypatch.setattr(archive, "_commit", once)
        child = archive.add_agent(run.key, files={"main.py": "x = 1\n"}, entry="main.py", parent_id=seed.key)
        finished = archive.mark_evaluating(child.key)
        assert lost and lost[0] is not None, "the write transaction knew its id"
        agents = archive.agents(run.key)
        # Committed: the first attempt's agent stands, nothing inserted again. Rolled back: the retry stored it.
        assert [a.key for a in agents] == [seed.key, child.key] and child.key == (2 if committed else 3)
        assert finished.status is AgentStatus.evaluating and finished.eval_attempts == 1


def test_a_database_that_stays_away_ends_in_a_clear_error(server: PostgresServer) -> None:
    url = server.create_database()
    with Archive(url, reconnect_s=2) as archive:
        run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
        server.stop()
        started = time.monotonic()
        with pytest.raises(ArchiveUnreachable) as gone:
            archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py")
        assert 2 <= time.monotonic() - started < 30
        assert "has not answered for 2 s" in str(gone.value) and "cambrian resume" in gone.value.fix
        server.start()
        server.wait_ready()
        assert archive.add_agent(run.key, files={"main.py": "x = 0\n"}, entry="main.py").key == 1  # back again
