"""The archive's schema version on real SQLite files: create, no DDL when current, upgrade an old archive, refuse.

"Version 1" archives are built with the raw DDL the models made before versioning (the
current tables minus agent.repair_note and the version table), so the upgrade is tested
against what earlier Cambrian versions really wrote.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import event
from sqlalchemy.pool import Pool

from cambrian.archive.errors import ArchiveOutdated, ArchiveTooNew, NotAnArchive
from cambrian.archive.models import AgentStatus, Evaluation, LLMCall, LLMRequest
from cambrian.archive.schema import SCHEMA_VERSION, UNVERSIONED
from cambrian.archive.store import Archive

CAMBRIAN = [sys.executable, "-m", "cambrian"]

# What `SQLModel.metadata.create_all` made from archive/models.py before schema versioning.
VERSION_1_DDL = """
CREATE TABLE run (
    id INTEGER NOT NULL, name VARCHAR NOT NULL, benchmark VARCHAR NOT NULL, seed INTEGER NOT NULL,
    config_json VARCHAR NOT NULL, status VARCHAR(8) NOT NULL, error VARCHAR, cambrian_version VARCHAR NOT NULL,
    created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL, PRIMARY KEY (id));
CREATE UNIQUE INDEX ix_run_name ON run (name);
CREATE TABLE genome (
    hash VARCHAR NOT NULL, entry VARCHAR NOT NULL, n_files INTEGER NOT NULL, n_bytes INTEGER NOT NULL,
    created_at DATETIME NOT NULL, PRIMARY KEY (hash));
CREATE TABLE llmresponse (
    request_hash VARCHAR NOT NULL, model VARCHAR NOT NULL, text VARCHAR NOT NULL, prompt_tokens INTEGER NOT NULL,
    completion_tokens INTEGER NOT NULL, cost_usd FLOAT NOT NULL, created_at DATETIME NOT NULL,
    PRIMARY KEY (request_hash));
CREATE TABLE genomefile (
    genome_hash VARCHAR NOT NULL, path VARCHAR NOT NULL, text VARCHAR NOT NULL, PRIMARY KEY (genome_hash, path),
    FOREIGN KEY(genome_hash) REFERENCES genome (hash));
CREATE TABLE agent (
    id INTEGER NOT NULL, run_id INTEGER NOT NULL, genome_hash VARCHAR, parent_id INTEGER,
    second_parent_id INTEGER, iteration INTEGER NOT NULL, operator VARCHAR NOT NULL, model VARCHAR,
    status VARCHAR(10) NOT NULL, score FLOAT, holdout_score FLOAT, stage_reached INTEGER NOT NULL,
    n_tasks INTEGER NOT NULL, invalid_reason VARCHAR, feedback VARCHAR, eval_attempts INTEGER NOT NULL,
    eval_seconds FLOAT, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL, cost_usd FLOAT NOT NULL,
    created_at DATETIME NOT NULL, updated_at DATETIME NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(run_id) REFERENCES run (id), FOREIGN KEY(genome_hash) REFERENCES genome (hash),
    FOREIGN KEY(parent_id) REFERENCES agent (id), FOREIGN KEY(second_parent_id) REFERENCES agent (id));
CREATE INDEX ix_agent_iteration ON agent (iteration);
CREATE INDEX ix_agent_score ON agent (score);
CREATE INDEX ix_agent_genome_hash ON agent (genome_hash);
CREATE INDEX ix_agent_parent_id ON agent (parent_id);
CREATE INDEX ix_agent_status ON agent (status);
CREATE INDEX ix_agent_run_id ON agent (run_id);
CREATE TABLE llmcall (
    id INTEGER NOT NULL, run_id INTEGER, agent_id INTEGER, iteration INTEGER, purpose VARCHAR NOT NULL,
    model VARCHAR NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
    cost_usd FLOAT NOT NULL, latency_s FLOAT NOT NULL, request_hash VARCHAR NOT NULL, seed INTEGER,
    cache_hit BOOLEAN NOT NULL, error VARCHAR, created_at DATETIME NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(run_id) REFERENCES run (id));
CREATE INDEX ix_llmcall_run_id ON llmcall (run_id);
CREATE INDEX ix_llmcall_request_hash ON llmcall (request_hash);
CREATE INDEX ix_llmcall_agent_id ON llmcall (agent_id);
CREATE INDEX ix_llmcall_iteration ON llmcall (iteration);
CREATE TABLE evaluation (
    id INTEGER NOT NULL, agent_id INTEGER NOT NULL, task_id VARCHAR NOT NULL, split VARCHAR NOT NULL,
    stage INTEGER NOT NULL, score FLOAT NOT NULL, passed BOOLEAN NOT NULL, executed BOOLEAN NOT NULL,
    duration_s FLOAT NOT NULL, exit_code INTEGER, timed_out BOOLEAN NOT NULL, oom_killed BOOLEAN NOT NULL,
    output_truncated BOOLEAN NOT NULL, feedback VARCHAR NOT NULL, stdout_tail VARCHAR NOT NULL,
    stderr_tail VARCHAR NOT NULL, created_at DATETIME NOT NULL, PRIMARY KEY (id),
    FOREIGN KEY(agent_id) REFERENCES agent (id));
CREATE INDEX ix_evaluation_agent_id ON evaluation (agent_id);
CREATE TABLE agentdescriptor (
    agent_id INTEGER NOT NULL, name VARCHAR NOT NULL, value FLOAT NOT NULL, PRIMARY KEY (agent_id, name),
    FOREIGN KEY(agent_id) REFERENCES agent (id));
"""

VERSION_1_ROWS = """
INSERT INTO run VALUES (1, 'old', 'circle_packing', 7, '{"budget": {"iterations": 3}}', 'finished', NULL, '0.1.0',
    '2025-01-02 03:04:05.000000', '2025-01-02 03:04:05.000000');
INSERT INTO genome VALUES ('g1', 'main.py', 1, 24, '2025-01-02 03:04:05.000000');
INSERT INTO genomefile VALUES ('g1', 'main.py', 'def solve():\n    return 1\n');
INSERT INTO agent VALUES (1, 1, 'g1', NULL, NULL, 0, 'seed', NULL, 'evaluated', 0.5, NULL, 1, 1, NULL, 'ok', 1, 0.2,
    0, 0, 0.0, '2025-01-02 03:04:05.000000', '2025-01-02 03:04:06.000000');
INSERT INTO agent VALUES (2, 1, NULL, 1, NULL, 1, 'diff', 'qwen', 'invalid', NULL, NULL, 0, 0, 'no edit', NULL, 0,
    NULL, 120, 30, 0.001, '2025-01-02 03:04:07.000000', '2025-01-02 03:04:07.000000');
INSERT INTO evaluation VALUES (1, 1, 't0', 'search', 0, 0.5, 1, 1, 0.2, 0, 0, 0, 0, 'fine', '', '',
    '2025-01-02 03:04:06.000000');
INSERT INTO llmcall VALUES (1, 1, 2, 1, 'mutate', 'qwen', 120, 30, 0.001, 1.5, 'r1', 11, 0, NULL,
    '2025-01-02 03:04:07.000000');
"""


def make_version_1_archive(path: Path, *, without: tuple[str, ...] = ()) -> Path:
    """An archive as Cambrian wrote it before versioning (WAL mode, two agents); `without`: tables it lacks."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with sqlite3.connect(path) as raw:
        raw.execute("PRAGMA journal_mode=WAL")
        statements = [s for s in (VERSION_1_DDL + VERSION_1_ROWS).split(";\n") if s.strip()]
        for statement in statements:
            if not any(f" {table} " in statement.split("(")[0] + " " for table in without):
                raw.execute(statement)
    raw.close()
    return path


def table_layout(path: Path) -> dict[str, tuple]:
    """table -> (columns as (name, type, notnull, default, pk), sorted index names): the schema, row-free."""
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as raw:
        tables = [r[0] for r in raw.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        layout = {
            table: (
                [tuple(column[1:]) for column in raw.execute(f"PRAGMA table_info({table})")],
                sorted(index[1] for index in raw.execute(f"PRAGMA index_list({table})")),
            )
            for table in tables
        }
    raw.close()
    return layout


@pytest.fixture
def statements() -> Iterator[list[str]]:
    """Every SQL statement SQLite runs on connections opened meanwhile (sqlite3's trace callback)."""
    seen: list[str] = []

    def trace(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.set_trace_callback(seen.append)

    event.listen(Pool, "connect", trace)
    try:
        yield seen
    finally:
        event.remove(Pool, "connect", trace)


def _writes(statements: list[str]) -> list[str]:
    verbs = ("CREATE", "ALTER", "DROP", "INSERT", "UPDATE", "DELETE", "BEGIN IMMEDIATE")
    return [s for s in statements if s.lstrip().upper().startswith(verbs)]


def test_a_new_archive_is_created_at_the_current_version(tmp_path: Path, statements: list[str]) -> None:
    with Archive.at(tmp_path / "new" / "archive.db") as archive:
        assert (archive.schema.found, archive.schema.version) == (None, SCHEMA_VERSION)
        assert archive.schema.changes == (f"created the schema (version {SCHEMA_VERSION})",)
    assert "BEGIN IMMEDIATE" in statements, "the schema is created under the write lock"
    assert any(s.lstrip().startswith("CREATE TABLE agent") for s in statements)
    with sqlite3.connect(tmp_path / "new" / "archive.db") as raw:
        assert raw.execute("SELECT id, version FROM schemaversion").fetchall() == [(1, SCHEMA_VERSION)]
        assert raw.execute("SELECT version_num FROM alembic_version").fetchall() == [(f"{SCHEMA_VERSION:04d}",)]
    raw.close()


@pytest.mark.parametrize("readonly", [False, True], ids=["writable", "readonly"])
def test_opening_a_current_archive_runs_no_ddl_and_takes_no_write_lock(
    tmp_path: Path, statements: list[str], readonly: bool
) -> None:
    path = tmp_path / "archive.db"
    with Archive.at(path) as archive:
        run = archive.create_run(name="r", benchmark="b", seed=0, config_json="{}")
        archive.add_agent(int(run.id), files={"a.py": "x = 1\n"}, entry="a.py")
    statements.clear()
    with Archive.at(path, readonly=readonly) as archive:
        assert archive.schema.found == SCHEMA_VERSION and not archive.schema.changes
        opened = list(statements)
        assert [a.id for a in archive.agents(int(run.id))] == [1]
    assert opened, "the trace saw the open's statements"
    assert _writes(opened) == [], opened
    assert _writes(statements) == []
    if readonly:
        assert not any("journal_mode" in s for s in statements), "a reader never sets the journal mode"


def test_a_version_1_archive_is_refused_read_only_and_left_as_it_was(tmp_path: Path) -> None:
    path = make_version_1_archive(tmp_path / "archive.db")
    before = table_layout(path)
    with pytest.raises(ArchiveOutdated) as outdated:
        Archive.at(path, readonly=True)
    assert (outdated.value.found, outdated.value.needed) == (UNVERSIONED, SCHEMA_VERSION)
    assert f"schema version {UNVERSIONED}" in str(outdated.value) and f"version {SCHEMA_VERSION}" in str(outdated.value)
    assert str(path) in str(outdated.value)
    assert "cambrian db upgrade RUN" in outdated.value.fix
    assert table_layout(path) == before


@pytest.mark.parametrize("without", [(), ("agentdescriptor", "llmresponse")], ids=["complete", "older-tables"])
def test_a_writable_open_upgrades_a_version_1_archive_keeping_every_row(
    tmp_path: Path, without: tuple[str, ...]
) -> None:
    path = make_version_1_archive(tmp_path / "old.db", without=without)
    with Archive.at(path) as archive:
        report = archive.schema
        assert (report.found, report.version) == (UNVERSIONED, SCHEMA_VERSION)
        assert "added column agent.repair_note" in report.changes
        assert {f"created table {t}" for t in ("schemaversion", *without)} <= set(report.changes)
        run = archive.get_run("old")
        assert (run.seed, run.config_json, run.cambrian_version) == (7, '{"budget": {"iterations": 3}}', "0.1.0")
        seed, child = archive.agents(int(run.id))
        assert (seed.status, seed.score, seed.feedback, seed.repair_note) == (AgentStatus.evaluated, 0.5, "ok", None)
        assert (child.parent_id, child.status, child.invalid_reason, child.cost_usd) == (
            1,
            AgentStatus.invalid,
            "no edit",
            0.001,
        )
        assert archive.get_genome("g1") == ({"main.py": "def solve():\n    return 1\n"}, "main.py")
        assert [(e.task_id, e.score, e.passed) for e in archive.evaluations(1)] == [("t0", 0.5, True)]
        assert [(c.agent_id, c.prompt_tokens, c.seed) for c in archive.llm_calls(int(run.id))] == [(2, 120, 11)]
        requests, responses = archive.llm_exchanges(["r1"])  # written before prompts were kept: not recorded
        assert requests == {} and responses == {}
        # The upgraded archive takes the new column and the whole lifecycle.
        repaired = archive.add_agent(
            int(run.id),
            files={"main.py": "import math\n"},
            entry="main.py",
            parent_id=1,
            iteration=2,
            operator="diff",
            repair_note="added `import math`",
        )
        archive.mark_evaluating(int(repaired.id))
        archive.finish_evaluation(
            int(repaired.id),
            status=AgentStatus.evaluated,
            score=0.7,
            evaluations=[Evaluation(task_id="t0")],
            descriptor={"x": 1.0},
        )
        archive.record_llm_call(LLMCall(run_id=run.id, model="qwen", request_hash="r2"))
        sent = LLMRequest(request_hash="r2", model="qwen", messages='[{"role": "user", "content": "hi"}]')
        archive.record_llm_exchange(LLMCall(run_id=run.id, model="qwen", request_hash="r2"), None, sent)
        assert archive.llm_exchanges(["r2"])[0]["r2"].messages == sent.messages
        assert archive.get_agent(int(repaired.id)).repair_note == "added `import math`"
    with Archive.at(path, readonly=True) as reader:
        assert not reader.schema.changes and reader.get_agent(int(repaired.id)).score == 0.7
    # The same layout as an archive created at the current version (ADD COLUMN appends, and repair_note is last).
    with Archive.at(tmp_path / "fresh.db"):
        pass
    assert table_layout(path) == table_layout(tmp_path / "fresh.db")


def test_a_version_5_archive_is_upgraded_by_a_writer_and_refused_by_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    with Archive.at(path) as archive:
        run = archive.create_run(name="v5", benchmark="circle_packing", seed=0, config_json="{}")
        agent = archive.add_agent(int(run.id), files={"p.py": "x = 1\n"}, entry="p.py")
        archive.mark_evaluating(agent.key)
        archive.finish_evaluation(
            agent.key,
            status=AgentStatus.evaluated,
            score=1.0,
            evaluations=[Evaluation(agent_id=agent.key, task_id="t", score=1.0)],
        )
    with sqlite3.connect(path) as raw:  # what version 5 wrote: no repeats, spread, no-op verdict or output hash
        raw.execute("DROP TABLE islandmigrant")  # nor islands (version 8)
        raw.execute("ALTER TABLE agent DROP COLUMN island")
        for table in ("agent", "llmcall"):  # nor a proposal id (version 7)
            raw.execute(f"DROP INDEX ix_{table}_proposal_id")
            raw.execute(f"ALTER TABLE {table} DROP COLUMN proposal_id")
        for table, column in (
            ("agent", "repeats"),
            ("agent", "score_spread"),
            ("agent", "behaves_as"),
            ("agent", "fm_seconds"),
            ("evaluation", "output_hash"),
        ):
            raw.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        raw.execute("UPDATE schemaversion SET version = 5")
        raw.execute("UPDATE alembic_version SET version_num = '0005'")
    raw.close()
    before = table_layout(path)
    with pytest.raises(ArchiveOutdated) as outdated:  # a reader selects the new columns: it cannot read it as is
        Archive.at(path, readonly=True)
    assert (outdated.value.found, outdated.value.needed) == (5, SCHEMA_VERSION) and "upgrade" in outdated.value.fix
    assert table_layout(path) == before  # a reader changed nothing
    with Archive.at(path) as writer:
        assert (writer.schema.found, writer.schema.version) == (5, SCHEMA_VERSION)
        [old] = writer.agents(int(run.id))
        assert (old.repeats, old.score_spread, old.behaves_as, old.fm_seconds, old.score) == (1, None, None, 0, 1.0)
        assert old.island is None and writer.island_migrants(int(run.id)) == []
        [row] = writer.evaluations(old.key)
        assert row.output_hash is None
    with Archive.at(tmp_path / "fresh.db"):
        pass
    assert table_layout(path) == table_layout(tmp_path / "fresh.db")


def test_an_archive_newer_than_this_code_is_refused_and_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "archive.db"
    with Archive.at(path):
        pass
    with sqlite3.connect(path) as raw:  # as a later Cambrian would leave it
        raw.execute("UPDATE schemaversion SET version = ?", (SCHEMA_VERSION + 1,))
        raw.execute("UPDATE alembic_version SET version_num = ?", (f"{SCHEMA_VERSION + 1:04d}",))
    raw.close()
    before = table_layout(path)
    for readonly in (False, True):
        with pytest.raises(ArchiveTooNew) as too_new:
            Archive.at(path, readonly=readonly)
        assert f"schema version {SCHEMA_VERSION + 1}" in str(too_new.value)
        assert "upgrade Cambrian" in too_new.value.fix
    assert table_layout(path) == before


def test_a_database_with_other_tables_is_not_an_archive(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with sqlite3.connect(path) as raw:
        raw.execute("CREATE TABLE notes (text VARCHAR)")
    raw.close()
    for readonly in (False, True):
        with pytest.raises(NotAnArchive, match="not a Cambrian archive .*notes"):
            Archive.at(path, readonly=readonly)
    assert list(table_layout(path)) == ["notes"]


def _cambrian(*args: str, runs: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
    return subprocess.run(
        [*CAMBRIAN, *args, "--runs-dir", str(runs)], capture_output=True, text=True, timeout=300, env=env
    )


def test_cli_readers_refuse_an_old_archive_and_db_upgrade_upgrades_it(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    path = make_version_1_archive(runs / "old" / "archive.db")

    refused = _cambrian("status", "old", runs=runs)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr, refused.stderr
    assert f"schema version {UNVERSIONED}" in refused.stderr
    assert f"cambrian db upgrade old --runs-dir {runs}" in refused.stderr
    assert "schemaversion" not in table_layout(path), "a reader upgraded the archive"

    listed = _cambrian("runs", runs=runs)
    assert listed.returncode == 0 and "cambrian db upgrade old" in listed.stdout, listed.stdout + listed.stderr

    upgraded = _cambrian("db", "upgrade", "old", runs=runs)
    assert upgraded.returncode == 0, upgraded.stderr
    assert f"from schema version {UNVERSIONED} to {SCHEMA_VERSION}" in upgraded.stdout
    assert "added column agent.repair_note" in " ".join(upgraded.stdout.split())  # rich wraps long lines

    again = _cambrian("db", "upgrade", "old", runs=runs)
    assert again.returncode == 0 and "already current" in again.stdout, again.stdout + again.stderr
    tree = _cambrian("tree", "old", runs=runs)
    assert tree.returncode == 0 and "#1" in tree.stdout and "#2" in tree.stdout, tree.stdout + tree.stderr

    missing = _cambrian("db", "upgrade", "nope", runs=runs)
    assert missing.returncode == 2 and "no run named 'nope'" in missing.stderr and "fix:" in missing.stderr
