"""`Archive`: the lineage store over any SQLAlchemy URL (SQLite in WAL mode by default).

Every state change is one transaction, so a kill at any instant loses only what was not
yet committed and never leaves half a change. Returned rows are detached copies: read
their attributes freely after the call.

The per-candidate path (add_agent, mark_evaluating, finish_evaluation, get_agent, the FM
ledger) runs prebuilt SQLAlchemy Core statements on the archive's own connection: the
ORM's session and unit of work cost several times what SQLite does, and the loop pays
them for every candidate. Rarely called queries keep the ORM for readability.

Opening runs no DDL unless the schema is missing or older than this code: archive/schema.py
creates or upgrades it in one guarded transaction. `readonly=True` opens for browsing an
archive a search may be writing: no DDL, no write lock, no write at all.
"""

from __future__ import annotations

import hashlib
import json
import math
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any
from urllib.parse import quote

import numpy as np
from sqlalchemy import Connection, Engine, bindparam, delete, event, func, insert, literal, or_, update
from sqlalchemy import select as core_select
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool
from sqlmodel import Session, create_engine, select

from archive.errors import (
    AgentNotFound,
    ArchiveError,
    ArchiveNotFound,
    ArchiveReadOnly,
    GenomeNotFound,
    InvalidGenome,
    InvalidTransition,
    NotAnArchive,
    RunExists,
    RunNotFound,
)
from archive.ledger import CostSummary, LedgerMixin, ModelCost, detached, insert_ignore, insert_ignore_statement
from archive.models import (
    Agent,
    AgentDescriptor,
    AgentStatus,
    Evaluation,
    Genome,
    GenomeFile,
    LLMResponse,
    Run,
    RunStatus,
    utcnow,
)
from archive.schema import SchemaReport, open_schema
from archive.view import NO_PARENT, ArchiveView

__all__ = ["TRANSITIONS", "Archive", "CostSummary", "ModelCost", "check_genome_paths", "genome_hash"]

#: Allowed agent status changes; anything else raises InvalidTransition.
TRANSITIONS: Mapping[AgentStatus, frozenset[AgentStatus]] = MappingProxyType(
    {
        AgentStatus.proposed: frozenset({AgentStatus.evaluating, AgentStatus.invalid}),
        # evaluating -> evaluating: a killed run resumes an evaluation it had started.
        AgentStatus.evaluating: frozenset(
            {AgentStatus.evaluating, AgentStatus.evaluated, AgentStatus.invalid, AgentStatus.failed}
        ),
        AgentStatus.failed: frozenset({AgentStatus.evaluating}),  # retry after an infrastructure fault
        AgentStatus.evaluated: frozenset(),
        AgentStatus.invalid: frozenset(),
    }
)

#: How long a connection waits for another's lock, and a reader for a creator's schema, in seconds.
_BUSY_TIMEOUT_S = 10.0

_NEW_AGENT_STATUSES = (AgentStatus.proposed, AgentStatus.invalid)
_FINISHED_STATUSES = (AgentStatus.evaluated, AgentStatus.invalid, AgentStatus.failed)

_AGENT = Agent.__table__  # type: ignore[attr-defined]
_EVALUATION = Evaluation.__table__  # type: ignore[attr-defined]
_DESCRIPTOR = AgentDescriptor.__table__  # type: ignore[attr-defined]
_GENOME = Genome.__table__  # type: ignore[attr-defined]
_GENOME_FILE = GenomeFile.__table__  # type: ignore[attr-defined]
_RUN = Run.__table__  # type: ignore[attr-defined]
_AGENT_VALUE_COLUMNS = tuple(column.name for column in _AGENT.c if column.name != "id")
_EVALUATION_VALUE_COLUMNS = tuple(column.name for column in _EVALUATION.c if column.name not in ("id", "agent_id"))


def _guarded_update(new: AgentStatus, **values: Any) -> Any:
    """UPDATE agent ... WHERE id = :agent_id AND status may go to `new`, RETURNING the row.

    The status guard inside the UPDATE is the transition check: no separate read, and
    nothing can change the status between a check and the write.
    """
    sources = [status for status, targets in TRANSITIONS.items() if new in targets]
    return (
        update(_AGENT)
        .where(_AGENT.c.id == bindparam("agent_id"), or_(*(_AGENT.c.status == source for source in sources)))
        .values(status=new, updated_at=bindparam("now"), **values)
        .returning(*_AGENT.c)
    )


_MARK_EVALUATING = _guarded_update(AgentStatus.evaluating, eval_attempts=_AGENT.c.eval_attempts + 1)
_MARK_FAILED = _guarded_update(AgentStatus.failed, invalid_reason=bindparam("reason"))
# One statement per final status: the target status is part of each statement's guard.
_FINISH = {
    status: _guarded_update(
        status,
        score=bindparam("score"),
        stage_reached=bindparam("stage_reached"),
        invalid_reason=bindparam("invalid_reason"),
        eval_seconds=bindparam("eval_seconds"),
        n_tasks=bindparam("n_tasks"),
        feedback=func.coalesce(bindparam("feedback", type_=_AGENT.c.feedback.type), _AGENT.c.feedback),
    )
    for status in _FINISHED_STATUSES
}
_SET_HOLDOUT = (
    update(_AGENT)
    .where(_AGENT.c.id == bindparam("agent_id"))
    .values(holdout_score=bindparam("holdout_score"), updated_at=bindparam("now"))
    .returning(*_AGENT.c)
)
_DELETE_STALE_EVALUATIONS = delete(_EVALUATION).where(
    _EVALUATION.c.agent_id == bindparam("agent_id"), _EVALUATION.c.split != "holdout"
)
_DELETE_HOLDOUT_EVALUATIONS = delete(_EVALUATION).where(
    _EVALUATION.c.agent_id == bindparam("agent_id"), _EVALUATION.c.split == "holdout"
)
_INSERT_EVALUATION = insert(_EVALUATION)
_INSERT_GENOME_FILE = insert(_GENOME_FILE)


def _parent_in_run(name: str) -> Any:
    parent = bindparam(name, type_=_AGENT.c.parent_id.type)
    same_run = core_select(_AGENT.c.id).where(_AGENT.c.id == parent, _AGENT.c.run_id == bindparam("run_id"))
    return or_(parent.is_(None), same_run.exists())


# INSERT ... SELECT ... WHERE run and parents check out: the checks cost no extra statement;
# when it inserts nothing, `_explain_refused_agent` reads why.
_INSERT_AGENT = (
    insert(_AGENT)
    .from_select(
        list(_AGENT_VALUE_COLUMNS),
        core_select(*(bindparam(name, type_=_AGENT.c[name].type) for name in _AGENT_VALUE_COLUMNS)).where(
            core_select(_RUN.c.id).where(_RUN.c.id == bindparam("run_id")).exists(),
            _parent_in_run("parent_id"),
            _parent_in_run("second_parent_id"),
        ),
    )
    .returning(_AGENT.c.id)
)
_SELECT_AGENT = core_select(_AGENT).where(_AGENT.c.id == bindparam("agent_id"))
_SELECT_STATUS = core_select(_AGENT.c.status).where(_AGENT.c.id == bindparam("agent_id"))
_SELECT_RUN_ID = core_select(_RUN.c.id).where(_RUN.c.id == bindparam("run_id"))
_FIND_GENOME = (
    core_select(_AGENT)
    .where(_AGENT.c.run_id == bindparam("run_id"), _AGENT.c.genome_hash == bindparam("genome_hash"))
    .order_by(_AGENT.c.id)
    .limit(1)
)
_RECENT_INVALID_CHILDREN = (
    core_select(_AGENT)
    .where(_AGENT.c.parent_id == bindparam("agent_id"), _AGENT.c.status == AgentStatus.invalid)
    .order_by(_AGENT.c.id.desc())
    .limit(bindparam("n"))
)
_SELECT_GENOME = (
    core_select(_GENOME.c.entry, _GENOME_FILE.c.path, _GENOME_FILE.c.text)
    .select_from(_GENOME.outerjoin(_GENOME_FILE, _GENOME_FILE.c.genome_hash == _GENOME.c.hash))
    .where(_GENOME.c.hash == bindparam("hash"))
    .order_by(_GENOME_FILE.c.path)
)


def genome_hash(files: Mapping[str, str]) -> str:
    """sha256 hex digest (64 chars) of the sorted (path, text) pairs.

    The pairs are JSON-encoded, so two different genomes never encode to the same bytes
    (plain concatenation would let {"a": "bc"} and {"ab": "c"} collide).
    """
    pairs = sorted((str(path), str(text)) for path, text in files.items())
    encoded = json.dumps(pairs, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    return hashlib.sha256(encoded).hexdigest()


def check_genome_paths(files: Mapping[str, str], entry: str) -> None:
    """Raise InvalidGenome unless every path is relative, inside the genome, and `entry` is one."""
    if not files:
        raise InvalidGenome("a genome needs at least one file", fix="pass the agent's files")
    for path in files:
        parts = Path(path).parts
        if not path or path.startswith(("/", "\\")) or ".." in parts or "\\" in path or ":" in path:
            raise InvalidGenome(
                f"genome path {path!r} is not a plain relative path",
                fix="use forward-slash paths inside the agent folder, without '..', drive letters or a leading '/'",
            )
    if entry not in files:
        raise InvalidGenome(
            f"entry file {entry!r} is not among the genome's files {sorted(files)}",
            fix="set entry to the relative path of one of the agent's files",
        )


def _configure_sqlite(engine: Engine, *, readonly: bool) -> None:
    """Per-connection pragmas, and BEGIN issued by us so writers can take the lock up front.

    A reader's connections set only the busy timeout: journal_mode=WAL would be a write on a
    file not yet in WAL mode, and the writer sets it anyway.
    """
    busy_timeout = f"busy_timeout={int(_BUSY_TIMEOUT_S * 1000)}"
    writer = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON")
    pragmas = (busy_timeout,) if readonly else (busy_timeout, *writer)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver's own implicit BEGIN would start transactions only at the first write,
        # after our status checks had read: isolation_level=None hands BEGIN to `_on_begin`.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            _pragma(cursor, pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        write = connection.get_execution_options().get("cambrian_write", False)
        # Straight to the driver: SQLAlchemy's statement machinery would double the cost
        # of a short transaction, and BEGIN needs none of it.
        connection.connection.driver_connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")


def _pragma(cursor: Any, pragma: str) -> None:
    """Run one PRAGMA, retrying while another process holds the lock it needs, up to the busy timeout.

    `journal_mode=WAL` on a file another process is creating needs that process's lock, and SQLite
    answers "database is locked" at once rather than calling the busy handler (measured: one of three
    processes opening a new archive together failed this way about once in six rounds).
    """
    deadline = time.monotonic() + _BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute(f"PRAGMA {pragma}")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _read_only_sqlite_url(url: URL, *, in_memory: bool) -> URL:
    """`url` opened with SQLite's mode=ro; ArchiveNotFound when its file does not exist.

    Why mode=ro rather than PRAGMA query_only: SQLite then cannot write the file at all
    (query_only still lets `PRAGMA journal_mode=DELETE` change it, and a query_only connection
    closing last checkpoints the WAL into it), and it refuses a missing file instead of creating
    one. Measured against a live WAL writer (committing continuously, closing and reopening, and
    creating the file while readers polled it): zero errors on either side. A mode=ro reader may
    create an empty -wal/-shm beside the file (the WAL index must live somewhere); it never
    takes the write lock.
    """
    if in_memory:
        raise NotAnArchive(
            "an in-memory database opened read-only is always empty",
            fix="open an archive file read-only, or open the in-memory database without readonly=True",
        )
    database = url.database or ""
    if database.startswith("file:"):  # already a URI filename (uri=true): add the mode
        return url.update_query_dict({"mode": "ro"})
    path = Path(database).expanduser().resolve()
    if not path.is_file():
        raise ArchiveNotFound(
            f"no archive file at {path}",
            fix="check the path: a run's archive is RUNS_DIR/<run>/archive.db (`cambrian runs` lists them); "
            "a read-only open never creates one, a writable open (`cambrian run`) does",
        )
    return url.set(database=f"file:{quote(str(path))}", query={**url.query, "mode": "ro", "uri": "true"})


def _no_agent(agent_id: int) -> AgentNotFound:
    return AgentNotFound(f"no agent with id {agent_id}", fix="list a run's agents with `cambrian tree RUN`")


def _explain_refused_transition(connection: Connection, agent_id: int, new: AgentStatus) -> ArchiveError:
    """Why a guarded UPDATE changed no row: the agent is missing, or its status forbids `new`."""
    current = connection.execute(_SELECT_STATUS, {"agent_id": agent_id}).scalar()
    if current is None:
        return _no_agent(agent_id)
    allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "none (final)"
    return InvalidTransition(
        f"agent {agent_id}: cannot go from {current.value} to {new.value} (allowed: {allowed})",
        fix="re-read the agent (`cambrian show RUN AGENT`); another worker may have changed it",
    )


def _explain_refused_agent(connection: Connection, run_id: int, parents: Sequence[int | None]) -> ArchiveError:
    """Why the guarded agent INSERT inserted nothing: the run is missing, or a parent is not in it."""
    if connection.execute(_SELECT_RUN_ID, {"run_id": run_id}).first() is None:
        return RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
    for parent in parents:
        row = connection.execute(_SELECT_AGENT, {"agent_id": parent}).first() if parent is not None else None
        if parent is not None and (row is None or row.run_id != run_id):
            return AgentNotFound(
                f"parent agent {parent} is not an agent of run {run_id}", fix="choose parents from this run's archive"
            )
    # Unreachable while the write lock is held: the INSERT's guard checks exactly these rows.
    return AgentNotFound(f"parents {list(parents)} of run {run_id} changed while storing an agent", fix="retry")


class Archive(LedgerMixin):
    """The lineage store of runs, agents, genomes, evaluations and the FM ledger."""

    def __init__(self, url: str, *, readonly: bool = False) -> None:
        """Open the database at SQLAlchemy `url`; a writable open creates or upgrades its schema.

        The schema step (archive/schema.py) runs no DDL on an archive at the current version;
        `schema` says what it found and did. ArchiveTooNew for an archive newer than this code.
        readonly: for browsing an archive a search may be writing: no DDL, no write lock, and
        every write raises ArchiveReadOnly; ArchiveNotFound when the file does not exist (it
        is not created), ArchiveOutdated when its schema is older (`cambrian db upgrade RUN`).
        For SQLite a writable open creates the parent folder, and its connections get WAL
        journaling, synchronous=NORMAL and foreign keys on; every connection a 10 s busy timeout.
        """
        self.url = url
        self._readonly = readonly
        parsed = make_url(url)
        self._sqlite = parsed.get_backend_name() == "sqlite"
        where = parsed.render_as_string(hide_password=True)
        options: dict[str, Any] = {}
        if self._sqlite:
            database = parsed.database or ""
            in_memory = database in ("", ":memory:") or parsed.query.get("mode") == "memory"
            if not in_memory and not database.startswith("file:"):
                where = str(Path(database).expanduser())
            if readonly:
                # SQLite enforces it too; elsewhere (PostgreSQL) the guard in `_transaction`/`_write` does.
                parsed = _read_only_sqlite_url(parsed, in_memory=in_memory)
            elif in_memory:
                # One shared connection, or each connection would see its own empty database.
                options["poolclass"] = StaticPool
            elif not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            options["connect_args"] = {"check_same_thread": False}
        self._where = where
        self._engine: Engine = create_engine(parsed, **options)
        if self._sqlite:
            _configure_sqlite(self._engine, readonly=readonly)
        # Write sessions take the SQLite write lock up front (BEGIN IMMEDIATE), so a
        # read-check-write such as a status transition cannot interleave with another process.
        self._write_engine = self._engine.execution_options(cambrian_write=True)
        dialect = self._engine.dialect.name
        self._insert_genome = insert_ignore_statement(_GENOME, dialect)
        self._insert_response = insert_ignore_statement(LLMResponse.__table__, dialect)  # type: ignore[attr-defined]
        # The Core path's own connection, kept open (a pool checkout per call costs as much
        # as the statement). The lock lets any thread use it, one transaction at a time.
        self._connection: Connection | None = None
        self._connection_lock = threading.RLock()
        try:
            self.schema: SchemaReport = open_schema(
                self._transaction, readonly=readonly, where=where, wait_for_creator_s=_BUSY_TIMEOUT_S
            )
        except BaseException:
            self.close()
            raise

    @classmethod
    def at(cls, path: Path, *, readonly: bool = False) -> Archive:
        """Open the SQLite archive file at `path` (e.g. runs/<name>/archive.db); readonly as in `Archive(...)`."""
        return cls(f"sqlite:///{Path(path).expanduser().resolve()}", readonly=readonly)

    @property
    def readonly(self) -> bool:
        """True when opened with readonly=True: every write raises ArchiveReadOnly."""
        return self._readonly

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for bulk tools (benchmarks, migrations); everything else uses the methods."""
        return self._engine

    def close(self) -> None:
        """Close every connection (a later call would open new ones)."""
        with self._connection_lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        self._engine.dispose()

    def __enter__(self) -> Archive:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Archive({self._engine.url.render_as_string(hide_password=True)!r})"

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[Connection]:
        """One Core transaction on the archive's connection: commits on success, rolls back on any exception.

        `write=True` begins with the write lock taken (BEGIN IMMEDIATE on SQLite). Not
        re-entrant: a method inside a transaction must not call another that opens one.
        """
        if write and self._readonly:
            raise self._refuse_write()
        with self._connection_lock:
            connection = self._connection
            if connection is None or connection.closed or connection.invalidated:
                connection = self._connection = self._engine.connect()
            connection.execution_options(cambrian_write=write)
            with connection.begin():
                yield connection

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._engine, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """One ORM transaction: commits on success, rolls everything back on any exception."""
        if self._readonly:
            raise self._refuse_write()
        with Session(self._write_engine, expire_on_commit=False) as session, session.begin():
            yield session

    def _refuse_write(self) -> ArchiveReadOnly:
        return ArchiveReadOnly(
            f"the archive {self._where} is open read-only: it stores and changes nothing",
            fix="open it without readonly=True (in the CLI only `run`, `resume`, `eval` and `db upgrade` write)",
        )

    # ----- runs -----

    def create_run(self, *, name: str, benchmark: str, seed: int, config_json: str, cambrian_version: str = "") -> Run:
        """Store a new run (status running). RunExists if `name` is taken."""
        with self._write() as session:
            if session.exec(select(Run.id).where(Run.name == name)).first() is not None:
                raise RunExists(
                    f"a run named {name!r} already exists",
                    fix=f"continue it with `cambrian resume {name}`, or pick another --name",
                )
            run = Run(
                name=name, benchmark=benchmark, seed=seed, config_json=config_json, cambrian_version=cambrian_version
            )
            session.add(run)
        return run

    def get_run(self, name_or_id: str | int) -> Run:
        """The run with this name, or else with this numeric id. RunNotFound otherwise."""
        with self._read() as session:
            run = session.exec(select(Run).where(Run.name == str(name_or_id))).first()
            if run is None and str(name_or_id).isdigit():
                run = session.get(Run, int(name_or_id))
        if run is None:
            raise RunNotFound(
                f"no run named {name_or_id!r} in {self!r}", fix="list the stored runs with `cambrian runs`"
            )
        return run

    def list_runs(self) -> list[Run]:
        """Every run, oldest first."""
        with self._read() as session:
            return list(session.exec(select(Run).order_by(Run.id)))

    def set_run_status(self, run_id: int, status: RunStatus, error: str | None = None) -> Run:
        """Set a run's status (and error text, None to clear it)."""
        with self._write() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
            run.status, run.error, run.updated_at = RunStatus(status), error, utcnow()
            session.add(run)
        return run

    def update_run_config(self, run_id: int, config_json: str) -> Run:
        """Replace a run's frozen config (e.g. `cambrian resume` with a larger budget)."""
        with self._write() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
            run.config_json, run.updated_at = config_json, utcnow()
            session.add(run)
        return run

    # ----- genomes -----

    def _put_genome(self, connection: Connection, files: Mapping[str, str], entry: str) -> str:
        check_genome_paths(files, entry)
        digest = genome_hash(files)
        n_bytes = sum(len(text.encode("utf-8")) for text in files.values())
        genome_row = {"hash": digest, "entry": entry, "n_files": len(files), "n_bytes": n_bytes, "created_at": utcnow()}
        # The files go in with the genome row, in the same transaction, so a stored genome
        # row always has all its files: an existing row means nothing more to write.
        if insert_ignore(connection, self._insert_genome, _GENOME, genome_row):
            file_rows = [{"genome_hash": digest, "path": path, "text": text} for path, text in files.items()]
            connection.execute(_INSERT_GENOME_FILE, file_rows if len(file_rows) > 1 else file_rows[0])
        return digest

    def put_genome(self, files: Mapping[str, str], entry: str) -> str:
        """Store a genome and return its hash; storing an existing genome changes nothing."""
        with self._transaction(write=True) as connection:
            return self._put_genome(connection, files, entry)

    def get_genome(self, hash: str) -> tuple[dict[str, str], str]:
        """(files: path -> text, entry path) of the genome with this hash."""
        with self._transaction(write=False) as connection:
            rows = connection.execute(_SELECT_GENOME, {"hash": hash}).all()
        if not rows:
            raise GenomeNotFound(
                f"no genome with hash {hash!r}", fix="check the agent's genome_hash (`cambrian show RUN AGENT`)"
            )
        return {row.path: row.text for row in rows if row.path is not None}, rows[0].entry

    # ----- agents: lifecycle (one transaction per status change) -----

    def add_agent(
        self,
        run_id: int,
        *,
        files: Mapping[str, str] | None = None,
        entry: str | None = None,
        parent_id: int | None = None,
        second_parent_id: int | None = None,
        operator: str = "seed",
        model: str | None = None,
        iteration: int = 0,
        status: AgentStatus = AgentStatus.proposed,
        invalid_reason: str | None = None,
        feedback: str | None = None,
        prompt_tokens: int = 0,
        completion_tokens: int = 0,
        cost_usd: float = 0.0,
        link_llm_calls: bool = False,
        repair_note: str | None = None,
    ) -> Agent:
        """Store an agent and its genome (if `files`) in one transaction.

        `status` is proposed, or invalid for a proposal that failed before evaluation (then
        `files` may be None and `invalid_reason` says why). Parents must be agents of the run.
        link_llm_calls: in the same transaction, attribute the run's unattributed FM calls of
        `iteration` to the new agent (the proposer calls the FM before the agent exists).
        repair_note: what the static check repaired in the child before evaluation (e.g.
        "added `import math`"); None when nothing.
        """
        status = AgentStatus(status)
        if status not in _NEW_AGENT_STATUSES:
            raise InvalidTransition(
                f"a new agent starts as proposed or invalid, not {status.value}",
                fix="add it as proposed, then mark_evaluating and finish_evaluation",
            )
        if files is not None and entry is None:
            raise InvalidGenome("files were given without an entry file", fix="pass entry=<relative path>")
        now = utcnow()
        values: dict[str, Any] = {
            "run_id": run_id, "genome_hash": None, "parent_id": parent_id, "second_parent_id": second_parent_id,
            "iteration": iteration, "operator": operator, "model": model, "status": status, "score": None,
            "holdout_score": None, "stage_reached": 0, "n_tasks": 0, "invalid_reason": invalid_reason,
            "feedback": feedback, "eval_attempts": 0, "eval_seconds": None, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "cost_usd": cost_usd, "created_at": now, "updated_at": now,
            "repair_note": repair_note,
        }  # fmt: skip
        with self._transaction(write=True) as connection:
            if files is not None:
                values["genome_hash"] = self._put_genome(connection, files, entry)  # type: ignore[arg-type]
            agent_id = connection.execute(_INSERT_AGENT, values).scalar()
            if agent_id is None:
                raise _explain_refused_agent(connection, run_id, (parent_id, second_parent_id))
            if link_llm_calls:
                self._link_llm_calls(connection, run_id, iteration=iteration, agent_id=agent_id)
        return detached(Agent, {"id": agent_id, **values})

    def mark_evaluating(self, agent_id: int) -> Agent:
        """proposed/failed/evaluating -> evaluating; counts one more evaluation attempt."""
        with self._transaction(write=True) as connection:
            row = connection.execute(_MARK_EVALUATING, {"agent_id": agent_id, "now": utcnow()}).first()
            if row is None:
                raise _explain_refused_transition(connection, agent_id, AgentStatus.evaluating)
        return detached(Agent, row._mapping)

    def finish_evaluation(
        self,
        agent_id: int,
        *,
        status: AgentStatus,
        score: float | None = None,
        stage_reached: int = 0,
        invalid_reason: str | None = None,
        feedback: str | None = None,
        eval_seconds: float | None = None,
        evaluations: Sequence[Evaluation] = (),
        descriptor: Mapping[str, float] | None = None,
    ) -> Agent:
        """evaluating -> evaluated | invalid | failed, with the task rows, in one transaction.

        The given Evaluation rows are copied (agent_id filled in); they replace the rows of
        an earlier attempt, except holdout rows. `evaluated` needs a finite `score`.
        `n_tasks` becomes len(evaluations); `feedback=None` keeps the agent's feedback as is.
        descriptor: the agent's behaviour features (name -> finite value), stored with it.
        """
        status = AgentStatus(status)
        if status not in _FINISHED_STATUSES:
            raise InvalidTransition(
                f"finish_evaluation ends in evaluated, invalid or failed, not {status.value}",
                fix="use mark_evaluating to (re)start an evaluation",
            )
        if status is AgentStatus.evaluated and (score is None or not math.isfinite(score)):
            raise InvalidTransition(
                f"agent {agent_id}: evaluated needs a finite score, got {score!r}",
                fix="finish as invalid (with the reason) when the benchmark produced no usable score",
            )
        params = {
            "agent_id": agent_id, "now": utcnow(), "score": score, "stage_reached": stage_reached,
            "invalid_reason": invalid_reason, "eval_seconds": eval_seconds, "n_tasks": len(evaluations),
            "feedback": feedback,
        }  # fmt: skip
        with self._transaction(write=True) as connection:
            row = connection.execute(_FINISH[status], params).first()
            if row is None:
                raise _explain_refused_transition(connection, agent_id, status)
            # Only a finished earlier attempt left task rows, and every attempt after the
            # first passed mark_evaluating again: on the first attempt there is nothing to delete.
            if row.eval_attempts > 1:
                connection.execute(_DELETE_STALE_EVALUATIONS, {"agent_id": agent_id})
                connection.execute(delete(_DESCRIPTOR).where(_DESCRIPTOR.c.agent_id == agent_id))
            self._insert_evaluations(connection, agent_id, evaluations)
            features = [
                {"agent_id": agent_id, "name": name, "value": float(value)}
                for name, value in (descriptor or {}).items()
                if math.isfinite(value)
            ]
            if features:
                connection.execute(insert(_DESCRIPTOR), features)
        return detached(Agent, row._mapping)

    def mark_failed(self, agent_id: int, reason: str) -> Agent:
        """evaluating -> failed (an infrastructure fault; retried). `reason` goes to invalid_reason."""
        with self._transaction(write=True) as connection:
            row = connection.execute(_MARK_FAILED, {"agent_id": agent_id, "now": utcnow(), "reason": reason}).first()
            if row is None:
                raise _explain_refused_transition(connection, agent_id, AgentStatus.failed)
        return detached(Agent, row._mapping)

    def set_holdout_score(self, agent_id: int, score: float, *, evaluations: Sequence[Evaluation] = ()) -> Agent:
        """Record an agent's holdout score (never read by selection), with its holdout task rows.

        The rows of an earlier holdout evaluation are replaced, so the rows always explain the score.
        """
        with self._transaction(write=True) as connection:
            params = {"agent_id": agent_id, "now": utcnow(), "holdout_score": score}
            row = connection.execute(_SET_HOLDOUT, params).first()
            if row is None:
                raise _no_agent(agent_id)
            connection.execute(_DELETE_HOLDOUT_EVALUATIONS, {"agent_id": agent_id})
            self._insert_evaluations(connection, agent_id, evaluations, split="holdout")
        return detached(Agent, row._mapping)

    @staticmethod
    def _insert_evaluations(
        connection: Connection, agent_id: int, evaluations: Sequence[Evaluation], *, split: str | None = None
    ) -> None:
        """Copies of `evaluations` for `agent_id` (and `split`, if given); the caller's objects stay as they are."""
        rows = [{name: getattr(e, name) for name in _EVALUATION_VALUE_COLUMNS} for e in evaluations]
        for row in rows:
            row["agent_id"] = agent_id
            if split is not None:
                row["split"] = split
        if rows:
            # A list runs as one executemany; a single row skips that machinery.
            connection.execute(_INSERT_EVALUATION, rows if len(rows) > 1 else rows[0])

    # ----- agents: queries -----

    def get_agent(self, agent_id: int) -> Agent:
        """The agent with this id; AgentNotFound otherwise."""
        with self._transaction(write=False) as connection:
            row = connection.execute(_SELECT_AGENT, {"agent_id": agent_id}).first()
        if row is None:
            raise _no_agent(agent_id)
        return detached(Agent, row._mapping)

    def agents(self, run_id: int, *, status: AgentStatus | Sequence[AgentStatus] | None = None) -> list[Agent]:
        """The run's agents ordered by id, optionally only those with `status` (one or several)."""
        query = select(Agent).where(Agent.run_id == run_id)
        if status is not None:
            wanted = [status] if isinstance(status, (str, AgentStatus)) else list(status)
            query = query.where(Agent.status.in_([AgentStatus(s) for s in wanted]))  # type: ignore[attr-defined]
        with self._read() as session:
            return list(session.exec(query.order_by(Agent.id)))

    def children(self, agent_id: int) -> list[Agent]:
        """Agents whose (first) parent is `agent_id`, ordered by id."""
        with self._read() as session:
            return list(session.exec(select(Agent).where(Agent.parent_id == agent_id).order_by(Agent.id)))

    def ancestors(self, agent_id: int) -> list[Agent]:
        """The agent's first-parent chain: its parent first, up to the root (empty for a seed)."""
        self.get_agent(agent_id)
        chain = select(Agent.id, Agent.parent_id, literal(0).label("depth")).where(Agent.id == agent_id)
        chain = chain.cte("chain", recursive=True)
        step = select(Agent.id, Agent.parent_id, (chain.c.depth + 1).label("depth")).join(
            chain, Agent.id == chain.c.parent_id
        )
        chain = chain.union_all(step)
        query = select(Agent).join(chain, Agent.id == chain.c.id).where(chain.c.depth > 0).order_by(chain.c.depth)
        with self._read() as session:
            return list(session.exec(query))

    def subtree(self, agent_id: int) -> list[Agent]:
        """The agent and all its (first-parent) descendants, ordered by id."""
        self.get_agent(agent_id)
        tree = select(Agent.id).where(Agent.id == agent_id).cte("tree", recursive=True)
        tree = tree.union_all(select(Agent.id).join(tree, Agent.parent_id == tree.c.id))
        with self._read() as session:
            return list(session.exec(select(Agent).join(tree, Agent.id == tree.c.id).order_by(Agent.id)))

    def best(self, run_id: int, n: int = 1) -> list[Agent]:
        """Up to `n` evaluated agents, best score first; ties go to the lower id."""
        query = (
            select(Agent)
            .where(Agent.run_id == run_id, Agent.status == AgentStatus.evaluated)
            .order_by(Agent.score.desc(), Agent.id)  # type: ignore[union-attr]
            .limit(n)
        )
        with self._read() as session:
            return list(session.exec(query))

    def best_path(self, run_id: int) -> list[Agent]:
        """The lineage root ... the best agent (empty when nothing is evaluated yet)."""
        best = self.best(run_id, 1)
        if not best:
            return []
        return [*reversed(self.ancestors(best[0].id)), best[0]]

    def pending(self, run_id: int, *, max_attempts: int) -> list[Agent]:
        """Agents to (re)evaluate, by id: proposed, evaluating, and failed with attempts left."""
        query = select(Agent).where(
            Agent.run_id == run_id,
            or_(
                Agent.status.in_([AgentStatus.proposed, AgentStatus.evaluating]),  # type: ignore[attr-defined]
                (Agent.status == AgentStatus.failed) & (Agent.eval_attempts < max_attempts),
            ),
        )
        with self._read() as session:
            return list(session.exec(query.order_by(Agent.id)))

    def iterations_done(self, run_id: int) -> int:
        """How many iterations the search made a proposal in (iteration > 0), whatever became of it.

        An iteration whose child was rejected as a near-duplicate and re-proposed counts once.
        """
        query = select(func.count(func.distinct(Agent.iteration))).where(Agent.run_id == run_id, Agent.iteration > 0)
        with self._read() as session:
            return session.exec(query).one()

    def max_iteration(self, run_id: int) -> int:
        """The highest iteration number stored for the run (0 with only seeds or nothing)."""
        with self._read() as session:
            return session.exec(select(func.max(Agent.iteration)).where(Agent.run_id == run_id)).one() or 0

    def find_genome(self, run_id: int, genome_hash: str) -> Agent | None:
        """The earliest agent of the run with this genome, or None (the duplicate gate)."""
        with self._transaction(write=False) as connection:
            row = connection.execute(_FIND_GENOME, {"run_id": run_id, "genome_hash": genome_hash}).first()
        return None if row is None else detached(Agent, row._mapping)

    def evaluations(self, agent_id: int) -> list[Evaluation]:
        """The agent's task rows, in the order they were written."""
        with self._read() as session:
            return list(session.exec(select(Evaluation).where(Evaluation.agent_id == agent_id).order_by(Evaluation.id)))

    def recent_invalid_children(self, agent_id: int, n: int) -> list[Agent]:
        """Up to `n` invalid children of the agent, newest first (what recent edits got wrong)."""
        with self._transaction(write=False) as connection:
            rows = connection.execute(_RECENT_INVALID_CHILDREN, {"agent_id": agent_id, "n": n}).all()
        return [detached(Agent, row._mapping) for row in rows]

    def search_task_results(self, run_id: int) -> list[tuple[int, str, float, bool, bool]]:
        """(agent_id, task_id, score, passed, executed) of every search-split task run of the run's
        evaluated agents, by agent id: what behaviour vectors and HGM's pooled task counts are built from."""
        query = (
            core_select(_EVALUATION.c.agent_id, _EVALUATION.c.task_id, _EVALUATION.c.score,
                        _EVALUATION.c.passed, _EVALUATION.c.executed)
            .join(_AGENT, _AGENT.c.id == _EVALUATION.c.agent_id)
            .where(_AGENT.c.run_id == run_id, _AGENT.c.status == AgentStatus.evaluated,
                   _EVALUATION.c.split == "search")
            .order_by(_EVALUATION.c.agent_id, _EVALUATION.c.id)
        )  # fmt: skip
        with self._transaction(write=False) as connection:
            return [(int(r[0]), str(r[1]), float(r[2]), bool(r[3]), bool(r[4])) for r in connection.execute(query)]

    def descriptors(self, run_id: int) -> dict[int, dict[str, float]]:
        """agent id -> its stored behaviour features, for the run's evaluated agents."""
        query = (
            core_select(_DESCRIPTOR.c.agent_id, _DESCRIPTOR.c.name, _DESCRIPTOR.c.value)
            .join(_AGENT, _AGENT.c.id == _DESCRIPTOR.c.agent_id)
            .where(_AGENT.c.run_id == run_id, _AGENT.c.status == AgentStatus.evaluated)
        )
        features: dict[int, dict[str, float]] = {}
        with self._transaction(write=False) as connection:
            for agent_id, name, value in connection.execute(query):
                features.setdefault(int(agent_id), {})[str(name)] = float(value)
        return features

    def view(self, run_id: int) -> ArchiveView:
        """The run's evaluated agents as numpy columns, with evaluated-children counts.

        One indexed query; the children are counted in numpy (a self-join in SQL lets SQLite pick a
        quadratic plan: a minute at 10k agents).
        """
        query = (
            select(Agent.id, Agent.score, Agent.parent_id)
            .where(Agent.run_id == run_id, Agent.status == AgentStatus.evaluated)
            .order_by(Agent.id)
        )
        with self._read() as session:
            rows = session.exec(query).all()
        ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
        scores = np.fromiter((r[1] for r in rows), dtype=np.float64, count=len(rows))
        parents = np.fromiter((NO_PARENT if r[2] is None else r[2] for r in rows), dtype=np.int64, count=len(rows))
        return ArchiveView.from_arrays(ids, scores, parent_ids=parents)
