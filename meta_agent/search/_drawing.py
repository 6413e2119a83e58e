"""Where a proposal starts: its island, parent, (model, operator) arm, crossover's second parent and prompt
context; and where the next attempt starts when one rebuilt a program the run already has.

A proposal whose attempt rebuilt a known program tries again (`search.novelty.max_reproposals`), shown the
change that attempt made. The same operator on the same parent tends to bring the same program back anyway:
on a parent with one statement (job order's `return [... sorted(jobs, key=...)]`) `lines` and `knob` ask for
that line every time, and qwen2.5-coder-1.5b wrote its grandparent's key back on all three attempts of eight
proposals out of 46 (the 40-proposal suite at b0bc454, seed 0). So the next attempt moves to an operator of a
kind the proposal has not tried (`Operator.kind`: `knob` asks what `lines` asks), drawn as the first was (the
bandit's choice, or by weight) among those that can edit the parent; the same operator again only when no
other can.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from cambrian.archive.selection import ParentSelector
from cambrian.archive.view import ArchiveView
from cambrian.meta_agent.operators import ParentInfo, PromptContext
from cambrian.meta_agent.search._islands import Islands, second_parent
from cambrian.meta_agent.search._memory import PromptMemory
from cambrian.meta_agent.search._reflection import RunNotes
from cambrian.meta_agent.search.arms import OperatorMix
from cambrian.meta_agent.search.bandit import Arm

__all__ = ["ProposalDraws", "Start"]

_REPEAT_SALT = 0xA7  # the draw after a repeat has a stream of its own, apart from the operator's (env.rng)


@dataclass(frozen=True)
class Start:
    """One attempt's starting point. island: the proposal's island (None with one island). view: the island's
    agents the parents were drawn from. tried: the operators earlier attempts of this proposal used (each
    rebuilt a program the run has)."""

    iteration: int
    island: int | None
    view: ArchiveView
    arm: Arm
    ctx: PromptContext
    second_parent_id: int | None = None
    tried: frozenset[str] = frozenset()

    @property
    def parent(self) -> ParentInfo:
        return self.ctx.parent

    @property
    def parent_id(self) -> int:
        return self.ctx.parent.agent_id


class ProposalDraws:
    """Draws each proposal's start from the run's parts: the islands' views, the selector, the operator mix and
    what prompts show (`PromptMemory`, and the run's notes as they are when a proposal starts). Every draw is
    seeded by the run seed, the iteration and the attempt."""

    def __init__(
        self,
        *,
        contract: str,
        benchmark: str,
        selector: ParentSelector,
        islands: Islands,
        mix: OperatorMix,
        memory: PromptMemory,
        notes: RunNotes | None,
        seed: int,
    ) -> None:
        self.contract = contract
        self.benchmark = benchmark
        self.selector = selector
        self.islands = islands
        self.mix = mix
        self.memory = memory
        self.notes = notes
        self.seed = seed

    def draw(self, iteration: int) -> Start:
        """The first attempt's start: an island, a parent by the selector, an arm among those that can edit it."""
        rng = np.random.default_rng([self.seed, iteration])
        island, view = self.islands.draw(iteration)  # one island (the default): the run's view
        parent_id = int(self.selector.select(view, 1, rng)[0])
        parent, failed_attempts = self.memory.parent(parent_id)
        arm = self.mix.choose(rng, parent_id, parent.genome, pairs=len(view) >= 2)
        ctx = PromptContext(
            contract=self.contract,
            benchmark=self.benchmark,
            parent=parent,
            failed_attempts=failed_attempts,
            inspirations=self.memory.inspirations(view, exclude=parent_id),
            notes=self.notes.text if self.notes is not None else None,
        )
        return self._with_arm(Start(iteration, island, view, arm, ctx), arm, rng)

    def after_repeat(self, start: Start, attempt: int, change: str) -> Start:
        """The start of `attempt` after one (from `start`) that rebuilt a program the run has by `change`: shown
        the change, on an operator of a kind the proposal has not tried when one can edit the parent (else the
        same arm again)."""
        tried = start.tried | {start.arm.operator}
        rng = np.random.default_rng([self.seed, start.iteration, attempt, _REPEAT_SALT])
        ctx = dataclasses.replace(start.ctx, repeated=[*start.ctx.repeated, change])
        again = dataclasses.replace(start, ctx=ctx, tried=tried)
        other = self.mix.choose_other(
            rng, start.parent_id, start.parent.genome, pairs=len(start.view) >= 2, tried=tried
        )
        return again if other is None else self._with_arm(again, other, rng)

    def _with_arm(self, start: Start, arm: Arm, rng: np.random.Generator) -> Start:
        """`start` on `arm`, with crossover's second parent drawn from the same view (none for other operators)."""
        second = second_parent(self.selector, start.view, start.parent_id, rng) if arm.operator == "crossover" else None
        ctx = dataclasses.replace(
            start.ctx, second_parent=self.memory.parent_info(second) if second is not None else None
        )
        return dataclasses.replace(start, arm=arm, ctx=ctx, second_parent_id=second)
