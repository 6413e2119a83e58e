"""The search loop: propose children with the FM, evaluate them in the sandbox, store everything.

`SearchLoop` is composed of built objects: the archive and the run, a selector that draws parents, an operator
mix that draws each proposal's operator and model, a proposer that runs it, an executor and the evaluation
context its evaluations share, a budget and a reporter (`on_event`). `loop_from_config`
(meta_agent.search._from_config) builds them from a run's config; a test or a script may build them by hand.

Proposers (bounded by `LoopSettings.proposers`) and evaluators (bounded by the executor's slots) run side by
side over the scheduler's queue. Every archive write happens on the event-loop thread; sandbox runs happen in
worker threads. The archive is the source of truth: a run killed at any instant resumes from it, re-queueing
`proposed`/`evaluating` agents and redoing missing iterations (whose FM replies are usually cache hits, so they
cost nothing again).

One candidate's path, in file order: the loop draws its parent (the selector, over its island's members:
`Islands`, _islands.py) and arm (`OperatorMix`), the `Proposer` (_proposals.py) makes it, `RunBook.vet`
(_book.py) passes it through the gates and the book stores it, the `Scheduler` (_scheduler.py) queues it,
`ChildEvaluations` (_evaluating.py) evaluates it through the `Executor` (_executor.py) and the book stores its
result.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable

from cambrian.archive.models import Agent, Run, RunStatus
from cambrian.archive.selection import ParentSelector
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Benchmark, Genome
from cambrian.meta_agent.config import BudgetConfig, NoveltyConfig
from cambrian.meta_agent.errors import RunAborted, SeedFailed
from cambrian.meta_agent.llm import EmbeddingUnavailable, FMAuthError, FMUnavailable, derive_seed
from cambrian.meta_agent.llm.gateway import FMGateway, GatewayError
from cambrian.meta_agent.operators import ParentInfo, Proposal
from cambrian.meta_agent.search._behaviour import BehaviourSpace
from cambrian.meta_agent.search._book import Acceptance, LoopEvent, LoopOutcome, Origin, RunBook, new_proposal_id
from cambrian.meta_agent.search._compose import check_can_start, check_operators, check_selector_needs
from cambrian.meta_agent.search._drawing import ProposalDraws
from cambrian.meta_agent.search._evaluating import ChildEvaluations, Faulted
from cambrian.meta_agent.search._executor import Executor
from cambrian.meta_agent.search._islands import Islands
from cambrian.meta_agent.search._memory import _LRU, PromptMemory
from cambrian.meta_agent.search._proposals import Proposer, Repairable, with_usage
from cambrian.meta_agent.search._reflection import RunNotes, changed_lines
from cambrian.meta_agent.search._scheduler import Scheduler
from cambrian.meta_agent.search._settings import LoopSettings
from cambrian.meta_agent.search._writes import GroupCommit
from cambrian.meta_agent.search.arms import OperatorMix
from cambrian.meta_agent.search.bandit import Arm
from cambrian.meta_agent.search.evaluation import EvaluationContext, failed_run
from cambrian.sandbox.base import SandboxError

#: Consecutive infrastructure faults (sandbox or FM) after which the run stops for the user.
MAX_CONSECUTIVE_FAULTS = 5


class SearchLoop:
    """Runs (or resumes) one search until its budget is spent or it is stopped."""

    def __init__(
        self,
        *,
        archive: Archive,
        run: Run,
        selector: ParentSelector,
        operators: OperatorMix,
        proposer: Proposer,
        executor: Executor,
        context: EvaluationContext,
        budget: BudgetConfig,
        settings: LoopSettings | None = None,
        behaviour: BehaviourSpace | None = None,
        memory: PromptMemory | None = None,
        notes: RunNotes | None = None,
        on_event: Callable[[LoopEvent], None] | None = None,
    ) -> None:
        """archive / run: where the search is recorded (a new run, or one to resume). selector: draws parents
        (`cambrian.archive.selection`, or any `ParentSelector`). operators: the operators, their weights and arms,
        and how one is drawn per proposal. proposer: runs the drawn operator with its FM (it holds the FM clients).
        executor: where children are evaluated, and where a parent agent writing its child (self_modify) runs; the
        caller closes it. context: what every evaluation shares (the benchmark, limits, the agents' gateway).
        budget: iterations, and optionally USD and wall seconds. settings: pacing and repeats (default
        `LoopSettings()`). behaviour: descriptors, novelty and the duplicate gate (default: the benchmark's, with
        the default novelty settings). memory: what prompts show of parents (default `PromptMemory(archive)`).
        notes: the run's notes, rewritten by the FM every few proposals (None: none). on_event: the reporter.
        The parts are checked against the benchmark before anything runs (a ConfigError names a misfit)."""
        self.archive = archive
        self.run = run
        self.run_id: int = run.key
        self.benchmark: Benchmark = context.benchmark
        self.selector = selector
        self.mix = operators
        self.proposer = proposer
        self.executor = executor
        self.context = context
        self.budget = budget
        self.settings = settings = settings or LoopSettings()
        self.behaviour = behaviour or BehaviourSpace(self.benchmark, NoveltyConfig())
        self.memory = memory or PromptMemory(archive)
        self.notes = notes
        self.on_event = on_event or (lambda event: None)
        check_operators(operators.weights, self.benchmark, operators.operators, has_fm=bool(proposer.llms))
        check_selector_needs(self.behaviour.config.k, self.benchmark, selector, self.behaviour.names)
        self._infra_faults_before = executor.infra_faults
        self.scheduler = Scheduler(max_pending=settings.max_pending or (executor.slots + settings.proposers))
        # The lifecycle writes of the loop and its book, committed together when ready together.
        self.writes = GroupCommit(archive)
        self.view = self.behaviour.rebuild(archive, self.run_id, lambda hash_: self.memory.genome(hash_).files)
        self.islands = Islands(
            archive=archive,
            run_id=self.run_id,
            view=self.view,
            count=settings.islands,
            migration_every=settings.migration_every,
            migrants=settings.migrants,
        )
        self.book = RunBook(
            archive=archive,
            run_id=self.run_id,
            behaviour=self.behaviour,
            memory=self.memory,
            bandit=operators.bandit,
            arms=operators.arms,
            on_event=self.on_event,
            writes=self.writes,
            islands=self.islands,
        )
        self.evaluations = ChildEvaluations(
            executor=executor,
            context=context,
            writes=self.writes,
            book=self.book,
            memory=self.memory,
            view=self.view,
            repeats=settings.repeats,
            on_event=self.on_event,
        )
        # Children whose FM conversation may take their failed run back (fm.repair_rounds), until evaluated.
        self._repairable = _LRU[int, Repairable](capacity=1024)
        self._reflection: asyncio.Task[None] | None = None
        self._repairs: set[asyncio.Task[None]] = set()  # FM repairs of failed runs in flight: proposals too
        self.draws = ProposalDraws(
            contract=self.benchmark.contract,
            benchmark=self.benchmark.name,
            selector=selector,
            islands=self.islands,
            mix=operators,
            memory=self.memory,
            notes=notes,
            seed=settings.seed,
        )
        check_can_start({arm.operator for arm in operators.arms}, evaluated=len(self.view), islands=settings.islands)

    @property
    def gateway(self) -> FMGateway | None:
        """The gateway serving the FM to agents under evaluation (the context's), closed by whoever made it."""
        return self.context.gateway

    # ----- control -------------------------------------------------------------------------

    def request_stop(self, reason: str = "stopped by the user") -> None:
        """Stop proposing, at once: FM calls in flight (proposals, repairs of failed runs, the run's notes) are
        cancelled (a local model's call could hold a Ctrl-C for minutes); evaluations already running finish
        and are stored."""
        self.scheduler.request_stop(reason)
        for task in (*self._repairs, *([self._reflection] if self._reflection is not None else [])):
            task.cancel()

    def _abort(self, exc: Exception) -> None:
        self.scheduler.abort(exc)
        self.request_stop(str(exc))

    # ----- main ----------------------------------------------------------------------------

    async def run_until_done(self) -> LoopOutcome:
        self.archive.set_run_status(self.run_id, RunStatus.running)
        self.scheduler.counters.spent_usd = self.archive.cost_summary(self.run_id).cost_usd
        if len(self.view):
            self.scheduler.has_parent.set()
        agents = self.archive.agents(self.run_id)
        self.book.load(agents)
        self.evaluations.resume(agents)
        if not agents:
            agents = [self.book.store_seed(self.benchmark.seed())]
        pending = self.archive.pending(self.run_id, max_attempts=self.settings.max_attempts)
        if not len(self.view) and not any(a.operator == "seed" for a in pending):
            raise SeedFailed(
                "no agent of this run was ever evaluated successfully, and no seed is left to evaluate",
                fix="start a new run; `cambrian show RUN 1` says why the seed failed",
            )
        for agent in pending:
            self.scheduler.enqueue(agent.key)

        done_iterations = {a.iteration for a in agents if a.iteration > 0}
        todo = iter([i for i in range(1, self.budget.iterations + 1) if i not in done_iterations])

        evaluators = [asyncio.create_task(self._evaluate_worker()) for _ in range(self.executor.slots)]
        proposers = [asyncio.create_task(self._propose_worker(todo)) for _ in range(self.settings.proposers)]
        watchdog = asyncio.create_task(self._wall_clock())
        drained = asyncio.create_task(self.scheduler.drain(proposers))
        stopped = asyncio.create_task(self.scheduler.stop.wait())
        try:
            await asyncio.wait({drained, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if self.scheduler.stopping:
                for task in proposers:
                    task.cancel()
                await asyncio.gather(*proposers, return_exceptions=True)
                # Evaluators finish what they hold and take nothing new.
                await self.scheduler.wait_in_flight()
        finally:
            reflection = [self._reflection] if self._reflection is not None else []
            for running in (*evaluators, watchdog, drained, stopped, *reflection):
                running.cancel()
            await asyncio.gather(*evaluators, watchdog, drained, stopped, *reflection, return_exceptions=True)
            self.writes.flush()  # writes of cancelled callers still commit: nothing submitted is dropped
            self.proposer.close()
            await self.executor.finish()
        return self._finish()

    async def _wall_clock(self) -> None:
        limit = self.budget.wall_seconds
        if limit is None:
            return
        await asyncio.sleep(limit)
        self.scheduler.counters.budget_stop = True
        self.request_stop(f"wall-time budget of {limit:g} s reached")

    def _finish(self) -> LoopOutcome:
        outcome = self.book.outcome(
            self.scheduler.counters, iterations=self.budget.iterations, max_attempts=self.settings.max_attempts
        )
        outcome.infra_faults = self.executor.infra_faults - self._infra_faults_before
        if self.scheduler.counters.abort is not None:
            raise self.scheduler.counters.abort
        return outcome

    # ----- proposing -----------------------------------------------------------------------

    async def _propose_worker(self, todo) -> None:
        while not self.scheduler.stopping:
            await self.scheduler.has_parent.wait()
            if self.scheduler.stopping:
                return
            if (spent := self.scheduler.spent_all(self.budget.usd)) is not None:
                self.request_stop(spent)
                return
            await self.scheduler.wait_for_room()
            if self.scheduler.stopping:
                return
            iteration = next(todo, None)
            if iteration is None:
                return
            try:
                if await self._propose(iteration):
                    self.scheduler.counters.consecutive_faults = 0
            except (FMAuthError, EmbeddingUnavailable) as exc:  # retrying cannot help: the user must act
                self._abort(exc)
            except FMUnavailable as exc:
                self.scheduler.counters.fm_failure = exc
                self.scheduler.counters.consecutive_faults += 1
                if self.scheduler.counters.consecutive_faults >= MAX_CONSECUTIVE_FAULTS:
                    self._abort(exc)
            except Exception as exc:  # noqa: BLE001 - a bug must fail the run, not end it as if it were done
                self._abort(RunAborted(f"proposing iteration {iteration} raised {type(exc).__name__}: {exc}"))

    async def _propose(self, iteration: int) -> bool:
        """One iteration: choose parent(s), operator and model, make a child, and queue it for evaluation.

        A child too similar to an existing agent is stored as invalid (the rejection is recorded) and the
        same iteration proposes again, up to `search.novelty.max_reproposals` times; so does one identical to
        an agent the run has, which is no new child and is not stored (but at the last try): its FM usage is
        charged to the child the iteration stores, and the next attempt's prompt shows the change it made (on an
        operator of another kind when one can edit the parent: `ProposalDraws.after_repeat`).
        False when the sandbox failed (self_modify), so the worker does not reset the count of faults in a row.
        """
        start = self.draws.draw(iteration)
        origin = Origin(iteration, start.parent_id, start.second_parent_id, start.arm, new_proposal_id(), start.island)
        last = self.settings.max_reproposals
        unstored = Proposal(None)  # the usage of attempts that repeated a program the run has: not stored
        for attempt in range(last + 1):
            arm = start.arm
            self.mix.record_pull(arm)
            try:
                proposal = await self.proposer.propose(
                    arm.operator,
                    start.ctx,
                    model=arm.model,
                    iteration=iteration,
                    attempt=attempt,
                    proposal_id=origin.proposal_id,
                )
            except (SandboxError, GatewayError) as exc:
                # self_modify runs the parent in the sandbox: a dead sandbox is a fault, not the parent's.
                fault = f"sandbox fault while the parent wrote its child: {exc}"
                await self._store_invalid(with_usage(Proposal(None), unstored), origin, reason=fault)
                self._count_fault(exc)
                return False
            self.scheduler.counters.spent_usd += proposal.cost_usd
            proposal = with_usage(proposal, unstored)
            repairable = Repairable(arm.operator, start.ctx, proposal, arm.model, iteration, attempt)
            accepted = await self.accept(proposal, origin, repairable=repairable, last_try=attempt == last)
            if accepted.stored and accepted.child_id is None:  # refused before any evaluation
                reason = proposal.reason or "identical to an agent of the run, or too similar to one"
                self._note(arm.operator, start.parent, None, None, reason)
            if accepted.done:
                return True
            if accepted.stored:  # a near-duplicate, stored with its FM calls: the next attempt is a proposal anew
                origin = dataclasses.replace(origin, proposal_id=new_proposal_id())
            if not accepted.stored:
                self.mix.cancel_pull(arm)  # never stored: a resumed run's replay does not see it either
                unstored = proposal
                # The same prompt tends to bring the same reply: the next attempt is shown what this one did,
                # and asks another kind of question when one can (`ProposalDraws.after_repeat`).
                assert proposal.genome is not None  # an unstored proposal rebuilt a known program
                change = changed_lines(start.parent.genome.files, proposal.genome.files) or "(no line changed)"
                start = self.draws.after_repeat(start, attempt + 1, change)
                origin = dataclasses.replace(origin, arm=start.arm, second_parent_id=start.second_parent_id)
        return True

    async def accept(
        self,
        proposal: Proposal,
        origin: Origin,
        *,
        repairable: Repairable | None = None,
        last_try: bool = True,
        keep_duplicate: bool = True,
    ) -> Acceptance:
        """Store a proposal as the loop does: through the book's gates (`RunBook.vet`), a fresh child stored
        (evaluating already when a slot waits for it) and queued; keep_duplicate=False: a program the run has is
        never stored, even at the last try. A queued child whose FM conversation can take its failed run back
        is remembered for that."""
        verdict = await self.book.vet(proposal, origin, last_try=last_try and keep_duplicate)
        if verdict.stored:
            self.scheduler.counters.proposals += 1
            self.scheduler.counters.invalid += 1
        if verdict.fresh is None:
            return Acceptance(done=verdict.done, stored=verdict.stored, duplicate_of=verdict.duplicate_of)
        starts_now = self.scheduler.idle_slot()
        child = await self.book.store_child(proposal, verdict.fresh, origin, starts_now=starts_now)
        self.scheduler.counters.proposals += 1
        self.scheduler.enqueue(child.key, child if starts_now else None)
        if repairable is not None and proposal.conversation and proposal.repairs_left > 0:
            self._repairable.put(child.key, repairable)
        return Acceptance(done=True, child_id=child.key)

    async def _store_invalid(self, proposal: Proposal, origin: Origin, *, reason: str) -> None:
        await self.book.store_invalid(proposal, origin, reason=reason)
        self.scheduler.counters.proposals += 1
        self.scheduler.counters.invalid += 1

    def _note(
        self, operator: str, parent: ParentInfo, child: Genome | None, score: float | None, reason: str | None
    ) -> None:
        """Remember a finished proposal for the run's notes, and start a reflection when one is due."""
        if self.notes is None:
            return
        self.notes.record_proposal(operator, parent, child, score, reason)
        if self.notes.due() and not self.scheduler.stopping:
            self._reflection = asyncio.create_task(self._reflect())

    async def _reflect(self) -> None:
        assert self.notes is not None
        done = self.archive.iterations_done(self.run_id)
        try:
            failure = await self.notes.refresh(
                contract=self.benchmark.contract, seed=derive_seed(self.settings.seed, 0, done)
            )
        except Exception as exc:  # noqa: BLE001 - a bug in the notes must stop the run, not vanish with their task
            self._abort(RunAborted(f"writing the run's notes raised {type(exc).__name__}: {exc}"))
            return
        if failure is not None:
            self.on_event(LoopEvent("note", 0, done, None, self.book.best_score(), failure))

    # ----- evaluating ----------------------------------------------------------------------

    async def _evaluate_worker(self) -> None:
        while True:
            agent_id, started = await self.scheduler.next_child()
            try:
                if not self.scheduler.stopping:  # else it stays queued (or evaluating): resumed as such
                    self.scheduler.counters.in_flight.add(agent_id)
                    await self._evaluate(agent_id, started)
            except Exception as exc:  # noqa: BLE001 - an unexpected bug must stop the run, not hang it
                bug = RunAborted(f"evaluating agent {agent_id} raised {type(exc).__name__}: {exc}")
                self._abort(exc if isinstance(exc, EmbeddingUnavailable) else bug)  # that one names its fix
            finally:
                await self.scheduler.done(agent_id)

    async def _evaluate(self, agent_id: int, evaluating: Agent | None) -> None:
        """Evaluate a queued child (`ChildEvaluations`) and act on what happened: count it, note it for the run's
        notes, let proposing start once a parent exists, stop a run whose seed failed, repair a failed run."""
        evaluated = await self.evaluations.evaluate(agent_id, evaluating)
        if isinstance(evaluated, Faulted):
            await self._on_sandbox_fault(evaluated.agent, evaluated.error)
            return
        self.scheduler.counters.consecutive_faults = 0
        agent, genome, result = evaluated.agent, evaluated.genome, evaluated.result
        if result.valid:
            self.scheduler.counters.evaluated += 1
        else:
            self.scheduler.counters.invalid += 1
        if self.notes is not None and agent.parent_id is not None:
            self._note(
                agent.operator, self.memory.parent_info(agent.parent_id), genome, agent.score, agent.invalid_reason
            )
        if result.valid:
            self.scheduler.has_parent.set()
        elif agent.operator == "seed" and not self.scheduler.has_parent.is_set():
            self._abort(
                SeedFailed(
                    f"the {self.benchmark.name} seed program failed: {result.invalid_reason}",
                    fix="check the benchmark's seed and the evaluation limits (evaluation.timeout_s, "
                    "evaluation.memory_mb); `cambrian show RUN 1` has the seed's logs",
                )
            )
        repairable = self._repairable.pop(agent_id)
        if repairable is not None and failed_run(result):
            repair = asyncio.create_task(
                self._repair_failed_run(agent, repairable, result.invalid_reason or result.feedback)
            )
            self._repairs.add(repair)
            try:
                await asyncio.wait({repair})  # returns when it is done or cancelled by a stop, never raises for it
            finally:
                self._repairs.discard(repair)
                repair.cancel()  # this worker itself cancelled meanwhile: the repair goes with it
            if not repair.cancelled():
                repair.result()  # what it raised, raised here

    async def _repair_failed_run(self, agent: Agent, repairable: Repairable, failure: str) -> None:
        """Send a child's failed run back to the FM in the conversation that wrote it; the answer becomes a new
        child of the same parent and iteration (its repair_note names the failure). Skipped once stopping."""
        if self.scheduler.stopping or not failure:
            return
        arm = Arm(repairable.model, repairable.operator)
        parent_id = agent.parent_id
        assert parent_id is not None  # a child being repaired came from a proposal, which has a parent
        origin = Origin(repairable.iteration, parent_id, agent.second_parent_id, arm, new_proposal_id(), agent.island)
        self.mix.record_pull(arm)
        try:
            proposal = await self.proposer.fix(
                repairable.operator,
                repairable.ctx,
                repairable.proposal,
                failure,
                model=repairable.model,
                iteration=repairable.iteration,
                attempt=repairable.attempt,
                proposal_id=origin.proposal_id,
            )
        except (FMUnavailable, FMAuthError) as exc:
            self.on_event(
                LoopEvent(
                    "failed",
                    agent.key,
                    agent.iteration,
                    None,
                    self.book.best_score(),
                    f"no repair of agent {agent.id}: {exc}",
                )
            )
            return
        self.scheduler.counters.spent_usd += proposal.cost_usd
        follow_up = dataclasses.replace(repairable, proposal=proposal)
        accepted = await self.accept(proposal, origin, repairable=follow_up, keep_duplicate=False)
        if not accepted.stored:  # the failed program (or another the run has) sent back: no new child
            self.mix.cancel_pull(arm)
            self.on_event(
                LoopEvent(
                    "note",
                    agent.key,
                    agent.iteration,
                    None,
                    self.book.best_score(),
                    f"the repair of agent {agent.id} rebuilt agent {accepted.duplicate_of}: not stored",
                )
            )

    def _count_fault(self, exc: SandboxError | GatewayError) -> bool:
        """Count an infrastructure fault; True (and the run aborted) when there were too many in a row. Once
        the run is stopping, faults abort nothing: a second Ctrl-C kills the runs in progress on purpose."""
        self.scheduler.counters.consecutive_faults += 1
        if self.scheduler.counters.consecutive_faults < MAX_CONSECUTIVE_FAULTS or self.scheduler.stopping:
            return False
        self._abort(
            RunAborted(
                f"the sandbox failed {self.scheduler.counters.consecutive_faults} times in a row; last: {exc}",
                fix=getattr(exc, "fix", "") or "check the sandbox with `cambrian sandbox check`, then resume",
            )
        )
        return True

    async def _on_sandbox_fault(self, agent: Agent, exc: SandboxError | GatewayError) -> None:
        """An evaluation the infrastructure failed (`agent` marked failed): counted as a fault, and the agent
        queued again until its attempts are spent (a seed that never ran aborts the run)."""
        self.on_event(LoopEvent("failed", agent.key, agent.iteration, None, self.book.best_score(), str(exc)))
        if self._count_fault(exc):
            return
        if agent.eval_attempts < self.settings.max_attempts:
            self.scheduler.enqueue(agent.key)
        elif agent.operator == "seed" and not self.scheduler.has_parent.is_set():
            self._abort(RunAborted(f"the seed could not be evaluated: {exc}", fix=getattr(exc, "fix", "")))
