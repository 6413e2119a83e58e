"""The Alembic migrations on both stores (an SQLite file, a real PostgreSQL database).

Old archives are built the way their Cambrian left them: the revisions up to their version (so the DDL is
what that version had), rows written with plain SQL, and, for archives from before Alembic, Alembic's
table dropped (they had only `schemaversion`, or no version at all).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlmodel import SQLModel

from cambrian.archive.errors import ArchiveOutdated, ArchiveTooNew
from cambrian.archive.migrations import alembic_config, revision_of, script_directory
from cambrian.archive.models import AgentStatus, Evaluation, IslandMigrant, LLMCall
from cambrian.archive.schema import READABLE_FROM, SCHEMA_VERSION, UNVERSIONED
from cambrian.archive.store import Archive

CAMBRIAN = [sys.executable, "-m", "cambrian"]
WHEN = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def _engine(url: str) -> Engine:
    return create_engine(url)


def _tables(url: str) -> dict[str, list[str]]:
    engine = _engine(url)
    try:
        with engine.connect() as connection:
            inspector = inspect(connection)
            return {t: [c["name"] for c in inspector.get_columns(t)] for t in sorted(inspector.get_table_names())}
    finally:
        engine.dispose()


def make_old_archive(url: str, version: int, *, alembic: bool) -> None:
    """An archive at schema `version` with one run, two agents, a task row and an FM call.

    alembic=False: as a Cambrian from before Alembic left it (no alembic_version table; from version 2 on
    a schemaversion row)."""
    command.upgrade(alembic_config(url=url), revision_of(version))
    engine = _engine(url)
    with engine.begin() as connection:
        run = {"name": "old", "benchmark": "circle_packing", "seed": 7, "config": '{"budget": {"iterations": 3}}'}
        connection.execute(
            text(
                "INSERT INTO run (id, name, benchmark, seed, config_json, status, error, cambrian_version, created_at,"
                " updated_at) VALUES (1, :name, :benchmark, :seed, :config, 'finished', NULL, '0.1.0', :t, :t)"
            ),
            {**run, "t": WHEN},
        )
        connection.execute(text("INSERT INTO genome VALUES ('g1', 'main.py', 1, 24, :t)"), {"t": WHEN})
        connection.execute(text("INSERT INTO genomefile VALUES ('g1', 'main.py', 'def solve():\n    return 1\n')"))
        agent = (
            "INSERT INTO agent (id, run_id, genome_hash, parent_id, second_parent_id, iteration, operator, model,"
            " status, score, holdout_score, stage_reached, n_tasks, invalid_reason, feedback, eval_attempts,"
            " eval_seconds, prompt_tokens, completion_tokens, cost_usd, created_at, updated_at) VALUES "
        )
        connection.execute(
            text(
                agent + "(1, 1, 'g1', NULL, NULL, 0, 'seed', NULL, 'evaluated', 0.5, NULL, 1, 1, NULL, 'ok', 1,"
                " 0.2, 0, 0, 0.0, :t, :t)"
            ),
            {"t": WHEN},
        )
        connection.execute(
            text(
                agent + "(2, 1, NULL, 1, NULL, 1, 'diff', 'qwen', 'invalid', NULL, NULL, 0, 0, 'no edit', NULL, 0,"
                " NULL, 120, 30, 0.001, :t, :t)"
            ),
            {"t": WHEN},
        )
        connection.execute(
            text(
                "INSERT INTO evaluation (id, agent_id, task_id, split, stage, score, passed, executed, duration_s,"
                " exit_code, timed_out, oom_killed, output_truncated, feedback, stdout_tail, stderr_tail, created_at)"
                " VALUES (1, 1, 't0', 'search', 0, 0.5, true, true, 0.2, 0, false, false, false, 'fine', '', '', :t)"
            ),
            {"t": WHEN},
        )
        connection.execute(
            text(
                "INSERT INTO llmcall (id, run_id, agent_id, iteration, purpose, model, prompt_tokens,"
                " completion_tokens, cost_usd, latency_s, request_hash, seed, cache_hit, error, created_at)"
                " VALUES (1, 1, 2, 1, 'mutate', 'qwen', 120, 30, 0.001, 1.5, 'r1', 11, false, NULL, :t)"
            ),
            {"t": WHEN},
        )
        if connection.dialect.name == "postgresql":  # rows given explicit ids: move the sequences past them
            for table in ("run", "agent", "evaluation", "llmcall"):
                connection.execute(
                    text(f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))")
                )
        if not alembic:
            connection.execute(text("DROP TABLE alembic_version"))
    engine.dispose()


@pytest.fixture
def url(store_url: str) -> Iterator[str]:
    yield store_url


def test_the_revisions_are_the_schema_versions_in_one_line() -> None:
    script = script_directory()
    assert script.get_current_head() == revision_of(SCHEMA_VERSION)
    chain = [r.revision for r in reversed(list(script.walk_revisions()))]
    assert chain == [revision_of(v) for v in range(1, SCHEMA_VERSION + 1)]


def test_the_revisions_build_exactly_what_models_declare(url: str) -> None:
    command.upgrade(alembic_config(url=url), "head")  # through env.py on the URL, as a developer would
    engine = _engine(url)
    with engine.connect() as connection:
        differences = compare_metadata(MigrationContext.configure(connection), SQLModel.metadata)
    engine.dispose()
    assert differences == []
    with Archive(url) as archive:  # an archive the revisions built is current: nothing to do
        assert (archive.schema.found, archive.schema.changes) == (SCHEMA_VERSION, ())


def test_a_new_archive_matches_the_revisions_and_downgrades_to_nothing_and_back(url: str) -> None:
    with Archive(url) as archive:
        assert archive.schema.changes == (f"created the schema (version {SCHEMA_VERSION})",)
    created = _tables(url)
    config = alembic_config(url=url)
    command.downgrade(config, "base")
    assert set(_tables(url)) == {"alembic_version"}
    command.upgrade(config, "head")
    assert _tables(url) == created


@pytest.mark.parametrize(
    ("version", "alembic"),
    [(UNVERSIONED, False), (2, False), (3, False), (1, True), (2, True), (3, True), (4, True), (6, True), (7, True)],
    ids=["unversioned", "v2-before-alembic", "v3-before-alembic"] + [f"revision-000{v}" for v in (1, 2, 3, 4, 6, 7)],
)
def test_an_older_archive_is_read_or_refused_read_only_and_upgraded_by_a_writer(
    url: str, version: int, alembic: bool
) -> None:
    make_old_archive(url, version, alembic=alembic)
    before = _tables(url)
    if version < READABLE_FROM:
        with pytest.raises(ArchiveOutdated) as outdated:
            Archive(url, readonly=True)
        assert (outdated.value.found, outdated.value.needed) == (version, SCHEMA_VERSION)
        assert "cambrian db upgrade" in outdated.value.fix
    else:
        with Archive(url, readonly=True) as reader:
            assert (reader.schema.found, reader.schema.changes) == (version, ())
            assert [a.id for a in reader.agents(1)] == [1, 2]
            assert reader.llm_exchanges(["r1"]) == ({}, {})  # prompts were not recorded then
    assert _tables(url) == before, "a reader changed the schema"

    with Archive(url) as archive:
        report = archive.schema
        assert (report.found, report.version) == (version, SCHEMA_VERSION)
        stamped = f"recorded its version {version} as Alembic revision {revision_of(version)}"
        assert (stamped in report.changes) == (not alembic and version > UNVERSIONED)
        if version < 2:
            assert {"added column agent.repair_note", "created table schemaversion"} <= set(report.changes)
        if version < 3:
            assert "created table llmrequest" in report.changes
        if version < 4:
            assert "created table commitmark" in report.changes
        if version < 5:
            assert "created table greedyanswer" in report.changes
        assert {"added column agent.island", "created table islandmigrant"} <= set(report.changes)
        run = archive.get_run("old")
        assert (run.seed, run.config_json, run.cambrian_version) == (7, '{"budget": {"iterations": 3}}', "0.1.0")
        seed, child = archive.agents(run.key)
        assert (seed.status, seed.score, seed.feedback, seed.repair_note) == (AgentStatus.evaluated, 0.5, "ok", None)
        assert (child.parent_id, child.invalid_reason, child.cost_usd) == (1, "no edit", 0.001)
        assert archive.get_genome("g1") == ({"main.py": "def solve():\n    return 1\n"}, "main.py")
        assert [(e.task_id, e.score, e.passed) for e in archive.evaluations(1)] == [("t0", 0.5, True)]
        assert [(c.agent_id, c.prompt_tokens, c.seed) for c in archive.llm_calls(run.key)] == [(2, 120, 11)]
        if version < 7:  # Version 7: the link the old rule made is kept as a proposal id, once.
            assert [c.proposal_id for c in archive.llm_calls(run.key)] == ["legacy-2"]
            assert (seed.proposal_id, child.proposal_id) == (None, "legacy-2")
        # Version 8: old agents are on no island (a run without islands), and none ever migrated.
        assert (seed.island, child.island) == (None, None) and archive.island_migrants(run.key) == []
        # The upgraded archive takes new rows with fresh ids and the new column.
        repaired = archive.add_agent(
            run.key,
            files={"main.py": "import math\n"},
            entry="main.py",
            parent_id=1,
            iteration=2,
            operator="diff",
            repair_note="added `import math`",
        )
        assert repaired.id == 3
        archive.mark_evaluating(repaired.key)
        archive.finish_evaluation(
            repaired.key, status=AgentStatus.evaluated, score=0.7, evaluations=[Evaluation(task_id="t1")]
        )
        on_island = archive.add_agent(
            run.key, files={"main.py": "x = 3\n"}, entry="main.py", parent_id=1, iteration=3, operator="diff", island=1
        )
        archive.mark_evaluating(on_island.key)
        archive.finish_evaluation(on_island.key, status=AgentStatus.evaluated, score=0.8)
        archive.add_island_migrants(
            [IslandMigrant(agent_id=on_island.key, island=0, run_id=run.key, from_island=1, after_proposals=3)]
        )
    with Archive(url) as again:  # current now: nothing more to do
        assert (again.schema.found, again.schema.changes) == (SCHEMA_VERSION, ())
        assert again.get_agent(3).repair_note == "added `import math`"
        assert again.get_agent(on_island.key).island == 1
        assert [(m.agent_id, m.island, m.after_proposals) for m in again.island_migrants(1)] == [(4, 0, 3)]
    engine = _engine(url)
    with engine.connect() as connection:
        assert connection.execute(text("SELECT version_num FROM alembic_version")).scalar() == revision_of(
            SCHEMA_VERSION
        )
        assert connection.execute(text("SELECT version FROM schemaversion")).scalar() == SCHEMA_VERSION
        assert compare_metadata(MigrationContext.configure(connection), SQLModel.metadata) == []
    engine.dispose()


def test_an_archive_at_a_revision_this_code_does_not_know_is_refused(url: str) -> None:
    with Archive(url):
        pass
    engine = _engine(url)
    with engine.begin() as connection:  # as a later Cambrian would leave it
        connection.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision_of(SCHEMA_VERSION + 1)})
        connection.execute(text("UPDATE schemaversion SET version = :v"), {"v": SCHEMA_VERSION + 1})
    engine.dispose()
    for readonly in (False, True):
        with pytest.raises(ArchiveTooNew, match=f"schema version {SCHEMA_VERSION + 1}"):
            Archive(url, readonly=readonly)


def test_opening_a_current_archive_runs_no_ddl_and_no_write(url: str) -> None:
    with Archive(url) as archive:
        archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        seen.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    try:
        for readonly in (False, True):
            with Archive(url, readonly=readonly) as archive:
                assert (archive.schema.found, archive.schema.changes) == (SCHEMA_VERSION, ())
    finally:
        event.remove(Engine, "before_cursor_execute", record)
    assert seen, "the listener saw the opens"
    verbs = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE")
    assert [s for s in seen if s.lstrip().upper().startswith(verbs) or "advisory" in s] == []


def _cambrian(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run([*CAMBRIAN, *args], capture_output=True, text=True, timeout=300, env=env)


def test_db_upgrade_takes_a_database_url(postgres_url: str, tmp_path: Path) -> None:
    make_old_archive(postgres_url, UNVERSIONED, alembic=False)
    refused = _cambrian("status", "old", "--store", postgres_url)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert f"cambrian db upgrade {postgres_url}" in " ".join(refused.stderr.split())

    upgraded = _cambrian("db", "upgrade", postgres_url)
    assert upgraded.returncode == 0, upgraded.stdout + upgraded.stderr
    out = " ".join(upgraded.stdout.split())
    assert f"from schema version {UNVERSIONED} to {SCHEMA_VERSION}" in out and "added column agent.repair_note" in out

    again = _cambrian("db", "upgrade", postgres_url)
    assert again.returncode == 0 and "already current" in again.stdout, again.stdout + again.stderr
    tree = _cambrian("tree", "old", "--store", postgres_url)
    assert tree.returncode == 0 and "#1" in tree.stdout and "#2" in tree.stdout, tree.stdout + tree.stderr

    wrong = _cambrian("db", "upgrade", "postgresql+psycopg://someone:hunter2@127.0.0.1:1/nowhere")
    assert wrong.returncode == 2 and "Traceback" not in wrong.stderr, wrong.stderr
    assert "cannot connect" in wrong.stderr and "fix:" in wrong.stderr and "hunter2" not in wrong.stderr


def test_without_server_binaries_the_postgresql_tests_skip_or_fail_as_ci_demands(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import tests.postgres

    monkeypatch.setattr(tests.postgres, "postgres_bindir", lambda: None)
    monkeypatch.delenv("CAMBRIAN_REQUIRE_POSTGRES", raising=False)
    with pytest.raises(pytest.skip.Exception, match="apt-get install postgresql"):
        tests.postgres.skip_without_postgres()
    monkeypatch.setenv("CAMBRIAN_REQUIRE_POSTGRES", "1")
    with pytest.raises(pytest.fail.Exception, match="CAMBRIAN_REQUIRE_POSTGRES=1"):
        tests.postgres.skip_without_postgres()


def test_an_archive_written_by_19453f1_keeps_every_fm_call_linked_to_its_child(tmp_path: Path) -> None:
    """A real archive, not a rebuilt one: 19453f1 (schema 5) ran `cambrian run circle_packing --model
    smollm2-135m --sandbox local --iterations 4` until stopped: a seed and three children, each made by a
    proposal and a repair, six FM calls linked to their child by iteration. Upgraded, each call is linked by
    its child's proposal id, and a new proposal links its calls by its own id alone."""
    path = tmp_path / "archive.db"
    path.write_bytes((Path(__file__).parent / "fixtures" / "archive-19453f1.db").read_bytes())
    with pytest.raises(ArchiveOutdated):
        Archive(f"sqlite:///{path}", readonly=True)
    with Archive.at(path) as archive:
        assert (archive.schema.found, archive.schema.version) == (5, SCHEMA_VERSION)
        run = archive.get_run("old")
        agents = archive.agents(run.key)
        assert [(a.id, a.operator, a.proposal_id) for a in agents] == [
            (1, "seed", None),
            (2, "lines", "legacy-2"),
            (3, "lines", "legacy-3"),
            (4, "lines", "legacy-4"),
        ]
        for child in agents[1:]:
            calls = archive.agent_llm_calls(child.key)
            assert [c.purpose for c in calls] == ["mutate", "repair"]
            assert {(c.iteration, c.proposal_id) for c in calls} == {(child.iteration, f"legacy-{child.id}")}
        # Resumed: a proposal of iteration 4 whose calls are recorded before its child exists.
        for request_hash in ("new-1", "new-2"):
            archive.record_llm_call(
                LLMCall(
                    run_id=run.key,
                    iteration=4,
                    purpose="mutate",
                    model="m",
                    request_hash=request_hash,
                    proposal_id="p4",
                )
            )
        stray = archive.record_llm_call(LLMCall(run_id=run.key, iteration=4, model="m", request_hash="other"))
        child = archive.add_agent(
            run.key,
            parent_id=1,
            iteration=4,
            operator="lines",
            proposal_id="p4",
            status=AgentStatus.invalid,
            invalid_reason="no edit",
        )
        assert [c.request_hash for c in archive.agent_llm_calls(child.key)] == ["new-1", "new-2"]
        assert archive.get_agent(child.key).proposal_id == "p4"
        assert [c.agent_id for c in archive.llm_calls(run.key) if c.id == stray.id] == [None]  # same iteration, no link
