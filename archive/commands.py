"""The agent lifecycle's writes as typed commands: `AddAgent`, `MarkEvaluating`, `FinishEvaluation`, `MarkFailed`
and `SetHoldoutScore` (together `LifecycleCommand`).

A command is a frozen value naming one change, checked when it is built as far as that can be done without
the database (a new agent's status, a finished one's finite score); `apply` then makes the change on the
connection of an open write transaction with prebuilt Core statements (`_statements`) and nothing else: no
ORM session (which would wait for the write lock that transaction holds), no transaction of its own. What
it can still refuse is what only the database knows: the agent's status, the run, the parents.

`Archive.add_agent(...)` and its siblings build a command and apply it in a transaction of its own.
`Archive.write_batch(commands)` applies several, ready at the same moment, in one (group commit: a loop
driving many evaluation slots pays one BEGIN and COMMIT for them instead of one each), each command running
exactly the statements and checks it runs alone. A batch is all or nothing for the database, never for its
callers: when any command fails (a refused transition, a constraint), the whole transaction rolls back and
every command runs again alone, in order, so each gets the result or the error it would have got without
the batch. On PostgreSQL a disconnect runs the batch again as a whole (its commit mark settles a lost
COMMIT, as for any write: archive/_retry.py); only after the batch rolled back do single commands run, each
retried on its own, so no command can commit twice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import KW_ONLY, dataclass
from typing import Any

from sqlalchemy import Connection

from cambrian.archive._statements import (
    _DELETE_DESCRIPTORS,
    _DELETE_HOLDOUT_EVALUATIONS,
    _DELETE_STALE_EVALUATIONS,
    _EVALUATION_VALUE_COLUMNS,
    _FINISH,
    _FINISHED_STATUSES,
    _INSERT_AGENT,
    _INSERT_DESCRIPTOR,
    _INSERT_EVALUATION,
    _INSERT_GENOME,
    _INSERT_GENOME_FILE,
    _MARK_EVALUATING,
    _MARK_FAILED,
    _NEW_AGENT_STATUSES,
    _SET_HOLDOUT,
    explain_refused_agent,
    explain_refused_transition,
    link_llm_calls,
    no_agent,
)
from cambrian.archive.errors import InvalidGenome, InvalidTransition
from cambrian.archive.genomes import check_genome_paths, genome_hash
from cambrian.archive.models import Agent, AgentStatus, Evaluation, detached, utcnow

__all__ = ["AddAgent", "FinishEvaluation", "LifecycleCommand", "MarkEvaluating", "MarkFailed", "SetHoldoutScore"]


@dataclass(frozen=True)
class AddAgent:
    """Store an agent of run `run_id`, and its genome (if `files`, with `entry` the file that runs).

    `status` is proposed; or evaluating for a child whose evaluation starts at once (as if `MarkEvaluating`
    had followed in the same transaction: one evaluation attempt counted); or invalid for a proposal that
    failed before evaluation (then `files` may be None and `invalid_reason` says why). Parents must be
    agents of the run. proposal_id: the proposal that made the agent; in the same transaction the run's FM
    calls made for it and not yet attributed are attributed to the new agent (the proposer calls the FM before
    the agent exists). repair_note: what the
    static check repaired in the child before evaluation (e.g. "added `import math`"); None when nothing.
    fm_seconds: wall seconds of the FM calls that made it. island: its home island (>= 0), the island its
    proposal drew its parents from; None for a seed (on every island) or in a run without islands.
    """

    run_id: int
    _: KW_ONLY
    files: Mapping[str, str] | None = None
    entry: str | None = None
    parent_id: int | None = None
    second_parent_id: int | None = None
    operator: str = "seed"
    model: str | None = None
    iteration: int = 0
    status: AgentStatus = AgentStatus.proposed
    invalid_reason: str | None = None
    feedback: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    proposal_id: str | None = None
    repair_note: str | None = None
    fm_seconds: float = 0.0
    island: int | None = None

    def __post_init__(self) -> None:
        status = AgentStatus(self.status)
        object.__setattr__(self, "status", status)
        if self.island is not None and (type(self.island) is not int or self.island < 0):
            raise ValueError(f"an agent's island is an integer >= 0 (or None: every island), not {self.island!r}")
        if status not in _NEW_AGENT_STATUSES:
            raise InvalidTransition(
                f"a new agent starts as proposed, evaluating or invalid, not {status.value}",
                fix="add it as proposed, then mark_evaluating and finish_evaluation",
            )
        if self.files is not None and self.entry is None:
            raise InvalidGenome("files were given without an entry file", fix="pass entry=<relative path>")
        if status is AgentStatus.evaluating and self.files is None:
            raise InvalidTransition(
                "an agent can start as evaluating only with its program", fix="pass files= and entry="
            )

    def apply(self, connection: Connection) -> Agent:
        now = utcnow()
        values: dict[str, Any] = {
            "run_id": self.run_id,
            "genome_hash": None,
            "parent_id": self.parent_id,
            "second_parent_id": self.second_parent_id,
            "iteration": self.iteration,
            "operator": self.operator,
            "model": self.model,
            "status": self.status,
            "score": None,
            "holdout_score": None,
            "stage_reached": 0,
            "n_tasks": 0,
            "invalid_reason": self.invalid_reason,
            "feedback": self.feedback,
            "eval_attempts": int(self.status is AgentStatus.evaluating),
            "eval_seconds": None,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "cost_usd": self.cost_usd,
            "created_at": now,
            "updated_at": now,
            "repair_note": self.repair_note,
            "repeats": 1,
            "score_spread": None,
            "behaves_as": None,
            "fm_seconds": self.fm_seconds,
            "proposal_id": self.proposal_id,
            "island": self.island,
        }
        if self.files is not None and self.entry is not None:  # files without an entry cannot be built
            values["genome_hash"] = store_genome(connection, self.files, self.entry)
        agent_id = _INSERT_AGENT.run(connection, values).scalar()
        if agent_id is None:
            raise explain_refused_agent(connection, self.run_id, (self.parent_id, self.second_parent_id))
        if self.proposal_id is not None:
            link_llm_calls(connection, self.run_id, proposal_id=self.proposal_id, agent_id=agent_id)
        return detached(Agent, {"id": agent_id, **values})


@dataclass(frozen=True)
class MarkEvaluating:
    """proposed/failed/evaluating -> evaluating; counts one more evaluation attempt."""

    agent_id: int

    def apply(self, connection: Connection) -> Agent:
        row = _MARK_EVALUATING.run(connection, {"agent_id": self.agent_id, "now": utcnow()}).first()
        if row is None:
            raise explain_refused_transition(connection, self.agent_id, AgentStatus.evaluating)
        return detached(Agent, row._mapping)


@dataclass(frozen=True)
class FinishEvaluation:
    """evaluating -> evaluated | invalid | failed, with the task rows.

    The given Evaluation rows are copied (agent_id filled in); they replace the rows of an earlier attempt,
    except holdout rows. `evaluated` needs a finite `score`. `n_tasks` becomes len(evaluations);
    `feedback=None` keeps the agent's feedback as is. descriptor: the agent's behaviour features (name ->
    finite value), stored with it. repeats: evaluations `score` is the mean of (>= 1); score_spread: their
    standard deviation. behaves_as: the parent whose outputs this agent repeats on every task (a behavioural
    no-op), or None.
    """

    agent_id: int
    _: KW_ONLY
    status: AgentStatus
    score: float | None = None
    stage_reached: int = 0
    invalid_reason: str | None = None
    feedback: str | None = None
    eval_seconds: float | None = None
    evaluations: Sequence[Evaluation] = ()
    descriptor: Mapping[str, float] | None = None
    repeats: int = 1
    score_spread: float | None = None
    behaves_as: int | None = None

    def __post_init__(self) -> None:
        status = AgentStatus(self.status)
        object.__setattr__(self, "status", status)
        if status not in _FINISHED_STATUSES:
            raise InvalidTransition(
                f"finish_evaluation ends in evaluated, invalid or failed, not {status.value}",
                fix="use mark_evaluating to (re)start an evaluation",
            )
        if status is AgentStatus.evaluated and (self.score is None or not math.isfinite(self.score)):
            raise InvalidTransition(
                f"agent {self.agent_id}: evaluated needs a finite score, got {self.score!r}",
                fix="finish as invalid (with the reason) when the benchmark produced no usable score",
            )

    def apply(self, connection: Connection) -> Agent:
        agent_id = self.agent_id
        params = {
            "agent_id": agent_id,
            "now": utcnow(),
            "score": self.score,
            "stage_reached": self.stage_reached,
            "invalid_reason": self.invalid_reason,
            "eval_seconds": self.eval_seconds,
            "n_tasks": len(self.evaluations),
            "feedback": self.feedback,
            "repeats": self.repeats,
            "score_spread": self.score_spread,
            "behaves_as": self.behaves_as,
        }
        row = _FINISH[self.status].run(connection, params).first()
        if row is None:
            raise explain_refused_transition(connection, agent_id, self.status)
        # Only a finished earlier attempt left task rows, and every attempt after the
        # first passed mark_evaluating again: on the first attempt there is nothing to delete.
        if row.eval_attempts > 1:
            _DELETE_STALE_EVALUATIONS.run(connection, {"agent_id": agent_id})
            _DELETE_DESCRIPTORS.run(connection, {"agent_id": agent_id})
        _insert_evaluations(connection, agent_id, self.evaluations)
        features = [
            {"agent_id": agent_id, "name": name, "value": float(value)}
            for name, value in (self.descriptor or {}).items()
            if math.isfinite(value)
        ]
        if features:
            _INSERT_DESCRIPTOR.run(connection, features if len(features) > 1 else features[0])
        return detached(Agent, row._mapping)


@dataclass(frozen=True)
class MarkFailed:
    """evaluating -> failed (an infrastructure fault; retried). `reason` goes to invalid_reason."""

    agent_id: int
    reason: str

    def apply(self, connection: Connection) -> Agent:
        params = {"agent_id": self.agent_id, "now": utcnow(), "reason": self.reason}
        row = _MARK_FAILED.run(connection, params).first()
        if row is None:
            raise explain_refused_transition(connection, self.agent_id, AgentStatus.failed)
        return detached(Agent, row._mapping)


@dataclass(frozen=True)
class SetHoldoutScore:
    """Record an agent's holdout score (never read by selection), with its holdout task rows.

    The rows of an earlier holdout evaluation are replaced, so the rows always explain the score.
    """

    agent_id: int
    score: float
    _: KW_ONLY
    evaluations: Sequence[Evaluation] = ()

    def apply(self, connection: Connection) -> Agent:
        params = {"agent_id": self.agent_id, "now": utcnow(), "holdout_score": self.score}
        row = _SET_HOLDOUT.run(connection, params).first()
        if row is None:
            raise no_agent(self.agent_id)
        _DELETE_HOLDOUT_EVALUATIONS.run(connection, {"agent_id": self.agent_id})
        _insert_evaluations(connection, self.agent_id, self.evaluations, split="holdout")
        return detached(Agent, row._mapping)


#: A write `Archive.write_batch` takes: each applies itself to the batch's connection and returns the agent.
LifecycleCommand = AddAgent | MarkEvaluating | FinishEvaluation | MarkFailed | SetHoldoutScore
_COMMANDS = (AddAgent, MarkEvaluating, FinishEvaluation, MarkFailed, SetHoldoutScore)


def check_commands(commands: Sequence[object]) -> None:
    """TypeError naming what a batch takes, for the first of `commands` that is no lifecycle command."""
    for command in commands:
        if not isinstance(command, _COMMANDS):
            names = ", ".join(kind.__name__ for kind in _COMMANDS)
            raise TypeError(
                f"write_batch takes lifecycle commands ({names}, from cambrian.archive.commands); got {command!r}"
            )


def store_genome(connection: Connection, files: Mapping[str, str], entry: str) -> str:
    """Store a genome (unless stored already) on `connection`, in its transaction; returns its hash."""
    check_genome_paths(files, entry)
    digest = genome_hash(files)
    n_bytes = sum(len(text.encode("utf-8")) for text in files.values())
    genome_row = {"hash": digest, "entry": entry, "n_files": len(files), "n_bytes": n_bytes, "created_at": utcnow()}
    # The files go in with the genome row, in the same transaction, so a stored genome
    # row always has all its files: an existing row means nothing more to write.
    if _INSERT_GENOME.run(connection, genome_row):
        file_rows = [{"genome_hash": digest, "path": path, "text": text} for path, text in files.items()]
        _INSERT_GENOME_FILE.run(connection, file_rows if len(file_rows) > 1 else file_rows[0])
    return digest


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
