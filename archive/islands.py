"""Which agents of a run each island holds, from what the archive stores: the one rule every reader shares.

A run with islands (`search.islands` > 1) keeps that many populations. An agent made by a proposal has a home
island (`Agent.island`); an agent with none (a seed, or an agent of a run made before islands) belongs to every
island; a migrant (`IslandMigrant`) belongs to its home island and to each island it joined. Island numbers the
run does not have (a run resumed with fewer islands) wrap around: island i is island i mod count.

Pure functions over rows already read: the search loop rebuilds its islands with them, `cambrian status` and
`cambrian show` report them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from cambrian.archive.models import Agent, AgentStatus, IslandMigrant

__all__ = ["IslandSummary", "island_members", "island_summaries", "islands_of"]


def island_members(agents: Iterable[Agent], migrants: Iterable[IslandMigrant], count: int) -> list[set[int]]:
    """Per island (0 .. count - 1), the ids of its members among `agents` and `migrants` (count >= 1)."""
    if count < 1:
        raise ValueError(f"a run has at least one island, not {count}")
    members: list[set[int]] = [set() for _ in range(count)]
    for agent in agents:
        if agent.island is None:
            for island in members:
                island.add(agent.key)
        else:
            members[agent.island % count].add(agent.key)
    for migrant in migrants:
        members[migrant.island % count].add(migrant.agent_id)
    return members


def islands_of(agent: Agent, migrants: Iterable[IslandMigrant], count: int) -> list[int]:
    """The islands `agent` is on, its home first (every island, in order, for an agent with no home)."""
    if agent.island is None:
        return list(range(count))
    home = agent.island % count
    joined = sorted({m.island % count for m in migrants if m.agent_id == agent.id} - {home})
    return [home, *joined]


@dataclass(frozen=True)
class IslandSummary:
    """One island of a run: home_agents (agents whose proposal drew its parents here), evaluated (those of them
    evaluated), migrants_in (agents that joined it by migration), and its best evaluated member (seeds and
    migrants included) with its score; None when it has none."""

    island: int
    home_agents: int
    evaluated: int
    migrants_in: int
    best_agent_id: int | None
    best_score: float | None


def island_summaries(agents: Sequence[Agent], migrants: Sequence[IslandMigrant], count: int) -> list[IslandSummary]:
    """Every island of the run (0 .. count - 1), from its agents and its migrants."""
    members = island_members(agents, migrants, count)
    by_id = {agent.key: agent for agent in agents}
    summaries = []
    for island, ids in enumerate(members):
        home = [a for a in agents if a.island is not None and a.island % count == island]
        scored = [
            (float(by_id[i].score or 0.0), -i)
            for i in ids
            if i in by_id and by_id[i].status == AgentStatus.evaluated and by_id[i].score is not None
        ]
        best = max(scored) if scored else None
        summaries.append(
            IslandSummary(
                island=island,
                home_agents=len(home),
                evaluated=sum(a.status == AgentStatus.evaluated for a in home),
                migrants_in=sum(m.island % count == island for m in migrants),
                best_agent_id=-best[1] if best else None,
                best_score=best[0] if best else None,
            )
        )
    return summaries
