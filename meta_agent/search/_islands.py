"""Where a proposal's parents come from: `Islands`, populations a run searches apart whose best members join the
next island now and then (OpenEvolve's and ShinkaEvolve's lever for diversity), and `second_parent`.

With `LoopSettings.islands` = n > 1, the proposal of iteration k draws its parents on island (k - 1) mod n: the
run's selector runs over that island's view, which holds the island's members alone (`cambrian.archive.islands`:
the agents whose home it is, the agents that migrated to it, the seed); crossover's second parent and the
prompt's inspirations come from the same view, and the child's home island is that island (a repair of a
child keeps the child's). Round robin by iteration, so a resumed run draws each iteration's island as the
first invocation did.

Every `migration_every` finished proposals (iterations with an agent refused or scored: a proposal finishes
when its child's result is known, so a round weighs the child of the proposal that brought it) comes a
migration round: each island's `migrants` best evaluated members (equal scores: the lower id first) join the
next island, island i's island i + 1 and the last's the first, but those the next island has already (the
seed is on every island); all are chosen from the islands as they stood before the round. A round's migrants
are stored in one transaction (`Archive.add_island_migrants`, named by the round: after that many finished
proposals) before any island takes them in.

The archive is the source of truth: `load` rebuilds every island from the stored home islands and migrants,
and holds a round that came due but was never stored (a stop between a proposal's result and its round). A
round that moved nobody leaves no row, so a resumed run holds the latest such round again, with the islands
as they stand then.

With one island (the default) nothing here reads or writes anything: the island is the run's view.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from cambrian.archive.islands import island_members
from cambrian.archive.models import Agent, AgentStatus, IslandMigrant
from cambrian.archive.selection import ParentSelector
from cambrian.archive.store import Archive
from cambrian.archive.view import NO_PARENT, ArchiveView


class Islands:
    """The islands of one search: the view each proposal draws its parents from, and migration between them.

    archive / run_id: where membership is stored. view: the run's view of every evaluated agent (the loop's,
    kept current by its book); each island's view holds copies of its members' rows. count, migration_every and
    migrants: as `LoopSettings.islands`, `.migration_every` and `.migrants`. Call `load` before the first draw.
    """

    def __init__(
        self,
        *,
        archive: Archive,
        run_id: int,
        view: ArchiveView,
        count: int = 1,
        migration_every: int = 10,
        migrants: int = 1,
    ) -> None:
        if count < 1 or migration_every < 1 or migrants < 0:
            raise ValueError(
                f"islands: count and migration_every must be >= 1 and migrants >= 0, not {count}, "
                f"{migration_every} and {migrants}"
            )
        self.archive = archive
        self.run_id = run_id
        self.view = view
        self.count = count
        self.migration_every = migration_every
        self.migrants = migrants
        self._views: list[ArchiveView] = []
        self._finished: set[int] = set()  # iterations with an agent refused or scored
        self._last_round = 0  # the finished proposals the last migration round was held after

    def draw(self, iteration: int) -> tuple[int | None, ArchiveView]:
        """The island the proposal of `iteration` draws its parents on (round robin), and that island's view;
        (None, the run's view) with one island."""
        if self.count == 1:
            return None, self.view
        island = (iteration - 1) % self.count
        return island, self._views[island]

    def view_of(self, island: int) -> ArchiveView:
        """The view of `island`'s evaluated members (the run's view with one island)."""
        return self._views[island] if self.count > 1 else self.view

    def load(self, agents: Sequence[Agent]) -> list[IslandMigrant]:
        """Rebuild the islands from the run's `agents` (every one, as stored) and its stored migrants, and hold a
        migration round that came due and was never stored; returns that round's migrants."""
        if self.count == 1:
            return []
        migrants = self.archive.island_migrants(self.run_id)
        self._views = [_subview(self.view, members) for members in island_members(agents, migrants, self.count)]
        done = (AgentStatus.evaluated, AgentStatus.invalid)
        self._finished = {agent.iteration for agent in agents if agent.iteration > 0 and agent.status in done}
        self._last_round = max((migrant.after_proposals for migrant in migrants), default=0)
        return self._migrate_when_due()

    def admit(self, agent: Agent) -> None:
        """An agent just evaluated, once it is in the run's view (valid, and no no-op), joins its home island's
        view; one with no home island (the seed) joins every island's."""
        if self.count == 1 or agent.key not in self.view:
            return
        row = self.view.index_of(agent.key)
        islands = self._views if agent.island is None else [self._views[agent.island % self.count]]
        for island in islands:
            if agent.key not in island:
                _copy_row(self.view, row, island)

    def finished(self, iteration: int) -> list[IslandMigrant]:
        """An agent of proposal `iteration` was refused or scored (an iteration counts once, however many agents
        it made; the seed's, iteration 0, not at all); returns the migrants of the migration round that comes due
        with it (none: no round due, or nobody to move)."""
        if self.count == 1 or iteration <= 0:
            return []
        self._finished.add(iteration)
        return self._migrate_when_due()

    def describe(self, migrants: Sequence[IslandMigrant]) -> str:
        """What a migration round did, in words for the user: which agents (with their scores) went where."""
        moves = ", ".join(
            f"#{m.agent_id} ({float(self.view.scores[self.view.index_of(m.agent_id)]):.4f}) "
            f"island {m.from_island} -> {m.island}"
            for m in migrants
        )
        return f"migration after {migrants[0].after_proposals} finished proposals: {moves}"

    def _migrate_when_due(self) -> list[IslandMigrant]:
        due = len(self._finished) // self.migration_every * self.migration_every
        if due <= self._last_round or self.migrants == 0:
            return []
        self._last_round = due
        chosen = [
            migrant
            for source in range(self.count)
            for migrant in self._emigrants(source, (source + 1) % self.count, after=due)
        ]
        stored = self.archive.add_island_migrants(chosen)
        for migrant in stored:
            _copy_row(self.view, self.view.index_of(migrant.agent_id), self._views[migrant.island])
        return stored

    def _emigrants(self, source: int, target: int, *, after: int) -> list[IslandMigrant]:
        """Island `source`'s `migrants` best members (by score, then the lower id) but those island `target` has."""
        view, there = self._views[source], self._views[target]
        best = np.lexsort((view.ids, -view.scores))[: self.migrants]
        return [
            IslandMigrant(
                agent_id=agent_id, island=target, run_id=self.run_id, from_island=source, after_proposals=after
            )
            for agent_id in view.ids[best].tolist()
            if agent_id not in there
        ]


def second_parent(selector: ParentSelector, view: ArchiveView, parent_id: int, rng: np.random.Generator) -> int:
    """Crossover's other parent, from the same view as the first (its island's): drawn by the same strategy, a
    different agent (else the best other one). The view holds at least two agents."""
    for candidate in selector.select(view, 8, rng).tolist():
        if int(candidate) != parent_id:
            return int(candidate)
    order, _ = view.ranking()
    return next(int(view.ids[row]) for row in order if int(view.ids[row]) != parent_id)


def _subview(view: ArchiveView, members: set[int]) -> ArchiveView:
    """A view of `view`'s rows whose agents are `members`, in `view`'s order, with every column."""
    rows = np.flatnonzero(np.isin(view.ids, np.fromiter(members, dtype=np.int64, count=len(members))))
    return ArchiveView.from_arrays(
        view.ids[rows],
        view.scores[rows],
        parent_ids=view.parent_ids[rows],
        successes=view.successes[rows],
        failures=view.failures[rows],
        descriptors=view.descriptors[rows],
        embeddings=view.embeddings[rows],
        descriptor_names=view.descriptor_names,
        descriptor_bounds=view.descriptor_bounds,
        knn_k=view.knn_k,
    )


def _copy_row(source: ArchiveView, row: int, target: ArchiveView) -> None:
    """Append `source`'s row `row` to `target`, every column but those `target` derives (children, clades,
    neighbours)."""
    parent = int(source.parent_ids[row])
    target.add(
        int(source.ids[row]),
        float(source.scores[row]),
        None if parent == NO_PARENT else parent,
        successes=float(source.successes[row]),
        failures=float(source.failures[row]),
        descriptor=source.descriptors[row],
        embedding=source.embeddings[row],
    )
