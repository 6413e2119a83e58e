"""`Archive`: the lineage store over any SQLAlchemy URL (SQLite in WAL mode by default).

Every public method opens one short-lived session; every state change is one transaction,
so a kill at any instant loses only what was not yet committed and never leaves half a
change. Returned rows are detached copies: read their attributes freely after the call.
"""

from __future__ import annotations

import hashlib
import json
import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import Any, Iterator, Mapping, Sequence

from sqlalchemy import Engine, case, event, func, insert, literal, or_
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import make_url
from sqlalchemy.orm import aliased
from sqlalchemy.pool import StaticPool
from sqlmodel import Session, SQLModel, create_engine, select

from archive.errors import (
    AgentNotFound,
    GenomeNotFound,
    InvalidGenome,
    InvalidTransition,
    RunExists,
    RunNotFound,
)
from archive.models import (
    Agent,
    AgentStatus,
    Evaluation,
    Genome,
    GenomeFile,
    LLMCall,
    LLMResponse,
    Run,
    RunStatus,
    utcnow,
)
from archive.view import ArchiveView

#: Allowed agent status changes; anything else raises InvalidTransition.
TRANSITIONS: Mapping[AgentStatus, frozenset[AgentStatus]] = MappingProxyType({
    AgentStatus.proposed: frozenset({AgentStatus.evaluating, AgentStatus.invalid}),
    # evaluating -> evaluating: a killed run resumes an evaluation it had started.
    AgentStatus.evaluating: frozenset(
        {AgentStatus.evaluating, AgentStatus.evaluated, AgentStatus.invalid, AgentStatus.failed}
    ),
    AgentStatus.failed: frozenset({AgentStatus.evaluating}),  # retry after an infrastructure fault
    AgentStatus.evaluated: frozenset(),
    AgentStatus.invalid: frozenset(),
})

_NEW_AGENT_STATUSES = (AgentStatus.proposed, AgentStatus.invalid)
_FINISHED_STATUSES = (AgentStatus.evaluated, AgentStatus.invalid, AgentStatus.failed)


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


@dataclass(frozen=True)
class ModelCost:
    """FM usage of one model (or all models): calls, cache hits, tokens and USD."""

    calls: int = 0
    cache_hits: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


@dataclass(frozen=True)
class CostSummary(ModelCost):
    """A run's FM ledger summed, with `by_model` holding the same sums per model name."""

    by_model: dict[str, ModelCost] = field(default_factory=dict)


def _configure_sqlite(engine: Engine) -> None:
    """Per-connection pragmas, and BEGIN issued by us so writers can take the lock up front."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver's own implicit BEGIN would start transactions only at the first write,
        # after our status checks had read: isolation_level=None hands BEGIN to `_on_begin`.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in ("busy_timeout=10000", "journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON"):
            cursor.execute(f"PRAGMA {pragma}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        write = connection.get_execution_options().get("cambrian_write", False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def _insert_ignore(session: Session, model: type[SQLModel], row: dict[str, Any]) -> bool:
    """Insert `row` unless its primary key exists; True if it was inserted."""
    dialect = session.get_bind().dialect.name
    if dialect in ("sqlite", "postgresql"):
        insert_for = sqlite.insert if dialect == "sqlite" else postgresql.insert
        statement = insert_for(model).values(**row).on_conflict_do_nothing()
        return session.connection().execute(statement).rowcount == 1
    key = tuple(row[column.name] for column in model.__table__.primary_key.columns)  # type: ignore[attr-defined]
    if session.get(model, key if len(key) > 1 else key[0]) is not None:
        return False
    session.connection().execute(insert(model).values(**row))
    return True


def _check_transition(agent: Agent, new: AgentStatus) -> None:
    if new not in TRANSITIONS[agent.status]:
        allowed = ", ".join(sorted(s.value for s in TRANSITIONS[agent.status])) or "none (final)"
        raise InvalidTransition(
            f"agent {agent.id}: cannot go from {agent.status.value} to {new.value} (allowed: {allowed})",
            fix="re-read the agent (`cambrian show RUN AGENT`); another worker may have changed it",
        )


class Archive:
    """The lineage store of runs, agents, genomes, evaluations and the FM ledger."""

    def __init__(self, url: str) -> None:
        """Open (creating tables if needed) the database at SQLAlchemy `url`.

        For SQLite the parent folder is created and every connection gets WAL journaling,
        synchronous=NORMAL, foreign keys on and a 10 s busy timeout.
        """
        self.url = url
        parsed = make_url(url)
        self._sqlite = parsed.get_backend_name() == "sqlite"
        options: dict[str, Any] = {}
        if self._sqlite:
            database = parsed.database or ""
            in_memory = database in ("", ":memory:") or parsed.query.get("mode") == "memory"
            if in_memory:
                # One shared connection, or each connection would see its own empty database.
                options["poolclass"] = StaticPool
            elif not database.startswith("file:"):
                Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
            options["connect_args"] = {"check_same_thread": False}
        self._engine: Engine = create_engine(url, **options)
        if self._sqlite:
            _configure_sqlite(self._engine)
        # Write sessions take the SQLite write lock up front (BEGIN IMMEDIATE), so a
        # read-check-write such as a status transition cannot interleave with another process.
        self._write_engine = self._engine.execution_options(cambrian_write=True)
        SQLModel.metadata.create_all(self._engine)

    @classmethod
    def at(cls, path: Path) -> Archive:
        """Open the SQLite archive file at `path` (e.g. runs/<name>/archive.db)."""
        return cls(f"sqlite:///{Path(path).expanduser().resolve()}")

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine, for bulk tools (benchmarks, migrations); everything else uses the methods."""
        return self._engine

    def close(self) -> None:
        """Close every pooled connection (a later call would open new ones)."""
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
    def _read(self) -> Iterator[Session]:
        with Session(self._engine, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def _write(self) -> Iterator[Session]:
        """One transaction: commits on success, rolls everything back on any exception."""
        with Session(self._write_engine, expire_on_commit=False) as session, session.begin():
            yield session

    # ----- runs -----

    def create_run(
        self, *, name: str, benchmark: str, seed: int, config_json: str, cambrian_version: str = ""
    ) -> Run:
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

    def _put_genome(self, session: Session, files: Mapping[str, str], entry: str) -> str:
        check_genome_paths(files, entry)
        digest = genome_hash(files)
        n_bytes = sum(len(text.encode("utf-8")) for text in files.values())
        genome_row = {
            "hash": digest, "entry": entry, "n_files": len(files), "n_bytes": n_bytes, "created_at": utcnow()
        }
        # The files go in with the genome row, in the same transaction, so a stored genome
        # row always has all its files: an existing row means nothing more to write.
        if _insert_ignore(session, Genome, genome_row):
            file_rows = [{"genome_hash": digest, "path": path, "text": text} for path, text in files.items()]
            session.connection().execute(insert(GenomeFile), file_rows)
        return digest

    def put_genome(self, files: Mapping[str, str], entry: str) -> str:
        """Store a genome and return its hash; storing an existing genome changes nothing."""
        with self._write() as session:
            return self._put_genome(session, files, entry)

    def get_genome(self, hash: str) -> tuple[dict[str, str], str]:
        """(files: path -> text, entry path) of the genome with this hash."""
        with self._read() as session:
            genome = session.get(Genome, hash)
            if genome is None:
                raise GenomeNotFound(
                    f"no genome with hash {hash!r}", fix="check the agent's genome_hash (`cambrian show RUN AGENT`)"
                )
            rows = session.exec(select(GenomeFile).where(GenomeFile.genome_hash == hash).order_by(GenomeFile.path))
            return {row.path: row.text for row in rows}, genome.entry

    # ----- agents: lifecycle (one transaction per status change) -----

    def _agent_for_update(self, session: Session, agent_id: int) -> Agent:
        agent = session.exec(select(Agent).where(Agent.id == agent_id).with_for_update()).first()
        if agent is None:
            raise AgentNotFound(f"no agent with id {agent_id}", fix="list a run's agents with `cambrian tree RUN`")
        return agent

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
    ) -> Agent:
        """Store an agent and its genome (if `files`) in one transaction.

        `status` is proposed, or invalid for a proposal that failed before evaluation (then
        `files` may be None and `invalid_reason` says why). Parents must be agents of the run.
        """
        status = AgentStatus(status)
        if status not in _NEW_AGENT_STATUSES:
            raise InvalidTransition(
                f"a new agent starts as proposed or invalid, not {status.value}",
                fix="add it as proposed, then mark_evaluating and finish_evaluation",
            )
        if files is not None and entry is None:
            raise InvalidGenome("files were given without an entry file", fix="pass entry=<relative path>")
        with self._write() as session:
            digest = self._put_genome(session, files, entry) if files is not None else None
            if session.get(Run, run_id) is None:
                raise RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
            for parent in (parent_id, second_parent_id):
                found = session.get(Agent, parent) if parent is not None else None
                if parent is not None and (found is None or found.run_id != run_id):
                    raise AgentNotFound(
                        f"parent agent {parent} is not an agent of run {run_id}",
                        fix="choose parents from this run's archive",
                    )
            agent = Agent(
                run_id=run_id, genome_hash=digest, parent_id=parent_id, second_parent_id=second_parent_id,
                operator=operator, model=model, iteration=iteration, status=status,
                invalid_reason=invalid_reason, feedback=feedback, prompt_tokens=prompt_tokens,
                completion_tokens=completion_tokens, cost_usd=cost_usd,
            )  # fmt: skip
            session.add(agent)
        return agent

    def mark_evaluating(self, agent_id: int) -> Agent:
        """proposed/failed/evaluating -> evaluating; counts one more evaluation attempt."""
        with self._write() as session:
            agent = self._agent_for_update(session, agent_id)
            _check_transition(agent, AgentStatus.evaluating)
            agent.status, agent.updated_at = AgentStatus.evaluating, utcnow()
            agent.eval_attempts += 1
            session.add(agent)
        return agent

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
    ) -> Agent:
        """evaluating -> evaluated | invalid | failed, with the task rows, in one transaction.

        The given Evaluation rows are copied (agent_id filled in); they replace the rows of
        an earlier attempt, except holdout rows. `evaluated` needs a finite `score`.
        `n_tasks` becomes len(evaluations); `feedback=None` keeps the agent's feedback as is.
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
        with self._write() as session:
            agent = self._agent_for_update(session, agent_id)
            _check_transition(agent, status)
            stale = select(Evaluation).where(Evaluation.agent_id == agent_id, Evaluation.split != "holdout")
            for row in session.exec(stale):
                session.delete(row)
            for evaluation in evaluations:
                values = evaluation.model_dump(exclude={"id", "agent_id"})
                session.add(Evaluation(**values, agent_id=agent_id))
            agent.status, agent.score, agent.stage_reached = status, score, stage_reached
            agent.invalid_reason, agent.eval_seconds, agent.n_tasks = invalid_reason, eval_seconds, len(evaluations)
            if feedback is not None:
                agent.feedback = feedback
            agent.updated_at = utcnow()
            session.add(agent)
        return agent

    def mark_failed(self, agent_id: int, reason: str) -> Agent:
        """evaluating -> failed (an infrastructure fault; retried). `reason` goes to invalid_reason."""
        with self._write() as session:
            agent = self._agent_for_update(session, agent_id)
            _check_transition(agent, AgentStatus.failed)
            agent.status, agent.invalid_reason, agent.updated_at = AgentStatus.failed, reason, utcnow()
            session.add(agent)
        return agent

    def set_holdout_score(self, agent_id: int, score: float, *, evaluations: Sequence[Evaluation] = ()) -> Agent:
        """Record an agent's holdout score (never read by selection), with its holdout task rows."""
        with self._write() as session:
            agent = self._agent_for_update(session, agent_id)
            for evaluation in evaluations:
                values = evaluation.model_dump(exclude={"id", "agent_id", "split"})
                session.add(Evaluation(**values, split="holdout", agent_id=agent_id))
            agent.holdout_score, agent.updated_at = score, utcnow()
            session.add(agent)
        return agent

    # ----- agents: queries -----

    def get_agent(self, agent_id: int) -> Agent:
        """The agent with this id; AgentNotFound otherwise."""
        with self._read() as session:
            agent = session.get(Agent, agent_id)
        if agent is None:
            raise AgentNotFound(f"no agent with id {agent_id}", fix="list a run's agents with `cambrian tree RUN`")
        return agent

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
        """How many agents the search proposed (iteration > 0), whatever became of them."""
        with self._read() as session:
            return session.exec(select(func.count()).where(Agent.run_id == run_id, Agent.iteration > 0)).one()

    def max_iteration(self, run_id: int) -> int:
        """The highest iteration number stored for the run (0 with only seeds or nothing)."""
        with self._read() as session:
            return session.exec(select(func.max(Agent.iteration)).where(Agent.run_id == run_id)).one() or 0

    def find_genome(self, run_id: int, genome_hash: str) -> Agent | None:
        """The earliest agent of the run with this genome, or None (the duplicate gate)."""
        query = select(Agent).where(Agent.run_id == run_id, Agent.genome_hash == genome_hash).order_by(Agent.id)
        with self._read() as session:
            return session.exec(query.limit(1)).first()

    def evaluations(self, agent_id: int) -> list[Evaluation]:
        """The agent's task rows, in the order they were written."""
        with self._read() as session:
            return list(session.exec(select(Evaluation).where(Evaluation.agent_id == agent_id).order_by(Evaluation.id)))

    def recent_invalid_children(self, agent_id: int, n: int) -> list[Agent]:
        """Up to `n` invalid children of the agent, newest first (what recent edits got wrong)."""
        query = (
            select(Agent)
            .where(Agent.parent_id == agent_id, Agent.status == AgentStatus.invalid)
            .order_by(Agent.id.desc())  # type: ignore[union-attr]
            .limit(n)
        )
        with self._read() as session:
            return list(session.exec(query))

    def view(self, run_id: int) -> ArchiveView:
        """The run's evaluated agents as numpy columns, with evaluated-children counts (one query)."""
        child = aliased(Agent)
        query = (
            select(Agent.id, Agent.score, Agent.parent_id, func.count(child.id))
            .outerjoin(child, (child.parent_id == Agent.id) & (child.status == AgentStatus.evaluated))
            .where(Agent.run_id == run_id, Agent.status == AgentStatus.evaluated)
            .group_by(Agent.id)
            .order_by(Agent.id)
        )
        with self._read() as session:
            return ArchiveView.from_rows(session.exec(query).all())

    # ----- the FM ledger -----

    def record_llm_call(self, call: LLMCall) -> LLMCall:
        """Append one FM call to the ledger; returns the stored copy (with its id)."""
        stored = LLMCall(**call.model_dump(exclude={"id"}))
        with self._write() as session:
            session.add(stored)
        return stored

    def link_llm_calls(self, run_id: int, *, iteration: int, agent_id: int) -> int:
        """Attribute the run's unattributed FM calls of `iteration` to `agent_id`; returns how many.

        The proposer calls the FM before the agent row (and its id) exists.
        """
        with self._write() as session:
            unlinked = LLMCall.agent_id.is_(None)  # type: ignore[union-attr]
            calls = select(LLMCall).where(LLMCall.run_id == run_id, LLMCall.iteration == iteration, unlinked)
            linked = 0
            for call in session.exec(calls):
                call.agent_id = agent_id
                session.add(call)
                linked += 1
        return linked

    def cached_response(self, request_hash: str) -> LLMResponse | None:
        """The cached FM response for this request hash, or None."""
        with self._read() as session:
            return session.get(LLMResponse, request_hash)

    def store_response(self, response: LLMResponse) -> None:
        """Cache an FM response under its request hash; a hash already cached is left as is."""
        with self._write() as session:
            _insert_ignore(session, LLMResponse, response.model_dump())

    def llm_calls(self, run_id: int) -> list[LLMCall]:
        """The run's ledger, oldest call first."""
        with self._read() as session:
            return list(session.exec(select(LLMCall).where(LLMCall.run_id == run_id).order_by(LLMCall.id)))

    def cost_summary(self, run_id: int) -> CostSummary:
        """The run's FM calls, cache hits, tokens and USD, in total and per model."""
        query = (
            select(
                LLMCall.model,
                func.count(),
                func.coalesce(func.sum(case((LLMCall.cache_hit, 1), else_=0)), 0),
                func.coalesce(func.sum(LLMCall.prompt_tokens), 0),
                func.coalesce(func.sum(LLMCall.completion_tokens), 0),
                func.coalesce(func.sum(LLMCall.cost_usd), 0.0),
            )
            .where(LLMCall.run_id == run_id)
            .group_by(LLMCall.model)
            .order_by(LLMCall.model)
        )
        with self._read() as session:
            rows = session.exec(query).all()
        by_model = {
            model: ModelCost(int(calls), int(hits), int(prompt), int(completion), float(cost))
            for model, calls, hits, prompt, completion, cost in rows
        }
        models = by_model.values()
        return CostSummary(
            calls=sum(m.calls for m in models),
            cache_hits=sum(m.cache_hits for m in models),
            prompt_tokens=sum(m.prompt_tokens for m in models),
            completion_tokens=sum(m.completion_tokens for m in models),
            cost_usd=float(sum(m.cost_usd for m in models)),
            by_model=by_model,
        )
