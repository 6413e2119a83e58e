"""`Archive`: the lineage store over any SQLAlchemy URL (SQLite in WAL mode by default).

Every state change is one transaction, so a kill at any instant loses only what was not
yet committed and never leaves half a change; `write_batch` (`_batch`) commits several
lifecycle changes in one, each still whole. Returned rows are detached copies: read their
attributes freely after the call.

The per-candidate path (add_agent, mark_evaluating, finish_evaluation, get_agent, agent_context,
the FM ledger) runs prebuilt SQLAlchemy Core statements (`_statements`), compiled once per dialect
and run on the DBAPI cursor of the archive's own connection (`_prepared`): the ORM's session and
unit of work, and even Core's per-call execution machinery, cost several times what SQLite does,
and the loop pays them for every candidate. The rest lives beside this module, one idea each:
opening the database (`_engine`), the read queries over lineage and results (`_queries`,
ORM for readability), the FM ledger (`ledger`), genome hashing (`genomes`).

Opening runs no DDL unless the schema is missing or older than this code: archive/schema.py
creates or upgrades it in one guarded transaction (Alembic revisions, archive/migrations). On
PostgreSQL every public method rides out a server restart: archive/_retry.py says how, and why a
repeated call can neither lose nor double a write. `readonly=True` opens for browsing an
archive a search may be writing: no DDL, no write lock, no write at all.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlmodel import Session, col, delete, select

from cambrian.archive._batch import BatchMixin
from cambrian.archive._engine import BUSY_TIMEOUT_S, COMMIT_KEY, CommitCheck, open_engine, unreachable
from cambrian.archive._lost_commit import committed, forget_old_marks
from cambrian.archive._queries import QueriesMixin
from cambrian.archive._retry import RECONNECT_S, Reconnector, corrupt, is_disconnect, retry_public_methods
from cambrian.archive._statements import (
    _DELETE_DESCRIPTORS,
    _DELETE_HOLDOUT_EVALUATIONS,
    _DELETE_STALE_EVALUATIONS,
    _EVALUATION_VALUE_COLUMNS,
    _FIND_GENOME,
    _FINISH,
    _FINISHED_STATUSES,
    _GENOME,
    _INSERT_AGENT,
    _INSERT_DESCRIPTOR,
    _INSERT_EVALUATION,
    _INSERT_GENOME_FILE,
    _MARK_EVALUATING,
    _MARK_FAILED,
    _NEW_AGENT_STATUSES,
    _RECENT_INVALID_CHILDREN,
    _SELECT_AGENT,
    _SELECT_GENOME,
    _SET_HOLDOUT,
    TRANSITIONS,
    explain_refused_agent,
    explain_refused_transition,
    no_agent,
)
from cambrian.archive.errors import (
    ArchiveReadOnly,
    GenomeNotFound,
    InvalidGenome,
    InvalidTransition,
    RunExists,
    RunNotFound,
)
from cambrian.archive.genomes import check_genome_paths, genome_hash
from cambrian.archive.ledger import (
    CostSummary,
    LedgerMixin,
    ModelCost,
    detached,
    insert_ignore,
    insert_ignore_statement,
)
from cambrian.archive.models import (
    Agent,
    AgentDescriptor,
    AgentStatus,
    Evaluation,
    GreedyAnswer,
    LLMCall,
    LLMRequest,
    LLMResponse,
    Run,
    RunStatus,
    utcnow,
)
from cambrian.archive.schema import SchemaReport, open_schema

__all__ = ["TRANSITIONS", "Archive", "CostSummary", "ModelCost", "check_genome_paths", "genome_hash"]


class Archive(BatchMixin, LedgerMixin, QueriesMixin):
    """The lineage store of runs, agents, genomes, evaluations and the FM ledger."""

    def __init__(self, url: str, *, readonly: bool = False, reconnect_s: float = RECONNECT_S) -> None:
        """Open the database at SQLAlchemy `url`; a writable open creates or upgrades its schema.

        The schema step (archive/schema.py) runs no DDL on an archive at the current version;
        `schema` says what it found and did. ArchiveTooNew for an archive newer than this code.
        readonly: for browsing an archive a search may be writing: no DDL, no write lock, and
        every write raises ArchiveReadOnly; ArchiveNotFound when the file does not exist (it
        is not created), ArchiveOutdated when its schema is older (`cambrian db upgrade RUN`).
        For SQLite a writable open creates the parent folder, and its connections get WAL
        journaling, synchronous=NORMAL and foreign keys on; every connection a 10 s busy timeout.
        For a database server (PostgreSQL), ArchiveUnreachable when it cannot be reached now; once
        open, a call that meets a disconnect reconnects and runs again for up to `reconnect_s` seconds.
        """
        self.url = url
        self._readonly = readonly
        self._engine, self._where, self._sqlite = open_engine(url, readonly=readonly)
        self._postgresql = self._engine.dialect.name == "postgresql"
        self._reconnector = Reconnector(where=self._where, deadline_s=reconnect_s, enabled=not self._sqlite)
        # Write sessions take the SQLite write lock up front (BEGIN IMMEDIATE), so a
        # read-check-write such as a status transition cannot interleave with another process.
        self._write_engine = self._engine.execution_options(cambrian_write=True)
        dialect = self._engine.dialect.name
        self._insert_genome = insert_ignore_statement(_GENOME, dialect)
        self._insert_response = insert_ignore_statement(LLMResponse.__table__, dialect)  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
        self._insert_request = insert_ignore_statement(LLMRequest.__table__, dialect)  # type: ignore[attr-defined]  # as above
        self._insert_greedy = insert_ignore_statement(GreedyAnswer.__table__, dialect)  # type: ignore[attr-defined]  # as above
        # The Core path's own connection, kept open (a pool checkout per call costs as much
        # as the statement). The lock lets any thread use it, one transaction at a time.
        self._connection: Connection | None = None
        self._connection_lock = threading.RLock()
        self._joined = None
        try:
            self.schema: SchemaReport = open_schema(
                self._transaction, readonly=readonly, where=self._where, wait_for_creator_s=BUSY_TIMEOUT_S
            )
        except DBAPIError as error:
            self.close()
            if self._sqlite:
                damaged = corrupt(error, self._where)
                if damaged is None:
                    raise
                raise damaged from None
            raise unreachable(error, self._where) from None
        except BaseException:
            self.close()
            raise
        if self._postgresql and not readonly:
            try:
                self._reconnector.call(forget_old_marks, self._transaction)
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
    def _transaction(self, *, write: bool, schema: bool = False) -> Iterator[Connection]:
        """One Core transaction on the archive's connection: commits on success, rolls back on any exception.

        `write=True` begins with the write lock taken (BEGIN IMMEDIATE on SQLite). `schema=True` (with
        write): the schema step's transaction, which leaves no commit mark on PostgreSQL. Not
        re-entrant: a method inside a transaction must not call another that opens one; only
        `write_batch` runs calls inside its own, which they join.
        """
        if write and self._readonly:
            raise self._refuse_write()
        joined = self._joined
        if joined is not None and joined[0] == threading.get_ident():
            yield joined[1]  # inside write_batch: this call's statements join the batch's transaction
            return
        with self._connection_lock:
            connection = self._connection
            if connection is None or connection.closed or connection.invalidated:
                connection = self._connection = self._engine.connect()
            connection.execution_options(cambrian_write="schema" if write and schema else write)
            if not (write and self._postgresql):
                with connection.begin():
                    yield connection
                return
            transaction = connection.begin()
            try:
                yield connection
            except BaseException:
                if transaction.is_active:
                    transaction.rollback()
                raise
            self._commit(transaction.commit, connection.info.pop(COMMIT_KEY, None))

    def _commit(self, commit: Callable[[], None], check: CommitCheck | None) -> None:
        """Commit; when the connection breaks during COMMIT, find out from the server whether it committed.

        Committed: return as if nothing happened (the caller's result stands). Not committed: raise the
        disconnect, so the call runs again (archive/_retry.py).
        """
        try:
            commit()
        except DBAPIError as error:
            if check is None or not is_disconnect(error):
                raise
            if not committed(
                self._engine, check, deadline_s=self._reconnector.deadline_s, gave_up=self._reconnector.gave_up
            ):
                raise

    @contextmanager
    def _read(self) -> Iterator[Session]:
        with Session(self._engine, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """One ORM transaction: commits on success, rolls everything back on any exception."""
        if self._readonly:
            raise self._refuse_write()
        with Session(self._write_engine, expire_on_commit=False) as session:
            if not self._postgresql:
                with session.begin():
                    yield session
                return
            session.begin()
            try:
                yield session
                check = session.connection().info.pop(COMMIT_KEY, None)
            except BaseException:
                session.rollback()
                raise
            self._commit(session.commit, check)

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
            try:
                session.flush()
            except IntegrityError:  # another process stored the name since our check (no lock up front here)
                raise RunExists(
                    f"a run named {name!r} already exists",
                    fix=f"continue it with `cambrian resume {name}`, or pick another --name",
                ) from None
        return run

    def get_run(self, name_or_id: str | int) -> Run:
        """The run with this name, or else with this numeric id. RunNotFound otherwise."""
        with self._read() as session:
            run = session.exec(select(Run).where(Run.name == str(name_or_id))).first()
            if run is None and str(name_or_id).isdigit():
                run = session.get(Run, int(name_or_id))
        if run is None:
            with self._read() as session:
                held = list(session.exec(select(Run.name).order_by(col(Run.id)).limit(6)))
            names = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
            raise RunNotFound(
                f"no run named {name_or_id!r} in {self._where}"
                + (f" (it holds {names}: was its folder renamed?)" if held else " (it holds no run)"),
                fix="list the stored runs with `cambrian runs`",
            )
        return run

    def list_runs(self) -> list[Run]:
        """Every run, oldest first."""
        with self._read() as session:
            return list(session.exec(select(Run).order_by(col(Run.id))))

    def set_run_status(self, run_id: int, status: RunStatus, error: str | None = None) -> Run:
        """Set a run's status (and error text, None to clear it)."""
        with self._write() as session:
            run = session.get(Run, run_id)
            if run is None:
                raise RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
            run.status, run.error, run.updated_at = RunStatus(status), error, utcnow()
            session.add(run)
        return run

    def delete_run(self, run_id: int) -> int:
        """Delete a run: its agents, their evaluations and descriptors, its FM ledger rows and the run row, in one
        transaction; returns how many agents went. Genomes and cached FM replies are content-addressed and may
        be shared with other runs of the store: they stay (a later run reuses them)."""
        with self._write() as session:
            if session.get(Run, run_id) is None:
                raise RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
            agents = select(Agent.id).where(col(Agent.run_id) == run_id)
            session.exec(delete(Evaluation).where(col(Evaluation.agent_id).in_(agents)))
            session.exec(delete(AgentDescriptor).where(col(AgentDescriptor.agent_id).in_(agents)))
            session.exec(delete(LLMCall).where(col(LLMCall.run_id) == run_id))
            gone = session.exec(delete(Agent).where(col(Agent.run_id) == run_id))
            session.exec(delete(Run).where(col(Run.id) == run_id))
            return int(gone.rowcount or 0)

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
            _INSERT_GENOME_FILE.run(connection, file_rows if len(file_rows) > 1 else file_rows[0])
        return digest

    def put_genome(self, files: Mapping[str, str], entry: str) -> str:
        """Store a genome and return its hash; storing an existing genome changes nothing."""
        with self._transaction(write=True) as connection:
            return self._put_genome(connection, files, entry)

    def get_genome(self, hash: str) -> tuple[dict[str, str], str]:
        """(files: path -> text, entry path) of the genome with this hash."""
        with self._transaction(write=False) as connection:
            return _read_genome(connection, hash)

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
        fm_seconds: float = 0.0,
    ) -> Agent:
        """Store an agent and its genome (if `files`) in one transaction.

        `status` is proposed; or evaluating for a child whose evaluation starts at once (as if
        `mark_evaluating` had followed in the same transaction: one evaluation attempt counted);
        or invalid for a proposal that failed before evaluation (then `files` may be None and
        `invalid_reason` says why). Parents must be agents of the run.
        link_llm_calls: in the same transaction, attribute the run's unattributed FM calls of
        `iteration` to the new agent (the proposer calls the FM before the agent exists).
        repair_note: what the static check repaired in the child before evaluation (e.g.
        "added `import math`"); None when nothing. fm_seconds: wall seconds of the FM calls that made it.
        """
        status = AgentStatus(status)
        if status not in _NEW_AGENT_STATUSES:
            raise InvalidTransition(
                f"a new agent starts as proposed, evaluating or invalid, not {status.value}",
                fix="add it as proposed, then mark_evaluating and finish_evaluation",
            )
        if files is not None and entry is None:
            raise InvalidGenome("files were given without an entry file", fix="pass entry=<relative path>")
        if status is AgentStatus.evaluating and files is None:
            raise InvalidTransition(
                "an agent can start as evaluating only with its program", fix="pass files= and entry="
            )
        now = utcnow()
        values: dict[str, Any] = {
            "run_id": run_id,
            "genome_hash": None,
            "parent_id": parent_id,
            "second_parent_id": second_parent_id,
            "iteration": iteration,
            "operator": operator,
            "model": model,
            "status": status,
            "score": None,
            "holdout_score": None,
            "stage_reached": 0,
            "n_tasks": 0,
            "invalid_reason": invalid_reason,
            "feedback": feedback,
            "eval_attempts": int(status is AgentStatus.evaluating),
            "eval_seconds": None,
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "cost_usd": cost_usd,
            "created_at": now,
            "updated_at": now,
            "repair_note": repair_note,
            "repeats": 1,
            "score_spread": None,
            "behaves_as": None,
            "fm_seconds": fm_seconds,
        }
        with self._transaction(write=True) as connection:
            if files is not None and entry is not None:  # files without an entry were refused above
                values["genome_hash"] = self._put_genome(connection, files, entry)
            agent_id = _INSERT_AGENT.run(connection, values).scalar()
            if agent_id is None:
                raise explain_refused_agent(connection, run_id, (parent_id, second_parent_id))
            if link_llm_calls:
                self._link_llm_calls(connection, run_id, iteration=iteration, agent_id=agent_id)
        return detached(Agent, {"id": agent_id, **values})

    def mark_evaluating(self, agent_id: int) -> Agent:
        """proposed/failed/evaluating -> evaluating; counts one more evaluation attempt."""
        with self._transaction(write=True) as connection:
            row = _MARK_EVALUATING.run(connection, {"agent_id": agent_id, "now": utcnow()}).first()
            if row is None:
                raise explain_refused_transition(connection, agent_id, AgentStatus.evaluating)
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
        repeats: int = 1,
        score_spread: float | None = None,
        behaves_as: int | None = None,
    ) -> Agent:
        """evaluating -> evaluated | invalid | failed, with the task rows, in one transaction.

        The given Evaluation rows are copied (agent_id filled in); they replace the rows of
        an earlier attempt, except holdout rows. `evaluated` needs a finite `score`.
        `n_tasks` becomes len(evaluations); `feedback=None` keeps the agent's feedback as is.
        descriptor: the agent's behaviour features (name -> finite value), stored with it.
        repeats: evaluations `score` is the mean of (>= 1); score_spread: their standard deviation.
        behaves_as: the parent whose outputs this agent repeats on every task (a behavioural no-op), or None.
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
            "agent_id": agent_id,
            "now": utcnow(),
            "score": score,
            "stage_reached": stage_reached,
            "invalid_reason": invalid_reason,
            "eval_seconds": eval_seconds,
            "n_tasks": len(evaluations),
            "feedback": feedback,
            "repeats": repeats,
            "score_spread": score_spread,
            "behaves_as": behaves_as,
        }
        with self._transaction(write=True) as connection:
            row = _FINISH[status].run(connection, params).first()
            if row is None:
                raise explain_refused_transition(connection, agent_id, status)
            # Only a finished earlier attempt left task rows, and every attempt after the
            # first passed mark_evaluating again: on the first attempt there is nothing to delete.
            if row.eval_attempts > 1:
                _DELETE_STALE_EVALUATIONS.run(connection, {"agent_id": agent_id})
                _DELETE_DESCRIPTORS.run(connection, {"agent_id": agent_id})
            self._insert_evaluations(connection, agent_id, evaluations)
            features = [
                {"agent_id": agent_id, "name": name, "value": float(value)}
                for name, value in (descriptor or {}).items()
                if math.isfinite(value)
            ]
            if features:
                _INSERT_DESCRIPTOR.run(connection, features if len(features) > 1 else features[0])
        return detached(Agent, row._mapping)

    def mark_failed(self, agent_id: int, reason: str) -> Agent:
        """evaluating -> failed (an infrastructure fault; retried). `reason` goes to invalid_reason."""
        with self._transaction(write=True) as connection:
            row = _MARK_FAILED.run(connection, {"agent_id": agent_id, "now": utcnow(), "reason": reason}).first()
            if row is None:
                raise explain_refused_transition(connection, agent_id, AgentStatus.failed)
        return detached(Agent, row._mapping)

    def set_holdout_score(self, agent_id: int, score: float, *, evaluations: Sequence[Evaluation] = ()) -> Agent:
        """Record an agent's holdout score (never read by selection), with its holdout task rows.

        The rows of an earlier holdout evaluation are replaced, so the rows always explain the score.
        """
        with self._transaction(write=True) as connection:
            params = {"agent_id": agent_id, "now": utcnow(), "holdout_score": score}
            row = _SET_HOLDOUT.run(connection, params).first()
            if row is None:
                raise no_agent(agent_id)
            _DELETE_HOLDOUT_EVALUATIONS.run(connection, {"agent_id": agent_id})
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
            _INSERT_EVALUATION.run(connection, rows if len(rows) > 1 else rows[0])

    # ----- agents: queries -----

    def get_agent(self, agent_id: int) -> Agent:
        """The agent with this id; AgentNotFound otherwise."""
        with self._transaction(write=False) as connection:
            row = _SELECT_AGENT.run(connection, {"agent_id": agent_id}).first()
        if row is None:
            raise no_agent(agent_id)
        return detached(Agent, row._mapping)

    def find_genome(self, run_id: int, genome_hash: str) -> Agent | None:
        """The earliest agent of the run with this genome, or None (the duplicate gate)."""
        with self._transaction(write=False) as connection:
            row = _FIND_GENOME.run(connection, {"run_id": run_id, "genome_hash": genome_hash}).first()
        return None if row is None else detached(Agent, row._mapping)

    def agent_context(
        self, agent_id: int, *, invalid_children: int = 0, known_genomes: Container[str] = ()
    ) -> AgentContext:
        """An agent, its genome (unless its hash is in `known_genomes`) and up to `invalid_children` of its
        newest invalid children, in one read transaction: what a prompt shows of a parent, for one read
        instead of three."""
        with self._transaction(write=False) as connection:
            row = _SELECT_AGENT.run(connection, {"agent_id": agent_id}).first()
            if row is None:
                raise no_agent(agent_id)
            genome = None
            if row.genome_hash is not None and row.genome_hash not in known_genomes:
                genome = _read_genome(connection, row.genome_hash)
            params = {"agent_id": agent_id, "n": invalid_children}
            children = _RECENT_INVALID_CHILDREN.run(connection, params).all() if invalid_children > 0 else ()
        return AgentContext(
            detached(Agent, row._mapping), genome, [detached(Agent, child._mapping) for child in children]
        )

    def recent_invalid_children(self, agent_id: int, n: int) -> list[Agent]:
        """Up to `n` invalid children of the agent, newest first (what recent edits got wrong)."""
        with self._transaction(write=False) as connection:
            rows = _RECENT_INVALID_CHILDREN.run(connection, {"agent_id": agent_id, "n": n}).all()
        return [detached(Agent, row._mapping) for row in rows]


class AgentContext(NamedTuple):
    """An agent with what a prompt shows of it (`Archive.agent_context`)."""

    agent: Agent
    genome: tuple[dict[str, str], str] | None  # (files, entry); None when known to the caller or never stored
    invalid_children: list[Agent]  # newest first


def _read_genome(connection: Connection, hash: str) -> tuple[dict[str, str], str]:
    """(files, entry) of the stored genome with this hash; GenomeNotFound otherwise."""
    rows = _SELECT_GENOME.run(connection, {"hash": hash}).all()
    if not rows:
        raise GenomeNotFound(
            f"no genome with hash {hash!r}", fix="check the agent's genome_hash (`cambrian show RUN AGENT`)"
        )
    return {row.path: row.text for row in rows if row.path is not None}, rows[0].entry


# Each public method is one unit of work: on a database server, a disconnect runs it again (archive/_retry.py).
retry_public_methods(Archive, reconnector="_reconnector", skip=frozenset({"close", "write_batch"}))
