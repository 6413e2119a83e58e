"""The prebuilt SQLAlchemy Core statements of `Archive`'s per-candidate path, and why a guarded one
changed nothing.

Built once at import, each a `Prepared` (archive/_prepared.py: compiled once per dialect, run on the
DBAPI cursor): the agent lifecycle's guarded UPDATEs (the status guard inside the statement
is the transition check, so nothing can change a status between a check and the write), the
guarded agent INSERT (run and parents checked in the same statement), the genome's, the attribution of
an iteration's FM calls to its agent, and the lookups the hot path repeats. When a guarded statement
changes no row, `explain_refused_*` reads why, for the error.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from sqlalchemy import Connection, bindparam, delete, func, insert, or_, update
from sqlalchemy import select as core_select

from cambrian.archive._prepared import InsertIgnore, Prepared
from cambrian.archive.errors import AgentNotFound, ArchiveError, InvalidTransition, RunNotFound
from cambrian.archive.models import Agent, AgentDescriptor, AgentStatus, Evaluation, Genome, GenomeFile, LLMCall, Run

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

_NEW_AGENT_STATUSES = (AgentStatus.proposed, AgentStatus.evaluating, AgentStatus.invalid)
_FINISHED_STATUSES = (AgentStatus.evaluated, AgentStatus.invalid, AgentStatus.failed)

_AGENT = Agent.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
_EVALUATION = Evaluation.__table__  # type: ignore[attr-defined]  # as above
_DESCRIPTOR = AgentDescriptor.__table__  # type: ignore[attr-defined]  # as above
_GENOME = Genome.__table__  # type: ignore[attr-defined]  # as above
_GENOME_FILE = GenomeFile.__table__  # type: ignore[attr-defined]  # as above
_RUN = Run.__table__  # type: ignore[attr-defined]  # as above
_CALL = LLMCall.__table__  # type: ignore[attr-defined]  # as above
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


_MARK_EVALUATING = Prepared(_guarded_update(AgentStatus.evaluating, eval_attempts=_AGENT.c.eval_attempts + 1))
_MARK_FAILED = Prepared(_guarded_update(AgentStatus.failed, invalid_reason=bindparam("reason")))
# One statement per final status: the target status is part of each statement's guard.
_FINISH = {
    status: Prepared(
        _guarded_update(
            status,
            score=bindparam("score"),
            stage_reached=bindparam("stage_reached"),
            invalid_reason=bindparam("invalid_reason"),
            eval_seconds=bindparam("eval_seconds"),
            n_tasks=bindparam("n_tasks"),
            feedback=func.coalesce(bindparam("feedback", type_=_AGENT.c.feedback.type), _AGENT.c.feedback),
            repeats=bindparam("repeats"),
            score_spread=bindparam("score_spread"),
            behaves_as=bindparam("behaves_as"),
        )
    )
    for status in _FINISHED_STATUSES
}
_SET_HOLDOUT = Prepared(
    update(_AGENT)
    .where(_AGENT.c.id == bindparam("agent_id"))
    .values(holdout_score=bindparam("holdout_score"), updated_at=bindparam("now"))
    .returning(*_AGENT.c)
)
_DELETE_STALE_EVALUATIONS = Prepared(
    delete(_EVALUATION).where(_EVALUATION.c.agent_id == bindparam("agent_id"), _EVALUATION.c.split != "holdout")
)
_DELETE_HOLDOUT_EVALUATIONS = Prepared(
    delete(_EVALUATION).where(_EVALUATION.c.agent_id == bindparam("agent_id"), _EVALUATION.c.split == "holdout")
)
_DELETE_DESCRIPTORS = Prepared(delete(_DESCRIPTOR).where(_DESCRIPTOR.c.agent_id == bindparam("agent_id")))
_INSERT_EVALUATION = Prepared(insert(_EVALUATION), columns=("agent_id", *_EVALUATION_VALUE_COLUMNS))
_INSERT_GENOME = InsertIgnore(_GENOME)
_INSERT_GENOME_FILE = Prepared(insert(_GENOME_FILE), columns=[column.name for column in _GENOME_FILE.c])
_INSERT_DESCRIPTOR = Prepared(insert(_DESCRIPTOR), columns=[column.name for column in _DESCRIPTOR.c])


def _parent_in_run(name: str) -> Any:
    parent = bindparam(name, type_=_AGENT.c.parent_id.type)
    same_run = core_select(_AGENT.c.id).where(_AGENT.c.id == parent, _AGENT.c.run_id == bindparam("run_id"))
    return or_(parent.is_(None), same_run.exists())


# INSERT ... SELECT ... WHERE run and parents check out: the checks cost no extra statement;
# when it inserts nothing, `_explain_refused_agent` reads why.
_INSERT_AGENT = Prepared(
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
_SELECT_AGENT = Prepared(core_select(_AGENT).where(_AGENT.c.id == bindparam("agent_id")))
_SELECT_STATUS = Prepared(core_select(_AGENT.c.status).where(_AGENT.c.id == bindparam("agent_id")))
_SELECT_RUN_ID = Prepared(core_select(_RUN.c.id).where(_RUN.c.id == bindparam("run_id")))
_FIND_GENOME = Prepared(
    core_select(_AGENT)
    .where(_AGENT.c.run_id == bindparam("run_id"), _AGENT.c.genome_hash == bindparam("genome_hash"))
    .order_by(_AGENT.c.id)
    .limit(1)
)
_RECENT_INVALID_CHILDREN = Prepared(
    core_select(_AGENT)
    .where(_AGENT.c.parent_id == bindparam("agent_id"), _AGENT.c.status == AgentStatus.invalid)
    .order_by(_AGENT.c.id.desc())
    .limit(bindparam("n"))
)
# The FM calls of an iteration, made before its agent existed, attributed to the agent.
_LINK_CALLS = Prepared(
    update(_CALL)
    .where(
        # Names apart from the columns': an UPDATE reserves those for its SET clause.
        _CALL.c.run_id == bindparam("b_run_id"),
        _CALL.c.proposal_id == bindparam("b_proposal_id"),
        _CALL.c.agent_id.is_(None),
    )
    .values(agent_id=bindparam("b_agent_id"))
)
_SELECT_GENOME = Prepared(
    core_select(_GENOME.c.entry, _GENOME_FILE.c.path, _GENOME_FILE.c.text)
    .select_from(_GENOME.outerjoin(_GENOME_FILE, _GENOME_FILE.c.genome_hash == _GENOME.c.hash))
    .where(_GENOME.c.hash == bindparam("hash"))
    .order_by(_GENOME_FILE.c.path)
)


def link_llm_calls(connection: Connection, run_id: int, *, proposal_id: str, agent_id: int) -> int:
    """Attribute the run's unattributed FM calls of proposal `proposal_id` to `agent_id`; returns how many."""
    params = {"b_run_id": run_id, "b_proposal_id": proposal_id, "b_agent_id": agent_id}
    return int(_LINK_CALLS.run(connection, params).rowcount)


def no_agent(agent_id: int) -> AgentNotFound:
    return AgentNotFound(f"no agent with id {agent_id}", fix="list a run's agents with `cambrian tree RUN`")


def explain_refused_transition(connection: Connection, agent_id: int, new: AgentStatus) -> ArchiveError:
    """Why a guarded UPDATE changed no row: the agent is missing, or its status forbids `new`."""
    current = _SELECT_STATUS.run(connection, {"agent_id": agent_id}).scalar()
    if current is None:
        return no_agent(agent_id)
    allowed = ", ".join(sorted(s.value for s in TRANSITIONS[current])) or "none (final)"
    return InvalidTransition(
        f"agent {agent_id}: cannot go from {current.value} to {new.value} (allowed: {allowed})",
        fix="re-read the agent (`cambrian show RUN AGENT`); another worker may have changed it",
    )


def explain_refused_agent(connection: Connection, run_id: int, parents: Sequence[int | None]) -> ArchiveError:
    """Why the guarded agent INSERT inserted nothing: the run is missing, or a parent is not in it."""
    if _SELECT_RUN_ID.run(connection, {"run_id": run_id}).first() is None:
        return RunNotFound(f"no run with id {run_id}", fix="list the stored runs with `cambrian runs`")
    for parent in parents:
        row = _SELECT_AGENT.run(connection, {"agent_id": parent}).first() if parent is not None else None
        if parent is not None and (row is None or row.run_id != run_id):
            return AgentNotFound(
                f"parent agent {parent} is not an agent of run {run_id}", fix="choose parents from this run's archive"
            )
    # Unreachable while the write lock is held: the INSERT's guard checks exactly these rows.
    return AgentNotFound(f"parents {list(parents)} of run {run_id} changed while storing an agent", fix="retry")
