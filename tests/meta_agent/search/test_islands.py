"""Islands with migration in real searches: a loop built by hand (no FM: `ast_mutate` edits, the local sandbox,
the deceptive trap) over real archives, on both stores where membership is written.

Proposals run one at a time (`max_pending=1`), so the proposal of iteration k starts once k - 1 proposals have
finished, and a migration round stored after n finished proposals is one every later proposal could draw from.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cambrian.archive.islands import island_members
from cambrian.archive.models import Agent, AgentStatus, IslandMigrant, Run, RunStatus
from cambrian.archive.selection import Greedy
from cambrian.archive.store import Archive
from cambrian.archive.view import ArchiveView
from cambrian.evaluators.deceptive.benchmark import DeceptiveTrap
from cambrian.evaluators.runner import Limits
from cambrian.meta_agent.config import BudgetConfig, RunConfig, load_config
from cambrian.meta_agent.errors import ConfigError
from cambrian.meta_agent.operators import make_operator
from cambrian.meta_agent.search import LocalExecutor, LoopSettings, OperatorMix, Proposer, SearchLoop
from cambrian.meta_agent.search._compose import check_can_start
from cambrian.meta_agent.search._islands import Islands
from cambrian.meta_agent.search.evaluation import AgentFMBudget, EvaluationContext
from cambrian.sandbox.local import LocalSandbox

SEED = 3


class RecordingGreedy(Greedy):
    """Greedy, remembering the agent ids of every view it selects from (the loop's own draws, in order)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[frozenset[int]] = []

    def select(self, view: ArchiveView, k: int, rng: np.random.Generator) -> np.ndarray:
        self.seen.append(frozenset(view.ids.tolist()))
        return super().select(view, k, rng)


def new_run(archive: Archive, islands: int = 3) -> Run:
    config = RunConfig(benchmark="deceptive", seed=SEED, search={"islands": islands, "migration_every": 2})
    return archive.create_run(name="islands", benchmark="deceptive", seed=SEED, config_json=config.to_json())


def search(archive: Archive, run: Run, *, iterations: int, selector: Any = None, **settings: int) -> SearchLoop:
    """A hand-built loop of `iterations` proposals with LoopSettings(**settings), run to its end."""
    context = EvaluationContext(
        DeceptiveTrap(blocks=2),
        Limits(timeout_s=20, seed=SEED),
        AgentFMBudget(max_calls=0, max_tokens=0, run_seed=SEED),
    )
    operators = {"ast_mutate": make_operator("ast_mutate")}
    loop = SearchLoop(
        archive=archive,
        run=run,
        selector=selector or Greedy(),
        operators=OperatorMix(operators, weights={"ast_mutate": 1.0}),
        proposer=Proposer(context=context, operators=operators, llms={}, executor=None, run_seed=SEED),
        executor=LocalExecutor(LocalSandbox(), slots=1),
        context=context,
        budget=BudgetConfig(iterations=iterations),
        settings=LoopSettings(seed=SEED, max_pending=1, **settings),
    )
    outcome = asyncio.run(loop.run_until_done())
    assert outcome.status == RunStatus.finished, outcome.reason
    return loop


def check_parents_on_their_island(agents: list[Agent], migrants: list[IslandMigrant], islands: int) -> None:
    """Every child's home is its iteration's island (round robin), and its parent was a member of that island
    when it was proposed: the seed, an earlier agent at home there, or an agent that had migrated there."""
    seed = next(a for a in agents if a.operator == "seed")
    assert seed.island is None
    for child in (a for a in agents if a.iteration > 0):
        island = (child.iteration - 1) % islands
        assert child.island == island, (child.id, child.iteration, child.island)
        members = {seed.key}
        members |= {a.key for a in agents if a.island == island and a.key < child.key}
        members |= {m.agent_id for m in migrants if m.island == island and m.after_proposals < child.iteration}
        assert child.parent_id in members, (child.id, child.parent_id, island)


def test_membership_and_migrants_are_stored_and_a_resumed_run_keeps_drawing_on_them(store_url: str) -> None:
    with Archive(store_url) as archive:
        run = new_run(archive)
        search(archive, run, iterations=8, islands=3, migration_every=2)
        agents, migrants = archive.agents(run.key), archive.island_migrants(run.key)
    assert migrants, "some round moved an agent"
    assert {m.after_proposals for m in migrants} <= {2, 4, 6, 8}
    by_id = {a.key: a for a in agents}
    for migrant in migrants:  # each went one step along the ring, from an island it was on
        assert by_id[migrant.agent_id].status == AgentStatus.evaluated
        assert migrant.island == (migrant.from_island + 1) % 3
        assert migrant.agent_id in island_members(agents, migrants, 3)[migrant.from_island]
    check_parents_on_their_island(agents, migrants, 3)

    with Archive(store_url) as archive:  # the archive alone holds the islands: a new process resumes from it
        run = archive.get_run("islands")
        loop = search(archive, run, iterations=14, islands=3, migration_every=2)
        resumed, more = archive.agents(run.key), archive.island_migrants(run.key)
        members = island_members(resumed, more, 3)
        evaluated = {a.key for a in resumed if a.status == AgentStatus.evaluated and a.behaves_as is None}
        for island in range(3):  # the loop's islands are the archive's
            assert set(loop.islands.view_of(island).ids.tolist()) == members[island] & evaluated
    assert [(a.id, a.island, a.parent_id) for a in resumed[: len(agents)]] == [
        (a.id, a.island, a.parent_id) for a in agents
    ]
    first = [(m.agent_id, m.island, m.after_proposals) for m in migrants]
    assert [(m.agent_id, m.island, m.after_proposals) for m in more][: len(first)] == first
    assert max(a.iteration for a in resumed) == 14
    check_parents_on_their_island(resumed, more, 3)


def test_the_selector_sees_only_the_members_of_the_proposals_island(tmp_path: Path) -> None:
    selector = RecordingGreedy()
    with Archive.at(tmp_path / "archive.db") as archive:
        run = new_run(archive)
        search(archive, run, iterations=9, selector=selector, islands=3, migration_every=2)
        agents, migrants = archive.agents(run.key), archive.island_migrants(run.key)
    members = island_members(agents, migrants, 3)
    seed = next(a.key for a in agents if a.operator == "seed")
    score = {a.key: a.score for a in agents}
    children = sorted((a for a in agents if a.iteration > 0), key=lambda a: a.iteration)
    assert len(selector.seen) == len(children) == 9  # one draw per proposal (no crossover)
    for child, seen in zip(children, selector.seen):
        island = (child.iteration - 1) % 3
        assert seed in seen and seen <= members[island], (child.iteration, seen, members[island])
        assert child.parent_id in seen
        assert score[child.parent_id] == max(score[agent_id] for agent_id in seen)  # greedy: the island's best
    later = selector.seen[-3:]
    assert len(set(later)) > 1, "the islands' views differ"


def test_one_island_is_the_loop_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_islands_read(self: Archive, run_id: int) -> list[IslandMigrant]:
        raise AssertionError("a run with one island reads no migrants")

    monkeypatch.setattr(Archive, "island_migrants", no_islands_read)
    runs = []
    for name, settings in (("default", {}), ("one", {"islands": 1, "migration_every": 1, "migrants": 5})):
        with Archive.at(tmp_path / name / "archive.db") as archive:
            run = new_run(archive, islands=1)
            loop = search(archive, run, iterations=6, **settings)
            assert loop.islands.draw(5) == (None, loop.view)  # the run's own view: nothing in between
            runs.append([(a.iteration, a.parent_id, a.genome_hash, a.status, a.score) for a in archive.agents(run.key)])
            assert {a.island for a in archive.agents(run.key)} == {None}
    assert runs[0] == runs[1]


# ----- migration rounds, exactly ----------------------------------------------------------------


def scored(archive: Archive, run: Run, view: ArchiveView, score: float, *, island: int | None, iteration: int) -> Agent:
    """An evaluated agent stored as the loop stores it, and added to the run's view as its book adds it."""
    agent = archive.add_agent(
        run.key,
        files={"main.py": f"x = {score}\n"},
        entry="main.py",
        parent_id=None if iteration == 0 else 1,
        iteration=iteration,
        operator="seed" if iteration == 0 else "diff",
        island=island,
    )
    archive.mark_evaluating(agent.key)
    agent = archive.finish_evaluation(agent.key, status=AgentStatus.evaluated, score=score)
    view.add(agent.key, score, agent.parent_id)
    return agent


def test_a_round_sends_each_islands_best_the_next_lacks_and_a_due_round_is_held_on_load(tmp_path: Path) -> None:
    with Archive.at(tmp_path / "archive.db") as archive:
        run = new_run(archive)
        view = ArchiveView()
        seed = scored(archive, run, view, 0.1, island=None, iteration=0)
        a = scored(archive, run, view, 0.5, island=0, iteration=1)
        c = scored(archive, run, view, 0.7, island=1, iteration=2)
        d = scored(archive, run, view, 0.2, island=2, iteration=3)
        b = scored(archive, run, view, 0.9, island=0, iteration=4)
        archive.add_agent(run.key, parent_id=seed.key, iteration=4, operator="diff", island=0)  # still proposed

        # Killed after the 4th proposal finished, before its round (every 2): loading holds it.
        islands = Islands(archive=archive, run_id=run.key, view=view, count=3, migration_every=2, migrants=2)
        held = islands.load(archive.agents(run.key))
        moves = [(m.agent_id, m.from_island, m.island, m.after_proposals) for m in held]
        # Island 0's two best (b, a) go to island 1; island 1's are c and the seed, who is everywhere; island 2's d.
        assert moves == [(b.key, 0, 1, 4), (a.key, 0, 1, 4), (c.key, 1, 2, 4), (d.key, 2, 0, 4)]
        stored = [(m.agent_id, m.from_island, m.island, m.after_proposals) for m in archive.island_migrants(run.key)]
        assert stored == sorted(moves, key=lambda m: (m[3], m[1], m[0]))  # by round, the island left, agent id
        assert islands.describe(held).startswith(f"migration after 4 finished proposals: #{b.key} (0.9000) island 0")
        views = [set(islands.view_of(i).ids.tolist()) for i in range(3)]
        assert views == [{seed.key, a.key, b.key, d.key}, {seed.key, c.key, a.key, b.key}, {seed.key, d.key, c.key}]
        assert (
            Islands(archive=archive, run_id=run.key, view=view, count=3, migration_every=2).load(
                archive.agents(run.key)
            )
            == []
        )  # loaded again: the round is stored, nothing is due

        # Proposals 5 and 6 finish (an iteration counts once, however many agents it made).
        e = scored(archive, run, view, 0.95, island=1, iteration=5)
        islands.admit(e)
        assert islands.finished(5) == [] and islands.finished(5) == []
        f = scored(archive, run, view, 0.3, island=2, iteration=6)
        islands.admit(f)
        second = [(m.agent_id, m.from_island, m.island, m.after_proposals) for m in islands.finished(6)]
        # Island 0's best two (b, a) are on island 1 already: none leaves it.
        assert second == [(e.key, 1, 2, 6), (b.key, 1, 2, 6), (c.key, 2, 0, 6), (f.key, 2, 0, 6)]
        assert islands.draw(7) == (0, islands.view_of(0)) and islands.draw(9)[0] == 2


def test_with_no_migrants_the_islands_never_exchange_agents(tmp_path: Path) -> None:
    with Archive.at(tmp_path / "archive.db") as archive:
        run = new_run(archive)
        view = ArchiveView()
        scored(archive, run, view, 0.1, island=None, iteration=0)
        islands = Islands(archive=archive, run_id=run.key, view=view, count=2, migration_every=1, migrants=0)
        assert islands.load(archive.agents(run.key)) == []
        for iteration in (1, 2, 3):
            agent = scored(archive, run, view, float(iteration), island=(iteration - 1) % 2, iteration=iteration)
            islands.admit(agent)
            assert islands.finished(iteration) == []
        assert archive.island_migrants(run.key) == []


def test_bad_island_settings_are_refused_with_the_fix() -> None:
    cases = {
        "search.islands=0": "use 1 island (one population, the default) up to 256 islands",
        "search.islands=1000": "up to 256 islands",
        "search.migration_every=0": "use a number of finished proposals >= 1 between migrations",
        "search.migrants=-1": "use a number of migrants >= 0 per island",
    }
    for setting, fix in cases.items():
        with pytest.raises(ConfigError, match=setting.split("=")[0]) as refused:
            load_config(sets=[setting])
        assert fix in str(refused.value)
    config = load_config(sets=["search.islands=4", "search.migration_every=5", "search.migrants=2"])
    settings = LoopSettings.of_run(config)
    assert (settings.islands, settings.migration_every, settings.migrants) == (4, 5, 2)
    assert (LoopSettings().islands, RunConfig().search.islands) == (1, 1)  # one population unless asked
    with pytest.raises(ValueError, match="islands and migration_every must be at least 1"):
        LoopSettings(islands=0)
    with pytest.raises(ConfigError, match="crossover alone cannot start a search .* on each of the search.islands"):
        check_can_start({"crossover"}, evaluated=5, islands=2)
    check_can_start({"crossover"}, evaluated=5, islands=1)
