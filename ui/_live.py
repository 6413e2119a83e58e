"""What a live page polls for: the agents added or changed since its last look, and the run's summary.

Pure reads, one short read transaction each, cheap enough to run every 2 s beside a writing search
(WAL readers never block the writer). The page sends back the `last_agent` and `last_update` it got.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from typing import Any

from sqlalchemy import Table, func, select

from cambrian.archive.models import Agent, Run
from cambrian.archive.store import Archive
from cambrian.ui._columns import agent_columns
from cambrian.ui._data import summarize_run
from cambrian.ui._run_stats import score_points

_AGENT: Table = Agent.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime

#: At most this many changed agents per answer; the page asks again for the rest.
MAX_CHANGES = 5000


def parse_update(text: str | None) -> datetime | None:
    """A `last_update` token back into a UTC time (None when absent or bad); a token without a zone is UTC."""
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


def last_update(archive: Archive, run: Run) -> str:
    """The newest agent change of the run as an exact token (ISO time, microseconds), "" with no agents."""
    with archive.engine.connect() as connection:
        newest = connection.execute(select(func.max(_AGENT.c.updated_at)).where(_AGENT.c.run_id == run.key)).scalar()
    return "" if newest is None else newest.replace(tzinfo=None).isoformat(timespec="microseconds")


def changes(archive: Archive, run: Run, *, after_agent: int, after_update: str | None) -> dict[str, Any]:
    """New agents (id > after_agent) and agents changed after `after_update`, as score-plot columns, with
    the run's summary and the tokens to send next time. `more` is true when the answer was cut at MAX_CHANGES."""
    token = last_update(archive, run)
    columns = agent_columns(archive, run.key, after_id=after_agent, changed_after=parse_update(after_update))
    points = score_points(columns, max_points=len(columns) + 1)
    more = len(columns) > MAX_CHANGES
    if more:
        points = {key: value[:MAX_CHANGES] if isinstance(value, list) else value for key, value in points.items()}
    summary = summarize_run(archive, run)
    state = asdict(summary)
    state.pop("config")
    return {
        "points": points,
        "last_agent": max([after_agent, *points["id"]]),
        "last_update": token if not more else (after_update or ""),
        "more": more,
        "summary": state,
    }
