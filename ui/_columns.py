"""A run's agents as columns: one read of the fields every run-level view needs (plot, tree, tables).

One Core query over the agent table, so a 100k-agent run loads in a fraction of a second; the
ORM would build 100k objects. Numbers become numpy arrays (a missing score is NaN), text stays
in lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone

import numpy as np
from sqlalchemy import Table, or_, select

from archive.models import Agent
from archive.store import Archive

_AGENT: Table = Agent.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime

#: Longest invalid reason carried in the run-level views, in characters (the agent page has it whole).
REASON_CHARS = 300


@dataclass(frozen=True)
class AgentColumns:
    """The run's agents ordered by id; every array and list has one entry per agent."""

    ids: np.ndarray  # int64
    parent_ids: np.ndarray  # int64, -1 for a root (a seed)
    iterations: np.ndarray  # int64, 0 for seeds
    scores: np.ndarray  # float64 search score, NaN when none
    holdout_scores: np.ndarray  # float64, NaN when none
    tokens: np.ndarray  # int64 prompt + completion tokens of the proposal
    cost_usd: np.ndarray  # float64 USD of the proposal
    updated: np.ndarray  # float64 POSIX seconds of the last change
    statuses: list[str]
    operators: list[str]
    models: list[str]  # "" where no model made it (seeds, non-FM operators)
    reasons: list[str]  # invalid reason cut to REASON_CHARS, "" when none

    def __len__(self) -> int:
        return len(self.ids)

    def row_of(self, agent_id: int) -> int:
        """The row holding `agent_id`, or -1."""
        row = int(np.searchsorted(self.ids, agent_id))
        return row if row < len(self.ids) and int(self.ids[row]) == agent_id else -1


def posix_seconds(moment: datetime | None) -> float:
    """POSIX seconds of a stored time; SQLite hands back naive datetimes, which the archive wrote in UTC."""
    if moment is None:
        return 0.0
    return (moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)).timestamp()


def agent_columns(
    archive: Archive, run_id: int, *, after_id: int = 0, changed_after: datetime | None = None
) -> AgentColumns:
    """The run's agents with id > after_id (all by default), ordered by id, in one read.

    changed_after: also those changed after this time (timezone-aware): what a
    live page fetches to see new agents and status changes of the ones it has.
    """
    c = _AGENT.c
    wanted = c.id > after_id if changed_after is None else or_(c.id > after_id, c.updated_at > changed_after)
    query = (
        select(c.id, c.parent_id, c.iteration, c.score, c.holdout_score, c.prompt_tokens, c.completion_tokens,
               c.cost_usd, c.updated_at, c.status, c.operator, c.model, c.invalid_reason)
        .where(c.run_id == run_id, wanted)
        .order_by(c.id)
    )  # fmt: skip
    with archive.engine.connect() as connection:
        rows = connection.execute(query).all()
    n = len(rows)

    def numbers(index: int, dtype: type, missing: float) -> np.ndarray:
        return np.fromiter((missing if r[index] is None else r[index] for r in rows), dtype=dtype, count=n)

    return AgentColumns(
        ids=numbers(0, np.int64, -1),
        parent_ids=numbers(1, np.int64, -1),
        iterations=numbers(2, np.int64, 0),
        scores=numbers(3, np.float64, np.nan),
        holdout_scores=numbers(4, np.float64, np.nan),
        tokens=np.fromiter(((r[5] or 0) + (r[6] or 0) for r in rows), dtype=np.int64, count=n),
        cost_usd=numbers(7, np.float64, 0.0),
        updated=np.fromiter((posix_seconds(r[8]) for r in rows), dtype=np.float64, count=n),
        statuses=[str(getattr(r[9], "value", r[9])) for r in rows],
        operators=[str(r[10]) for r in rows],
        models=[str(r[11] or "") for r in rows],
        reasons=[(r[12] or "")[:REASON_CHARS] for r in rows],
    )
