"""What the search loop writes down: proposals and evaluation results in the archive, the best agent so
far, the events progress displays read, and the run's outcome.

`SearchLoop` decides what happens when (the asyncio pipeline, stopping, faults) with its `Scheduler`;
`RunBook` records it and returns what happened (`Verdict`, the stored `Agent`), and the loop acts on that:
the book never calls back into the loop. Every archive write of a search goes through here, on the
event-loop thread; the lifecycle writes are awaited through `GroupCommit`, which commits the writes ready
at the same moment together.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from cambrian.archive.commands import AddAgent, FinishEvaluation
from cambrian.archive.models import Agent, AgentStatus, IslandMigrant, RunStatus
from cambrian.archive.novelty import near_duplicate
from cambrian.archive.store import Archive, genome_hash
from cambrian.archive.view import ArchiveView
from cambrian.evaluators.base import Genome
from cambrian.evaluators.runner import AgentResult
from cambrian.meta_agent.operators import Proposal
from cambrian.meta_agent.search._behaviour import BehaviourSpace, TaskRow
from cambrian.meta_agent.search._islands import Islands
from cambrian.meta_agent.search._memory import _LRU, PromptMemory
from cambrian.meta_agent.search._scheduler import Counters
from cambrian.meta_agent.search._writes import GroupCommit
from cambrian.meta_agent.search.arms import cost_of
from cambrian.meta_agent.search.bandit import Arm, Bandit, improvement_reward
from cambrian.meta_agent.search.evaluation import evaluation_row


@dataclass(frozen=True)
class LoopEvent:
    """What just happened, for progress displays.

    `kind`: seed | proposed | rejected (bad edit) | invalid | evaluated | failed | note (a fact about the run
    the user should read, in `message`).
    """

    kind: str
    agent_id: int
    iteration: int
    score: float | None
    best_score: float | None
    message: str = ""
    operator: str = ""  # the operator that made the agent ("seed" for the seed), where the event is about one
    parent_id: int | None = None


@dataclass(frozen=True)
class Origin:
    """Where a proposal belongs: its iteration, its parent(s), the (model, operator) arm that made it, its id
    (`new_proposal_id`), which every FM call made for it carries and the agent it becomes stores, and the island
    its parents were drawn on (None: a run without islands), which becomes the child's home."""

    iteration: int
    parent_id: int
    second_parent_id: int | None
    arm: Arm
    proposal_id: str | None = None
    island: int | None = None


def new_proposal_id() -> str:
    """A fresh proposal id: random, so no two proposals of any run, resumed or not, share one."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class Fresh:
    """A proposal that passed the gates: a new child to store (`RunBook.store_child`)."""

    genome_hash: str
    embedding: np.ndarray | None  # the code embedding, when the similarity gate is on


@dataclass(frozen=True)
class Verdict:
    """What the gates made of a proposal (`RunBook.vet`).

    fresh: a new child, for the caller to store. Otherwise the proposal was stored as invalid (`stored`; `done`
    when its iteration ends, not after a near-duplicate), or, a program the run has already (`duplicate_of`)
    and not the iteration's last try, not stored at all: the iteration proposes again.
    """

    fresh: Fresh | None = None
    stored: bool = False
    done: bool = True
    duplicate_of: int | None = None


@dataclass(frozen=True)
class Acceptance:
    """What became of a proposal: done (the iteration ends), the child queued (its id), whether a row was stored,
    and the agent whose program it rebuilt (unstored: the iteration proposes again)."""

    done: bool
    child_id: int | None = None
    stored: bool = True
    duplicate_of: int | None = None


@dataclass
class LoopOutcome:
    status: RunStatus
    reason: str
    best_agent_id: int | None
    best_score: float | None
    seed_score: float | None
    proposals: int  # proposals made by this invocation
    evaluated: int  # agents evaluated by this invocation
    invalid: int
    cost_usd: float
    fix: str = ""  # what to do, when the run failed for a reason the user can fix (the FM, the sandbox)
    infra_faults: int = 0  # task runs lost to infrastructure (a dead Ray node) and run again elsewhere


class RunBook:
    """Records one search invocation: agents stored, results written, the best so far, events."""

    def __init__(
        self,
        *,
        archive: Archive,
        run_id: int,
        behaviour: BehaviourSpace,
        memory: PromptMemory,
        bandit: Bandit | None,
        arms: list[Arm],
        on_event: Callable[[LoopEvent], None],
        writes: GroupCommit,
        islands: Islands,
    ) -> None:
        """on_event: the reporter, told each event. writes: the loop's group commit, through which the
        lifecycle writes reach the archive. islands: the run's islands (one, by default), told of every agent
        evaluated and every proposal refused or scored: a migration round is held when one is due."""
        self.archive = archive
        self.run_id = run_id
        self.behaviour = behaviour
        self.memory = memory
        self.bandit = bandit
        self.arms = arms
        self.on_event = on_event
        self.write = writes
        self.islands = islands
        # Children being stored now: genome hash -> (the store's end, the code embedding when the similarity
        # gate is on). A child identical or too similar to one of them waits for that store's outcome.
        self._storing: dict[str, tuple[asyncio.Future[None], np.ndarray | None]] = {}
        self.best: tuple[float, int] | None = None  # (score, agent id)
        self._genome_owner: dict[str, int] = {}  # genome hash -> first agent with it: the duplicate gate
        # Agent -> each search task's output hash: what a child's outputs are compared with.
        self._outputs = _LRU[int, dict[str, str | None]](capacity=4096)

    def best_score(self) -> float | None:
        return self.best[0] if self.best else None

    def load(self, agents: list[Agent]) -> None:
        """Resume: what the archive already holds (its best agent, and who owns each genome)."""
        best = self.archive.best(self.run_id, n=1)
        if best:
            self.best = (float(best[0].score or 0.0), best[0].key)  # evaluated: it has a score
        for agent in reversed(agents):
            if agent.genome_hash is not None:
                self._genome_owner[agent.genome_hash] = agent.key
        self._migrated(self.islands.load(agents), 0)

    def store_seed(self, seed: Genome) -> Agent:
        agent = self.archive.add_agent(self.run_id, files=dict(seed.files), entry=seed.entry, operator="seed")
        self._genome_owner[str(agent.genome_hash)] = agent.key
        if self.behaviour.gate is not None:
            self.behaviour.gate.add(agent.key, self.behaviour.code_embedding(seed.files))
        self.on_event(LoopEvent("seed", agent.key, 0, None, None, "seed program stored"))
        return agent

    # ----- proposals ---------------------------------------------------------------------------

    async def vet(self, proposal: Proposal, origin: Origin, *, last_try: bool = True) -> Verdict:
        """Pass a proposal through the gates: a fresh child for the caller to store (`store_child`, with no
        await in between: the gates see a child from the moment its store starts), or one stored as invalid
        with its reason.

        A near-duplicate is stored invalid and the iteration may propose again; a program identical to an
        agent the run has is no new child: unless it is the iteration's `last_try` it is not stored at all
        (its FM calls go to the child the iteration stores).
        """
        if proposal.genome is None:
            await self.store_invalid(proposal, origin, reason=str(proposal.reason))
            return Verdict(stored=True)
        child_hash = genome_hash(proposal.genome.files)
        gate_on = self.behaviour.gate is not None
        embedding = await self.behaviour.code_embedding_async(proposal.genome.files) if gate_on else None
        await self._wait_for_similar_stores(child_hash, embedding)
        duplicate = self._genome_owner.get(child_hash)
        if duplicate is not None:
            if not last_try:
                return Verdict(done=False, duplicate_of=duplicate)
            reason = f"the edit produced code identical to agent {duplicate}; make a change that differs"
            await self.store_invalid(proposal, origin, reason=reason)
            return Verdict(stored=True)
        refused = self._near_duplicate(embedding) if embedding is not None else None
        if refused is not None:
            await self.store_invalid(proposal, origin, reason=refused)
            return Verdict(stored=True, done=False)
        return Verdict(fresh=Fresh(child_hash, embedding))

    async def _wait_for_similar_stores(self, child_hash: str, embedding: np.ndarray | None) -> None:
        """Wait while a child identical to this one (or, with the similarity gate on, one within its threshold)
        is being stored: the gates see a child only once it is stored, and that store's outcome decides."""
        gate = self.behaviour.gate
        while True:
            pending = [
                store
                for hash_, (store, other) in self._storing.items()
                if hash_ == child_hash
                or (
                    gate is not None
                    and embedding is not None
                    and other is not None
                    and near_duplicate(embedding, other[None, :], threshold=gate.threshold) is not None
                )
            ]
            if not pending:
                return
            await asyncio.wait(pending)

    def _near_duplicate(self, embedding: np.ndarray) -> str | None:
        """Why the child is refused, when the code-similarity gate finds an agent too close; None otherwise."""
        assert self.behaviour.gate is not None
        near = self.behaviour.gate.check(embedding)
        if near is None:
            return None
        return (
            f"near-duplicate of agent {near.agent_id} (code similarity {near.similarity:.4f} >= "
            f"{self.behaviour.gate.threshold}); make a more substantial change"
        )

    async def store_child(self, proposal: Proposal, fresh: Fresh, origin: Origin, *, starts_now: bool) -> Agent:
        """Store a child `vet` passed: evaluating already when `starts_now` (an evaluation slot waits for it:
        one archive transaction instead of two), else proposed. The caller queues it for evaluation."""
        assert proposal.genome is not None
        storing = asyncio.get_running_loop().create_future()
        self._storing[fresh.genome_hash] = (storing, fresh.embedding)
        try:
            agent = await self._write_child(proposal, starts_now, origin)
        finally:
            del self._storing[fresh.genome_hash]
            storing.set_result(None)
        self._genome_owner[fresh.genome_hash] = agent.key
        self.memory.remember_genome(fresh.genome_hash, proposal.genome)
        if self.behaviour.gate is not None and fresh.embedding is not None:
            self.behaviour.gate.add(agent.key, fresh.embedding)
        self.on_event(LoopEvent("proposed", agent.key, origin.iteration, None, self.best_score(), proposal.note))
        return agent

    async def _write_child(self, proposal: Proposal, starts_now: bool, origin: Origin) -> Agent:
        assert proposal.genome is not None
        status = AgentStatus.evaluating if starts_now else AgentStatus.proposed
        return await self.write(
            _add_agent(
                self.run_id, proposal, origin, status, files=dict(proposal.genome.files), entry=proposal.genome.entry
            )
        )

    async def store_invalid(self, proposal: Proposal, origin: Origin, *, reason: str) -> Agent:
        """Store a proposal that is no child to evaluate, with its reason; the bandit arm that made it earns 0."""
        agent = await self.write(_add_agent(self.run_id, proposal, origin, AgentStatus.invalid, invalid_reason=reason))
        self.memory.remember_failure(origin.parent_id, f"{origin.arm.operator}: {reason}")
        if self.bandit is not None:
            self.bandit.record_outcome(origin.arm, reward=0.0, cost=cost_of(agent))
        self.on_event(
            LoopEvent(
                "rejected",
                agent.key,
                origin.iteration,
                None,
                self.best_score(),
                reason,
                origin.arm.operator,
                origin.parent_id,
            )
        )
        self._migrated(self.islands.finished(origin.iteration), origin.iteration)
        return agent

    def _migrated(self, migrants: list[IslandMigrant], iteration: int) -> None:
        """Tell the user of a migration round's migrants (none: no round was held). The islands count a proposal
        finished once its child is refused or scored (`store_invalid`, `record_result`)."""
        if migrants:
            self.on_event(LoopEvent("note", 0, iteration, None, self.best_score(), self.islands.describe(migrants)))

    # ----- evaluations -------------------------------------------------------------------------

    async def record_result(
        self,
        agent_id: int,
        genome: Genome,
        result: AgentResult,
        *,
        seconds: float,
        view: ArchiveView,
        repeats: int = 1,
        spread: float | None = None,
        parent_id: int | None = None,
    ) -> Agent:
        """Write an evaluation's outcome: the agent's status, score and task rows; a valid agent joins the
        view (with its behaviour columns) and may become the best; the bandit arm that made it is credited.

        repeats / spread: the evaluations `result` is the mean of, and their scores' standard deviation. A
        child (of `parent_id`) whose outputs equal its parent's on every task (`behaves_as`) is a no-op: it is
        scored as its parent, stays out of the view and earns its arm nothing, however its text differs.
        """
        evaluations = [evaluation_row(task) for task in result.task_results]
        outputs = {task.task_id: task.output_hash for task in result.task_results}
        twin = parent_id if result.valid and parent_id is not None and self._same_outputs(parent_id, outputs) else None
        score = result.score
        if twin is not None and twin in view:
            score = float(view.scores[view.index_of(twin)])
        columns = None
        if result.valid and twin is None:
            tasks = [TaskRow(t.task_id, t.score, t.passed, t.executed) for t in result.task_results]
            code = await self.behaviour.column_embedding(genome.files)
            columns = self.behaviour.columns(
                files=genome.files, tasks=tasks, descriptor=result.descriptor, code_embedding=code
            )
        agent = await self.write(
            FinishEvaluation(
                agent_id,
                status=AgentStatus.evaluated if result.valid else AgentStatus.invalid,
                score=score if result.valid else None,
                stage_reached=result.stage_reached,
                invalid_reason=None if result.valid else result.invalid_reason,
                feedback=result.feedback,
                eval_seconds=seconds,
                evaluations=evaluations,
                descriptor=columns.stored_descriptor if columns is not None else None,
                repeats=repeats,
                score_spread=spread,
                behaves_as=twin,
            )
        )
        self._reward_bandit(agent, view)
        if result.valid:
            self._outputs.put(agent_id, outputs)
        if twin is not None:
            self.memory.remember_failure(twin, f"{agent.operator}: the edit changed no output on any task (a no-op)")
            self.on_event(
                LoopEvent(
                    "evaluated",
                    agent_id,
                    agent.iteration,
                    score,
                    self.best_score(),
                    f"no-op: the same outputs as agent {twin} on every task",
                    agent.operator,
                    agent.parent_id,
                )
            )
        elif columns is not None:
            self.memory.remember_parent(agent, genome)
            view.add(
                agent_id,
                float(score),
                agent.parent_id,
                successes=columns.successes,
                failures=columns.failures,
                descriptor=columns.descriptor,
                embedding=columns.embedding,
            )
            self.islands.admit(agent)
            if self.best is None or score > self.best[0]:
                self.best = (float(score), agent_id)
            self.on_event(
                LoopEvent(
                    "evaluated",
                    agent_id,
                    agent.iteration,
                    score,
                    self.best_score(),
                    "",
                    agent.operator,
                    agent.parent_id,
                )
            )
        else:
            reason = result.invalid_reason or ""
            if reason:
                self.memory.remember_failure(agent.parent_id, f"{agent.operator}: {reason}")
            self.on_event(
                LoopEvent(
                    "invalid",
                    agent_id,
                    agent.iteration,
                    None,
                    self.best_score(),
                    reason,
                    agent.operator,
                    agent.parent_id,
                )
            )
        self._migrated(self.islands.finished(agent.iteration), agent.iteration)
        return agent

    def _same_outputs(self, parent_id: int, outputs: dict[str, str | None]) -> bool:
        """Whether every task's output hash is known and equal to the parent's on the same tasks."""
        known = self._outputs.get(parent_id)
        if known is None:  # evaluated before this invocation: its stored rows
            rows = [row for row in self.archive.evaluations(parent_id) if row.split == "search"]
            known = {row.task_id: row.output_hash for row in rows}
            self._outputs.put(parent_id, known)
        return bool(outputs) and known == outputs and all(value is not None for value in outputs.values())

    def _reward_bandit(self, agent: Agent, view: ArchiveView) -> None:
        """Credit the child's (model, operator) arm: its improvement over its parent (0 if invalid)."""
        if self.bandit is None or agent.iteration <= 0:
            return
        arm = Arm(agent.model or "", agent.operator)
        if arm not in self.arms:
            return
        parent_score = None
        if agent.parent_id is not None and agent.parent_id in view:
            parent_score = float(view.scores[view.index_of(agent.parent_id)])
        child_score = agent.score if agent.status == AgentStatus.evaluated else None
        self.bandit.record_outcome(arm, reward=improvement_reward(child_score, parent_score), cost=cost_of(agent))

    # ----- the end -----------------------------------------------------------------------------

    def outcome(self, counters: Counters, *, iterations: int, max_attempts: int) -> LoopOutcome:
        """The run's status and why, stored on the run, with what this invocation did (`counters`); iterations:
        the run's budget; max_attempts: evaluations lost to faults before an agent is given up."""
        c = counters
        fix = str(getattr(c.abort or c.fm_failure, "fix", "") or "")
        iterations_left = iterations - self.archive.iterations_done(self.run_id)
        if c.abort is not None:
            status, reason = RunStatus.failed, str(c.abort)
        elif c.fm_failure is not None and not c.budget_stop and iterations_left > 0 and not c.stop_reason:
            # The proposers ran out of iterations to try because the FM failed them: that is a failure.
            status, reason = RunStatus.failed, f"the FM failed: {c.fm_failure}"
        else:
            pending = self.archive.pending(self.run_id, max_attempts=max_attempts)
            if c.budget_stop or (not pending and iterations_left <= 0):
                status = RunStatus.finished
                reason = c.stop_reason or f"iteration budget of {iterations} reached"
            else:
                status, reason = RunStatus.stopped, c.stop_reason or "stopped"
        self.archive.set_run_status(self.run_id, status, error=reason if status == RunStatus.failed else None)
        seed_agents = self.archive.seeds(self.run_id)
        return LoopOutcome(
            status=status,
            reason=reason,
            best_agent_id=self.best[1] if self.best else None,
            best_score=self.best_score(),
            seed_score=seed_agents[0].score if seed_agents else None,
            proposals=c.proposals,
            evaluated=c.evaluated,
            invalid=c.invalid,
            cost_usd=c.spent_usd,
            fix=fix if status == RunStatus.failed else "",
        )


def _add_agent(
    run_id: int,
    proposal: Proposal,
    origin: Origin,
    status: AgentStatus,
    *,
    files: dict[str, str] | None = None,
    entry: str | None = None,
    invalid_reason: str | None = None,
) -> AddAgent:
    """The command storing `proposal` as an agent of `origin` (its parents, arm, iteration and proposal id), with
    what its FM calls cost."""
    return AddAgent(
        run_id,
        status=status,
        files=files,
        entry=entry,
        parent_id=origin.parent_id,
        second_parent_id=origin.second_parent_id,
        operator=origin.arm.operator,
        model=origin.arm.model or None,
        iteration=origin.iteration,
        invalid_reason=invalid_reason,
        proposal_id=origin.proposal_id,
        island=origin.island,
        repair_note=proposal.repair_note,
        prompt_tokens=proposal.prompt_tokens,
        completion_tokens=proposal.completion_tokens,
        cost_usd=proposal.cost_usd,
        fm_seconds=proposal.fm_seconds,
    )
