"""`Prepared` (archive/_prepared.py): the per-candidate statements run on the DBAPI cursor must send and return
exactly what SQLAlchemy's `Connection.execute` would, on a real SQLite file and a real PostgreSQL database
(`store_url`, tests/postgres.py), and fail the way it fails."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime

import pytest
from sqlalchemy import bindparam, insert, select
from sqlalchemy.exc import IntegrityError

from cambrian.archive._prepared import Prepared
from cambrian.archive._statements import (
    _AGENT,
    _FIND_GENOME,
    _INSERT_GENOME_FILE,
    _RECENT_INVALID_CHILDREN,
    _SELECT_AGENT,
    _SELECT_GENOME,
)
from cambrian.archive.models import AgentStatus, Evaluation
from cambrian.archive.store import Archive

FILES = {"main.py": "def solve():\n    return 1\n", "util/helpers.py": "X = 'ü'\n"}


@pytest.fixture
def archive(store_url: str) -> Iterator[Archive]:
    with Archive(store_url) as store:
        yield store


def test_rows_equal_what_connection_execute_returns(archive: Archive) -> None:
    run = archive.create_run(name="prepared", benchmark="toy", seed=0, config_json="{}")
    assert run.id is not None
    seed = archive.add_agent(run.id, files=FILES, entry="main.py", status=AgentStatus.evaluating)
    archive.finish_evaluation(seed.key, status=AgentStatus.evaluated, score=0.25, feedback="ok", eval_seconds=1.5)
    for reason in ("syntax error", "no change"):
        archive.add_agent(run.id, parent_id=seed.key, status=AgentStatus.invalid, invalid_reason=reason, iteration=1)
    calls = [
        (_SELECT_AGENT, {"agent_id": seed.key}),
        (_RECENT_INVALID_CHILDREN, {"agent_id": seed.key, "n": 5}),
        (_FIND_GENOME, {"run_id": run.id, "genome_hash": seed.genome_hash}),
        (_SELECT_GENOME, {"hash": seed.genome_hash}),
    ]
    with archive._db.transaction(write=False) as connection:
        for prepared, params in calls:
            ours = prepared.run(connection, params).all()
            theirs = connection.execute(prepared.statement, params).all()
            assert [row._mapping for row in ours] == [dict(row._mapping) for row in theirs]
            for mine, its in zip(ours, theirs):
                assert [type(value) for value in mine] == [type(value) for value in its]
        row = _SELECT_AGENT.run(connection, {"agent_id": seed.key}).first()
    assert row.status is AgentStatus.evaluated and row.score == 0.25 and row.feedback == "ok"
    assert isinstance(row.created_at, datetime) and row.created_at.utcoffset() is not None


def test_values_round_trip_through_the_lifecycle(archive: Archive) -> None:
    """What the lifecycle writes with prepared statements (booleans, floats, None, text) reads back unchanged
    through the ORM's queries."""
    run = archive.create_run(name="round-trip", benchmark="toy", seed=0, config_json="{}")
    assert run.id is not None
    agent = archive.add_agent(run.id, files=FILES, entry="main.py", model="m", repair_note="added `import math`")
    archive.mark_evaluating(agent.key)
    rows = [
        Evaluation(agent_id=0, task_id="t1", score=1.0, passed=True, duration_s=0.5, exit_code=0),
        Evaluation(agent_id=0, task_id="t2", score=0.0, passed=False, executed=False, timed_out=True, exit_code=None),
    ]
    done = archive.finish_evaluation(
        agent.key, status=AgentStatus.evaluated, score=0.5, evaluations=rows, descriptor={"a": 1.0, "b": 2.5}
    )
    assert done.status is AgentStatus.evaluated and done.n_tasks == 2 and done.eval_attempts == 1
    stored = archive.evaluations(agent.key)
    assert [(e.task_id, e.passed, e.executed, e.timed_out, e.exit_code) for e in stored] == [
        ("t1", True, True, False, 0),
        ("t2", False, False, True, None),
    ]
    again = archive.get_agent(agent.key)
    assert again.repair_note == "added `import math`" and again.model == "m"
    assert archive.get_genome(str(agent.genome_hash)) == (FILES, "main.py")


def test_a_driver_error_is_sqlalchemys_and_rolls_the_transaction_back(archive: Archive) -> None:
    digest = archive.put_genome(FILES, "main.py")
    with pytest.raises(IntegrityError):
        with archive._db.transaction(write=True) as connection:
            _INSERT_GENOME_FILE.run(connection, {"genome_hash": digest, "path": "extra.py", "text": "1"})
            _INSERT_GENOME_FILE.run(connection, {"genome_hash": digest, "path": "main.py", "text": "again"})
    assert archive.get_genome(digest) == (FILES, "main.py")  # extra.py went with the rollback
    with archive._db.transaction(write=True) as connection:  # the connection is usable afterwards
        _INSERT_GENOME_FILE.run(connection, [{"genome_hash": digest, "path": f"{i}.py", "text": ""} for i in range(3)])
    assert sorted(archive.get_genome(digest)[0]) == ["0.py", "1.py", "2.py", "main.py", "util/helpers.py"]


def test_a_statement_that_needs_work_per_call_is_refused(archive: Archive) -> None:
    """What `Connection.execute` does per call and `Prepared` does not (expand an IN list, fill the columns'
    defaults) is refused when it first compiles, not run wrong."""
    expanding = Prepared(select(_AGENT.c.id).where(_AGENT.c.id.in_(bindparam("ids", expanding=True))))
    defaults_left = Prepared(insert(_AGENT), columns=["run_id"])
    with archive._db.transaction(write=True) as connection:
        with pytest.raises(TypeError, match="per-call compilation"):
            expanding.run(connection, {"ids": [1, 2]})
        defaults = r"column defaults to fill \(iteration, .*created_at, updated_at, repeats, fm_seconds\)"
        with pytest.raises(TypeError, match=defaults):
            defaults_left.run(connection, {"run_id": 1})
