"""The archive's tables: runs, agents, genomes, evaluations, island migrants, FM calls and the schema version.

Every column a researcher filters or sorts on is a real column (no JSON blobs
standing in for columns); the only JSON text is the frozen run config and the
messages of an FM request, each read whole. `detached` makes a model instance of a row read or written
on SQLAlchemy Core, as a closed ORM session would have left it.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from datetime import datetime, timezone
from typing import Any, TypeVar

from sqlalchemy import RowMapping
from sqlalchemy.orm import class_mapper, make_transient_to_detached
from sqlmodel import Field, SQLModel

ModelT = TypeVar("ModelT", bound=SQLModel)


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def detached(model: type[ModelT], values: Mapping[str, Any] | RowMapping) -> ModelT:
    """A detached `model` instance holding `values` (every column, primary key included).

    Built like the ORM loads rows (no pydantic validation: the values come from the
    database or from a row just written), so it costs microseconds, and behaves like an
    object from a closed session: attributes read and set freely, nothing lazy-loads.
    """
    instance = class_mapper(model).class_manager.new_instance()
    instance.__dict__.update(values)
    make_transient_to_detached(instance)
    return instance


def _stored_id(row_id: int | None, what: str) -> int:
    if row_id is None:
        raise ValueError(f"this {what} was never stored in an archive, so it has no id yet")
    return row_id


class RunStatus(str, enum.Enum):
    running = "running"
    stopped = "stopped"  # interrupted (Ctrl-C, kill); `cambrian resume` continues it
    finished = "finished"  # a budget was reached
    failed = "failed"  # stopped by an error that needs the user (bad seed, dead FM)


class AgentStatus(str, enum.Enum):
    proposed = "proposed"  # stored, not yet evaluated
    evaluating = "evaluating"  # a sandbox is running it
    evaluated = "evaluated"  # has a score; eligible as a parent
    invalid = "invalid"  # the candidate's own fault: bad edit, crash, timeout, duplicate
    failed = "failed"  # infrastructure fault: retried


#: Statuses a resumed run puts back on the evaluation queue.
REQUEUE_STATUSES = (AgentStatus.proposed, AgentStatus.evaluating)


class Run(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    benchmark: str
    seed: int
    config_json: str  # the frozen RunConfig, read whole
    status: RunStatus = Field(default=RunStatus.running)
    error: str | None = None
    cambrian_version: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def key(self) -> int:
        """The run's id; a run read from or added to an archive always has one."""
        return _stored_id(self.id, "run")


class Genome(SQLModel, table=True):
    """An agent's code, content-addressed: sha256 over sorted (path, text) pairs."""

    hash: str = Field(primary_key=True)
    entry: str  # relative path of the entry file
    n_files: int
    n_bytes: int
    created_at: datetime = Field(default_factory=utcnow)


class GenomeFile(SQLModel, table=True):
    genome_hash: str = Field(primary_key=True, foreign_key="genome.hash")
    path: str = Field(primary_key=True)
    text: str


class Agent(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    genome_hash: str | None = Field(default=None, foreign_key="genome.hash", index=True)
    parent_id: int | None = Field(default=None, foreign_key="agent.id", index=True)
    second_parent_id: int | None = Field(default=None, foreign_key="agent.id")
    iteration: int = Field(default=0, index=True)  # 0 for seeds
    operator: str = "seed"
    model: str | None = None
    status: AgentStatus = Field(default=AgentStatus.proposed, index=True)
    score: float | None = Field(default=None, index=True)  # search split; drives selection
    holdout_score: float | None = None  # never read by selection or prompts
    stage_reached: int = 0
    n_tasks: int = 0
    invalid_reason: str | None = None
    feedback: str | None = None  # public feedback shown to later prompts
    eval_attempts: int = 0
    eval_seconds: float | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    # What the static check repaired in the child before evaluation, e.g. "added `import math`";
    # None when nothing. Schema version 2; last, where ALTER TABLE ADD COLUMN puts it in older archives.
    repair_note: str | None = None
    # Schema version 6. repeats: evaluations the score is the mean of (several where scores vary between
    # runs: `evaluation.repeats`); score_spread: their standard deviation (None: evaluated once).
    repeats: int = Field(default=1, sa_column_kwargs={"server_default": "1"})
    score_spread: float | None = None
    # The parent whose outputs this child repeats on every task (a behavioural no-op: scored as that parent,
    # credited nothing), or None.
    behaves_as: int | None = None
    # Wall seconds of the FM calls that made this agent (its proposal and repairs; ~0 for cache hits).
    fm_seconds: float = Field(default=0.0, sa_column_kwargs={"server_default": "0"})
    # Schema version 7. The proposal that made this agent: every FM call of it (its repairs, a diagnosis, a
    # parent agent writing it) carries the same id (LLMCall.proposal_id). None for seeds.
    proposal_id: str | None = Field(default=None, index=True)
    # Schema version 8. The agent's home island (`search.islands`): the island its proposal drew its parents
    # from, and its children's. None: a seed (it belongs to every island), or an agent of a run without islands.
    island: int | None = None

    @property
    def key(self) -> int:
        """The agent's id; a agent read from or added to an archive always has one."""
        return _stored_id(self.id, "agent")


class IslandMigrant(SQLModel, table=True):
    """An agent that joined an island besides its home by migration (`search.migration_every`; schema version 8).

    It stays a member of every island it was on: its home (`Agent.island`), and each island a row names. island:
    the island it joined; from_island: the island whose best it was; after_proposals: the migration round, held
    once that many of the run's proposals had finished.
    """

    agent_id: int = Field(foreign_key="agent.id", primary_key=True)
    island: int = Field(primary_key=True)
    run_id: int = Field(foreign_key="run.id", index=True)
    from_island: int
    after_proposals: int
    created_at: datetime = Field(default_factory=utcnow)


class Evaluation(SQLModel, table=True):
    """One task run of one agent."""

    id: int | None = Field(default=None, primary_key=True)
    agent_id: int = Field(foreign_key="agent.id", index=True)
    task_id: str
    split: str = "search"
    stage: int = 0
    score: float = 0.0
    passed: bool = False
    executed: bool = True  # False: crashed, timed out, OOM, output limit, no result
    duration_s: float = 0.0
    exit_code: int | None = None
    timed_out: bool = False
    oom_killed: bool = False
    output_truncated: bool = False
    feedback: str = ""  # public: what the meta-agent may see
    stdout_tail: str = ""
    stderr_tail: str = ""
    created_at: datetime = Field(default_factory=utcnow)
    # Schema version 6: sha256 of what the run returned (the harness's value), None when it returned none.
    output_hash: str | None = None


class AgentDescriptor(SQLModel, table=True):
    """One behaviour feature of an evaluated agent (mean over its search tasks), e.g. MAP-Elites' axes."""

    agent_id: int = Field(foreign_key="agent.id", primary_key=True)
    name: str = Field(primary_key=True)
    value: float


class LLMCall(SQLModel, table=True):
    """One foundation-model call: the ledger every cost figure is summed from."""

    id: int | None = Field(default=None, primary_key=True)
    run_id: int | None = Field(default=None, foreign_key="run.id", index=True)
    agent_id: int | None = Field(default=None, index=True)
    iteration: int | None = Field(default=None, index=True)
    purpose: str = "mutate"  # mutate | redraw | repair | diagnose | agent | judge | reflect | self_modify
    model: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_s: float = 0.0
    request_hash: str = Field(index=True)
    seed: int | None = None
    cache_hit: bool = False
    error: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    # Schema version 7. The proposal this call was made for (Agent.proposal_id); None for an agent's own calls
    # under evaluation and the run's notes.
    proposal_id: str | None = Field(default=None, index=True)


class LLMResponse(SQLModel, table=True):
    """Response cache keyed by request hash: a resumed or replayed run pays once."""

    request_hash: str = Field(primary_key=True)
    model: str
    text: str
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    created_at: datetime = Field(default_factory=utcnow)


class LLMRequest(SQLModel, table=True):
    """What an FM call sent, keyed by request hash like LLMResponse: stored once however often it is sent.

    messages: the chat messages as JSON, a list of {"role", "content"} (system and user prompts, and in a
    repair the earlier reply and the error). params: the sampling parameters as JSON (seed, temperature,
    max_tokens; a grammar as {"grammar_chars": N}, since it is rebuilt from the parent). Archives from
    before schema version 3 have no rows: their prompts were not recorded.
    """

    request_hash: str = Field(primary_key=True)
    model: str
    messages: str
    params: str = "{}"
    created_at: datetime = Field(default_factory=utcnow)


class GreedyAnswer(SQLModel, table=True):
    """The answer to a greedy question, whatever the reply limit it was asked with: the response cache's
    second key (schema version 5).

    answer_key: sha256 of the model, the messages and the sampling parameters but `max_tokens` (and the seed,
    which greedy decoding does not use); see `cambrian.meta_agent.llm.answer_key`. request_hash: the cached response
    (LLMResponse) of the first request with that key whose reply stopped by itself, with its
    completion_tokens: a request with another limit of at least that many tokens has the same answer from a
    deterministic server, so it is answered from the cache, not by the server's run-to-run noise. Replies cut
    by their limit are never entered.
    """

    answer_key: str = Field(primary_key=True)
    request_hash: str
    completion_tokens: int
    created_at: datetime = Field(default_factory=utcnow)


class CommitMark(SQLModel, table=True):
    """A PostgreSQL write transaction's own mark, inserted inside it with a random token: when the answer to
    its COMMIT is lost, the mark's presence says whether it committed (archive/_retry.py), which a
    transaction id cannot after a server crash (the id may be handed out again). A connection's next write
    transaction deletes its previous mark; marks left by killed processes go after a day (a writable
    open). SQLite archives have the table and never write it. Schema version 4.
    """

    token: str = Field(primary_key=True)
    created_at: datetime = Field(default_factory=utcnow)


class SchemaVersion(SQLModel, table=True):
    """The archive's schema version (archive/schema.py): one row, written when the schema is created or upgraded."""

    id: int = Field(default=1, primary_key=True)
    version: int
    updated_at: datetime = Field(default_factory=utcnow)
