"""Islands in the archive, on both stores (an SQLite file, a real PostgreSQL database): each agent's home island,
migrants stored as rows and refused when they make no sense, a run's deletion taking them along, and the one
membership rule (`cambrian.archive.islands`) every reader shares."""

from __future__ import annotations

import pytest

from cambrian.archive.errors import AgentNotFound, InvalidTransition
from cambrian.archive.islands import island_members, island_summaries, islands_of
from cambrian.archive.models import Agent, AgentStatus, IslandMigrant, Run
from cambrian.archive.store import Archive


def _evaluated(archive: Archive, run: Run, score: float, *, island: int | None, parent: int | None = None) -> Agent:
    agent = archive.add_agent(
        run.key,
        files={"main.py": f"x = {score}\n"},
        entry="main.py",
        parent_id=parent,
        iteration=0 if parent is None else 1,
        operator="seed" if parent is None else "diff",
        island=island,
    )
    archive.mark_evaluating(agent.key)
    return archive.finish_evaluation(agent.key, status=AgentStatus.evaluated, score=score)


def _migrant(agent: Agent, island: int, *, source: int, after: int) -> IslandMigrant:
    return IslandMigrant(
        agent_id=agent.key, island=island, run_id=agent.run_id, from_island=source, after_proposals=after
    )


def test_an_agent_keeps_its_home_island_and_migrants_are_stored_in_order(archive: Archive, run: Run) -> None:
    seed = _evaluated(archive, run, 0.1, island=None)
    a = _evaluated(archive, run, 0.5, island=0, parent=seed.key)
    b = _evaluated(archive, run, 0.7, island=1, parent=seed.key)
    c = _evaluated(archive, run, 0.6, island=2, parent=b.key)
    assert [x.island for x in archive.agents(run.key)] == [None, 0, 1, 2]
    assert archive.get_agent(c.key).island == 2

    stored = archive.add_island_migrants([_migrant(b, 2, source=1, after=10), _migrant(a, 1, source=0, after=10)])
    assert [(m.agent_id, m.island) for m in stored] == [(b.key, 2), (a.key, 1)]
    archive.add_island_migrants([_migrant(c, 0, source=2, after=20)])
    assert archive.add_island_migrants([]) == []
    migrants = archive.island_migrants(run.key)
    # Round, then the island each left: the order they migrated in.
    assert [(m.after_proposals, m.from_island, m.agent_id, m.island) for m in migrants] == [
        (10, 0, a.key, 1),
        (10, 1, b.key, 2),
        (20, 2, c.key, 0),
    ]
    other = archive.create_run(name="other", benchmark="circle_packing", seed=0, config_json="{}")
    assert archive.island_migrants(other.key) == []


def test_a_migrant_that_makes_no_sense_is_refused_and_nothing_of_its_round_is_stored(
    archive: Archive, run: Run
) -> None:
    seed = _evaluated(archive, run, 0.1, island=None)
    good = _evaluated(archive, run, 0.5, island=0, parent=seed.key)
    proposed = archive.add_agent(run.key, parent_id=seed.key, iteration=2, operator="diff", island=1)
    archive.add_island_migrants([_migrant(good, 1, source=0, after=5)])
    other = archive.create_run(name="other", benchmark="circle_packing", seed=0, config_json="{}")
    stranger = _evaluated(archive, other, 0.9, island=0)
    cases = [
        (_migrant(proposed, 0, source=1, after=10), InvalidTransition, "only evaluated agents migrate"),
        (_migrant(good, 1, source=0, after=10), InvalidTransition, "on island 1 already"),
        (_migrant(good, 0, source=0, after=10), InvalidTransition, "on island 0 already"),  # its home
        (_migrant(seed, 1, source=0, after=10), InvalidTransition, "on every island already"),
        (
            IslandMigrant(agent_id=stranger.key, island=1, run_id=run.key, from_island=0, after_proposals=10),
            AgentNotFound,
            "not an",
        ),
    ]
    for bad, error, message in cases:
        with pytest.raises(error, match=message):
            archive.add_island_migrants([_migrant(good, 2, source=0, after=10), bad])
    assert [(m.agent_id, m.island) for m in archive.island_migrants(run.key)] == [(good.key, 1)]
    with pytest.raises(ValueError, match="integer >= 0"):
        archive.add_agent(run.key, parent_id=seed.key, iteration=3, operator="diff", island=-1)


def test_deleting_a_run_deletes_its_migrants(archive: Archive, run: Run) -> None:
    seed = _evaluated(archive, run, 0.1, island=None)
    child = _evaluated(archive, run, 0.5, island=0, parent=seed.key)
    archive.add_island_migrants([_migrant(child, 1, source=0, after=10)])
    assert archive.delete_run(run.key) == 2
    assert archive.island_migrants(run.key) == []


def test_membership_the_seed_on_every_island_migrants_on_each_they_joined(archive: Archive, run: Run) -> None:
    seed = _evaluated(archive, run, 0.1, island=None)
    a = _evaluated(archive, run, 0.5, island=0, parent=seed.key)
    b = _evaluated(archive, run, 0.7, island=1, parent=seed.key)
    invalid = archive.add_agent(run.key, parent_id=b.key, iteration=2, operator="diff", island=1)
    archive.add_island_migrants([_migrant(b, 0, source=1, after=10)])
    agents, migrants = archive.agents(run.key), archive.island_migrants(run.key)

    assert island_members(agents, migrants, 3) == [
        {seed.key, a.key, b.key},
        {seed.key, b.key, invalid.key},
        {seed.key},
    ]
    # Fewer islands than the agents name (a run resumed with fewer): island numbers wrap around.
    assert island_members(agents, migrants, 1) == [{seed.key, a.key, b.key, invalid.key}]
    assert islands_of(seed, migrants, 3) == [0, 1, 2]
    assert islands_of(b, migrants, 3) == [1, 0]
    assert islands_of(a, migrants, 3) == [0]

    summaries = island_summaries(agents, migrants, 3)
    assert [(s.island, s.home_agents, s.evaluated, s.migrants_in) for s in summaries] == [
        (0, 1, 1, 1),
        (1, 2, 1, 0),
        (2, 0, 0, 0),
    ]
    assert [(s.best_agent_id, s.best_score) for s in summaries] == [(b.key, 0.7), (b.key, 0.7), (seed.key, 0.1)]
    with pytest.raises(ValueError, match="at least one island"):
        island_members(agents, migrants, 0)
