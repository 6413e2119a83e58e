"""One child's evaluation, from the queue to its stored result: `ChildEvaluations`.

The loop hands it a queued agent; it marks the agent evaluating (unless it was stored so), runs its
evaluations through the executor (one, or `repeats`, each with task seeds of its own), stores the mean result
through the run's book, and returns what happened: `Evaluated` (the stored agent, its genome and result) or
`Faulted` (the sandbox or the gateway failed it, and it is marked failed). What follows (counters, the run's
notes, a repair of a failed run, retrying or aborting after faults) is the loop's to decide.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from cambrian.archive.commands import MarkEvaluating, MarkFailed
from cambrian.archive.models import Agent
from cambrian.archive.view import ArchiveView
from cambrian.evaluators.base import Genome
from cambrian.evaluators.runner import AgentResult
from cambrian.meta_agent.llm.gateway import GatewayError
from cambrian.meta_agent.search._book import LoopEvent, RunBook
from cambrian.meta_agent.search._executor import Executor
from cambrian.meta_agent.search._memory import PromptMemory
from cambrian.meta_agent.search._writes import GroupCommit
from cambrian.meta_agent.search.evaluation import EvaluationContext, mean_result
from cambrian.sandbox.base import SandboxError

#: Evaluations per agent once the seed's score is found to vary between runs (`evaluation.repeats = "auto"`).
NOISY_REPEATS = 3


@dataclass(frozen=True)
class Evaluated:
    """A child evaluated and stored: the agent as stored, its genome and its (mean) result."""

    agent: Agent
    genome: Genome
    result: AgentResult


@dataclass(frozen=True)
class Faulted:
    """A child the infrastructure failed (its evaluation did not finish): the agent, marked failed, and why."""

    agent: Agent
    error: SandboxError | GatewayError


class ChildEvaluations:
    """Evaluates queued children on the search split and stores their results.

    executor / context: where and with what the evaluations run. writes / book / memory / view: the run's
    group commit, record keeper, genome memory and archive view. repeats: evaluations per agent, or "auto"
    (one, but the seed of a new run twice: where its two scores differ, every agent from then on NOISY_REPEATS
    times, and a child that beats the run's best is evaluated once more). on_event: told of such a finding.
    """

    def __init__(
        self,
        *,
        executor: Executor,
        context: EvaluationContext,
        writes: GroupCommit,
        book: RunBook,
        memory: PromptMemory,
        view: ArchiveView,
        repeats: int | Literal["auto"],
        on_event: Callable[[LoopEvent], None],
    ) -> None:
        self.executor = executor
        self.context = context
        self.writes = writes
        self.book = book
        self.memory = memory
        self.view = view
        self.auto = repeats == "auto"
        self.repeats = 1 if repeats == "auto" else repeats
        self.on_event = on_event

    def resume(self, agents: Sequence[Agent]) -> None:
        """Take up a resumed run's finding: with auto repeats, a seed whose score varied means NOISY_REPEATS."""
        if self.auto and any(a.operator == "seed" and a.score_spread for a in agents):
            self.repeats = NOISY_REPEATS

    async def evaluate(self, agent_id: int, evaluating: Agent | None) -> Evaluated | Faulted:
        """Evaluate one queued agent (`evaluating`: stored as evaluating already; None: it is marked now) and store
        its result; a SandboxError or GatewayError marks it failed instead (`Faulted`)."""
        agent = evaluating if evaluating is not None else await self.writes(MarkEvaluating(agent_id))
        genome = self.memory.genome(str(agent.genome_hash))
        started = time.perf_counter()
        try:
            results = await self._evaluations(agent, genome)
        except (SandboxError, GatewayError) as exc:
            return Faulted(await self.writes(MarkFailed(agent.key, f"sandbox fault: {exc}")), exc)
        result, spread = mean_result(results)
        stored = await self.book.record_result(
            agent_id,
            genome,
            result,
            seconds=time.perf_counter() - started,
            view=self.view,
            repeats=len(results),
            spread=spread,
            parent_id=agent.parent_id,
        )
        return Evaluated(stored, genome, result)

    async def _evaluations(self, agent: Agent, genome: Genome) -> list[AgentResult]:
        """The agent's evaluations, first to last. An invalid first evaluation is the result."""
        results = [await self._run(agent, genome, repeat=0)]
        if not results[0].valid:
            return results
        if self.auto and agent.operator == "seed" and self.repeats == 1:
            results.append(await self._run(agent, genome, repeat=1))
            if not math.isclose(results[0].score, results[1].score, rel_tol=1e-9, abs_tol=1e-12):
                self.repeats = NOISY_REPEATS
                scores = f"{results[0].score:.6g} and then {results[1].score:.6g}"
                message = (
                    f"the seed program scored {scores}: its score varies between runs, so every agent is scored "
                    f"by the mean of {NOISY_REPEATS} evaluations (evaluation.repeats)"
                )
                self.on_event(LoopEvent("note", agent.key, 0, None, None, message))
        elif self.auto and self.repeats == 1 and self.book.best is not None and results[0].score > self.book.best[0]:
            results.append(await self._run(agent, genome, repeat=1))  # a new best, confirmed
        while len(results) < self.repeats:
            results.append(await self._run(agent, genome, repeat=len(results)))
        return results

    async def _run(self, agent: Agent, genome: Genome, *, repeat: int) -> AgentResult:
        """One evaluation on the search split through the executor (its `repeat`-th: task seeds of its own), with
        the agent's own FM channel when the context has a gateway."""
        return await self.executor.evaluate(
            self.context, genome, agent_id=agent.key, iteration=agent.iteration, split="search", repeat=repeat
        )
