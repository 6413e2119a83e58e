"""The search loop: propose children with the FM, evaluate them in the sandbox, store everything.

Proposers (bounded by FM concurrency) and evaluators (bounded by sandbox
concurrency) run side by side over an asyncio queue. Every archive write
happens on the event-loop thread; sandbox runs happen in worker threads.
The archive is the source of truth: a run killed at any instant resumes from
it, re-queueing `proposed`/`evaluating` agents and redoing missing iterations
(whose FM replies are usually cache hits, so they cost nothing again).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from cambrian.archive.commands import MarkEvaluating, MarkFailed
from cambrian.archive.models import Agent, Run, RunStatus
from cambrian.archive.selection import ParentSelector
from cambrian.archive.store import Archive
from cambrian.evaluators.base import Benchmark, Genome
from cambrian.evaluators.runner import AgentResult
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.errors import ConfigError, RunAborted, SeedFailed
from cambrian.meta_agent.llm import FMAuthError, FMBadRequest, FMUnavailable, LLMClient, derive_seed
from cambrian.meta_agent.llm.gateway import FMGateway, GatewayError
from cambrian.meta_agent.llm.models import model_label as label_of_model
from cambrian.meta_agent.operators import Operator, ParentInfo, PromptContext, Proposal, choose_operator, make_operator
from cambrian.meta_agent.search._behaviour import BehaviourSpace
from cambrian.meta_agent.search._book import Acceptance, LoopEvent, LoopOutcome, Origin, RunBook, new_proposal_id
from cambrian.meta_agent.search._compose import (
    check_operators,
    check_selector_needs,
    prompt_limits,
    selector_from_config,
)
from cambrian.meta_agent.search._executor import Executor, LocalExecutor
from cambrian.meta_agent.search._memory import _LRU, PromptMemory
from cambrian.meta_agent.search._proposals import Proposer
from cambrian.meta_agent.search._reflection import Outcome, RunNotes, changed_lines, result_text
from cambrian.meta_agent.search._scheduler import Scheduler
from cambrian.meta_agent.search._writes import GroupCommit
from cambrian.meta_agent.search.arms import operator_arms, restore_bandit
from cambrian.meta_agent.search.bandit import Arm
from cambrian.meta_agent.search.evaluation import EvaluationContext, failed_run, mean_result
from cambrian.sandbox.base import Sandbox, SandboxError

#: Consecutive infrastructure faults (sandbox or FM) after which the run stops for the user.
MAX_CONSECUTIVE_FAULTS = 5
#: Evaluations per agent once the seed's score is found to vary between runs (`evaluation.repeats = "auto"`).
NOISY_REPEATS = 3


class SearchLoop:
    """Runs (or resumes) one search until its budget is spent or it is stopped."""

    def __init__(
        self,
        *,
        archive: Archive,
        run: Run,
        config: RunConfig,
        benchmark: Benchmark,
        sandbox: Sandbox | None,
        selector: ParentSelector,
        operators: Mapping[str, Operator],
        llm: LLMClient | None,
        model_label: str,
        more_llms: Mapping[str, LLMClient] | None = None,
        gateway: FMGateway | None = None,
        on_event: Callable[[LoopEvent], None] | None = None,
        embed_endpoint: Callable[[list[str]], list[list[float]]] | None = None,
        executor: Executor | None = None,
    ) -> None:
        """selector: draws parents (`cambrian.archive.selection`, or any `ParentSelector`). operators: name -> operator
        for every operator `config.search.operators` weighs (the weights stay in the config).
        llm / model_label: the run's FM (`fm.model`); None only when every operator is local (ast_mutate).
        more_llms: label -> client for `fm.models`. gateway: serves the FM to agents under evaluation (each
        gets its own socket and budget); None: no FM. embed_endpoint: texts -> vectors for code embeddings
        (`search.novelty.embedding_model`); None: the local hashing vectorizer. executor: where children are
        evaluated (`LocalExecutor` over `sandbox` by default; a `RayExecutor` spreads their tasks over a
        cluster), and where a parent agent writing its child (self_modify) runs; the caller closes it.
        sandbox: this machine's, for the local executor; None with an executor of its own. `from_config`
        builds the selector and operators from their names in the config."""
        assert run.id is not None
        self.archive = archive
        self.run = run
        self.run_id: int = run.id
        self.config = config
        self.benchmark = benchmark
        if executor is None:
            if sandbox is None:
                raise ValueError("SearchLoop: give a sandbox, or an executor that evaluates elsewhere")
            executor = LocalExecutor(sandbox, slots=config.evaluation.concurrency)
        self.executor: Executor = executor
        self._infra_faults_before = self.executor.infra_faults
        self.model_label = model_label
        self.llms: dict[str, LLMClient] = {model_label: llm} if llm is not None else {}
        self.llms.update(more_llms or {})
        self.gateway = gateway
        self.on_event = on_event or (lambda event: None)
        self.selector = selector
        self.operators = dict(operators)
        check_operators(config, benchmark, self.operators, has_fm=bool(self.llms))
        # What every evaluation of the run shares, bound once: each call passes the agent, genome and split.
        self.context = EvaluationContext.of_run(config, benchmark, gateway)
        self.proposer = Proposer.from_config(
            config, context=self.context, operators=self.operators, llms=self.llms, executor=self.executor
        )
        self.behaviour = BehaviourSpace(benchmark, config.search.novelty, embed_endpoint=embed_endpoint)
        check_selector_needs(config, benchmark, selector, self.behaviour.names)
        # Agents (and so a parent writing its child) call evaluation.agent_model where one is set.
        agent_model = config.evaluation.agent_model
        self.arms = operator_arms(
            config.search.operators,
            self.operators,
            models=list(self.llms),
            gateway_model=label_of_model(agent_model) if agent_model else model_label,
        )
        self.bandit = restore_bandit(
            config.search.bandit, self.arms, archive.agents(self.run_id), weights=config.search.operators
        )
        self.scheduler = Scheduler(
            max_pending=config.search.max_pending or (self.executor.slots + config.fm.concurrency)
        )
        # Evaluations per agent: evaluation.repeats, or with auto 1 until the seed's score is found to vary.
        repeats = config.evaluation.repeats
        self._repeats = repeats if isinstance(repeats, int) else 1
        self.memory = PromptMemory(
            archive, failed_attempts_shown=config.search.failed_attempts_shown, inspirations=config.search.inspirations
        )
        # The lifecycle writes of the loop and its book, committed together when ready together.
        self.writes = GroupCommit(archive)
        self.book = RunBook(
            archive=archive,
            run_id=self.run_id,
            behaviour=self.behaviour,
            memory=self.memory,
            bandit=self.bandit,
            arms=self.arms,
            on_event=self.on_event,
            writes=self.writes,
        )
        # Children whose FM conversation may take their failed run back (fm.repair_rounds), until evaluated.
        self._repairable = _LRU[int, _Repairable](capacity=1024)
        self._editable = _LRU[tuple[str, int], bool](capacity=4096)
        self.view = self.behaviour.rebuild(archive, self.run_id, lambda hash_: self.memory.genome(hash_).files)
        every = config.search.reflect_every
        self.notes = RunNotes.restore(archive, self.run_id, every=every) if every and self.llms else None
        self._reflection: asyncio.Task[None] | None = None
        self._repairs: set[asyncio.Task[None]] = set()  # FM repairs of failed runs in flight: proposals too
        if {arm.operator for arm in self.arms} == {"crossover"} and len(self.view) < 2:
            raise ConfigError(
                "search.operators: crossover alone cannot start a search (it needs two evaluated agents)",
                fix="add another operator, e.g. {crossover = 0.3, diff = 0.7}",
            )

    @classmethod
    def from_config(
        cls, *, archive: Archive, run: Run, config: RunConfig, benchmark: Benchmark, **parts: Any
    ) -> SearchLoop:
        """The loop with the selector and operators the config names (built-in or plugins); `parts` are the
        other keyword arguments of `SearchLoop`."""
        return cls(
            archive=archive,
            run=run,
            config=config,
            benchmark=benchmark,
            selector=selector_from_config(config, benchmark),
            operators={name: make_operator(name, limits=prompt_limits(config)) for name in config.search.operators},
            **parts,
        )

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
        if self.config.evaluation.repeats == "auto" and any(a.operator == "seed" and a.score_spread for a in agents):
            self._repeats = NOISY_REPEATS  # resumed: the seed's score was found to vary
        if not agents:
            agents = [self.book.store_seed(self.benchmark.seed())]
        pending = self.archive.pending(self.run_id, max_attempts=self.config.evaluation.max_attempts)
        if not len(self.view) and not any(a.operator == "seed" for a in pending):
            raise SeedFailed(
                "no agent of this run was ever evaluated successfully, and no seed is left to evaluate",
                fix="start a new run; `cambrian show RUN 1` says why the seed failed",
            )
        for agent in pending:
            self.scheduler.enqueue(agent.key)

        done_iterations = {a.iteration for a in agents if a.iteration > 0}
        todo = iter([i for i in range(1, self.config.budget.iterations + 1) if i not in done_iterations])

        evaluators = [asyncio.create_task(self._evaluate_worker()) for _ in range(self.executor.slots)]
        proposers = [asyncio.create_task(self._propose_worker(todo)) for _ in range(self.config.fm.concurrency)]
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
        limit = self.config.budget.wall_seconds
        if limit is None:
            return
        await asyncio.sleep(limit)
        self.scheduler.counters.budget_stop = True
        self.request_stop(f"wall-time budget of {limit:g} s reached")

    def _finish(self) -> LoopOutcome:
        outcome = self.book.outcome(self.config, self.scheduler.counters)
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
            usd = self.config.budget.usd
            if usd is not None and self.scheduler.counters.spent_usd >= usd:
                self.scheduler.counters.budget_stop = True
                self.request_stop(f"USD budget of {usd:g} reached (spent {self.scheduler.counters.spent_usd:.4f})")
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
            except FMAuthError as exc:
                self._abort(exc)
            except FMUnavailable as exc:
                self.scheduler.counters.fm_failure = exc
                self.scheduler.counters.consecutive_faults += 1
                if self.scheduler.counters.consecutive_faults >= MAX_CONSECUTIVE_FAULTS:
                    self._abort(exc)

    async def _propose(self, iteration: int) -> bool:
        """One iteration: choose parent(s), operator and model, make a child, and queue it for evaluation.

        A child too similar to an existing agent is stored as invalid (the rejection is recorded) and the
        same iteration proposes again, up to `search.novelty.max_reproposals` times; so does one identical to
        an agent the run has, which is no new child and is not stored (but at the last try): its FM usage is
        charged to the child the iteration stores, and the next attempt's prompt shows the change it made.
        False when the sandbox failed (self_modify), so the worker does not reset the count of faults in a row.
        """
        rng = np.random.default_rng([self.config.seed, iteration])
        parent_id = int(self.selector.select(self.view, 1, rng)[0])
        parent, failed_attempts = self.memory.parent(parent_id)
        arm = self._choose_arm(rng, parent)
        second_parent_id = self._second_parent(parent_id, rng) if arm.operator == "crossover" else None
        ctx = PromptContext(
            contract=self.benchmark.contract,
            benchmark=self.benchmark.name,
            parent=parent,
            second_parent=self.memory.parent_info(second_parent_id) if second_parent_id is not None else None,
            failed_attempts=failed_attempts,
            inspirations=self.memory.inspirations(self.view, exclude=parent_id),
            notes=self.notes.text if self.notes is not None else None,
        )
        origin = Origin(iteration, parent_id, second_parent_id, arm, new_proposal_id())
        last = self.config.search.novelty.max_reproposals
        unstored = Proposal(None)  # the usage of attempts that repeated a program the run has: not stored
        for attempt in range(last + 1):
            if self.bandit is not None:
                self.bandit.record_pull(arm)
            try:
                proposal = await self.proposer.propose(
                    arm.operator,
                    ctx,
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
            repairable = _Repairable(arm.operator, ctx, proposal, arm.model, iteration, attempt)
            accepted = await self.accept(proposal, origin, repairable=repairable, last_try=attempt == last)
            if accepted.stored and accepted.child_id is None:  # refused before any evaluation
                reason = proposal.reason or "identical to an agent of the run, or too similar to one"
                self._note(arm.operator, parent, None, None, reason)
            if accepted.done:
                return True
            if accepted.stored:  # a near-duplicate, stored with its FM calls: the next attempt is a proposal anew
                origin = dataclasses.replace(origin, proposal_id=new_proposal_id())
            if not accepted.stored:
                if self.bandit is not None:
                    self.bandit.cancel_pull(arm)  # never stored: a resumed run's replay does not see it either
                unstored = proposal
                # The same prompt tends to bring the same reply: the next attempt is shown what this one did.
                assert proposal.genome is not None  # an unstored proposal rebuilt a known program
                change = changed_lines(parent.genome.files, proposal.genome.files) or "(no line changed)"
                ctx = dataclasses.replace(ctx, repeated=[*ctx.repeated, change])
        return True

    async def accept(
        self,
        proposal: Proposal,
        origin: Origin,
        *,
        repairable: _Repairable | None = None,
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
        change = changed_lines(parent.genome.files, child.files) if child is not None else ""
        self.notes.record(Outcome(operator, change, result_text(parent.score, score, reason)))
        if self.notes.due() and not self.scheduler.stopping:
            self._reflection = asyncio.create_task(self._reflect())

    async def _reflect(self) -> None:
        assert self.notes is not None
        done = self.archive.iterations_done(self.run_id)
        try:
            await self.notes.reflect(
                self.llms[self.model_label],
                contract=self.benchmark.contract,
                seed=derive_seed(self.config.seed, 0, done),
                iteration=None,
            )
        except (FMUnavailable, FMBadRequest) as exc:
            self.on_event(
                LoopEvent(
                    "note",
                    0,
                    done,
                    None,
                    self.book.best_score(),
                    f"the run's notes stay as they were: the FM could not write new ones ({exc})",
                )
            )

    def _choose_arm(self, rng: np.random.Generator, parent: ParentInfo) -> Arm:
        """The (model, operator) of this proposal: the bandit's choice, or operator by weight and model uniformly,
        among the operators that can edit `parent` (`Operator.cannot_edit`: no FM call is spent on one that
        cannot). When none can, the draw is over all of them and the operator's refusal names the cause.

        Crossover needs two evaluated agents: until there are, it is not drawn.
        """
        arms = self.arms if len(self.view) >= 2 else [arm for arm in self.arms if arm.operator != "crossover"]
        able = [arm for arm in arms if self._can_edit(arm.operator, parent)]
        arms = able or arms
        if self.bandit is not None:
            return self.bandit.choose(rng, allowed=arms)
        weights = {name: w for name, w in self.config.search.operators.items() if any(a.operator == name for a in arms)}
        operator = choose_operator(weights, rng)
        models = [arm.model for arm in arms if arm.operator == operator]
        return Arm(models[int(rng.integers(len(models)))] if len(models) > 1 else models[0], operator)

    def _can_edit(self, operator: str, parent: ParentInfo) -> bool:
        """Whether `operator` can try to edit `parent` (remembered per agent: parents are drawn again and again)."""
        key = (operator, parent.agent_id)
        able = self._editable.get(key)
        if able is None:
            able = self.operators[operator].cannot_edit(parent.genome) is None
            self._editable.put(key, able)
        return able

    def _second_parent(self, parent_id: int, rng: np.random.Generator) -> int:
        """Crossover's other parent: drawn by the same strategy, a different agent (else the best other one)."""
        for candidate in self.selector.select(self.view, 8, rng).tolist():
            if int(candidate) != parent_id:
                return int(candidate)
        order, _ = self.view.ranking()
        return next(int(self.view.ids[row]) for row in order if int(self.view.ids[row]) != parent_id)

    # ----- evaluating ----------------------------------------------------------------------

    async def _evaluate_worker(self) -> None:
        while True:
            agent_id, started = await self.scheduler.next_child()
            try:
                if not self.scheduler.stopping:  # else it stays queued (or evaluating): resumed as such
                    self.scheduler.counters.in_flight.add(agent_id)
                    await self._evaluate(agent_id, started)
            except Exception as exc:  # noqa: BLE001 - an unexpected bug must stop the run, not hang it
                self._abort(RunAborted(f"evaluating agent {agent_id} raised {type(exc).__name__}: {exc}"))
            finally:
                await self.scheduler.done(agent_id)

    async def _evaluate(self, agent_id: int, evaluating: Agent | None) -> None:
        agent = evaluating  # stored as evaluating already, or marked now
        if agent is None:
            agent = await self.writes(MarkEvaluating(agent_id))
        genome = self.memory.genome(str(agent.genome_hash))
        started = time.perf_counter()
        try:
            results = await self._evaluations(agent, genome)
        except (SandboxError, GatewayError) as exc:
            await self._on_sandbox_fault(agent, exc)
            return
        self.scheduler.counters.consecutive_faults = 0
        seconds = time.perf_counter() - started
        result, spread = mean_result(results)
        agent = await self.book.record_result(
            agent_id,
            genome,
            result,
            seconds=seconds,
            view=self.view,
            repeats=len(results),
            spread=spread,
            parent_id=agent.parent_id,
        )
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

    async def _repair_failed_run(self, agent: Agent, repairable: _Repairable, failure: str) -> None:
        """Send a child's failed run back to the FM in the conversation that wrote it; the answer becomes a new
        child of the same parent and iteration (its repair_note names the failure). Skipped once stopping."""
        if self.scheduler.stopping or not failure:
            return
        arm = Arm(repairable.model, repairable.operator)
        parent_id = agent.parent_id
        assert parent_id is not None  # a child being repaired came from a proposal, which has a parent
        origin = Origin(repairable.iteration, parent_id, agent.second_parent_id, arm, new_proposal_id())
        if self.bandit is not None:
            self.bandit.record_pull(arm)
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
            if self.bandit is not None:
                self.bandit.cancel_pull(arm)
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

    async def _evaluations(self, agent: Agent, genome: Genome) -> list[AgentResult]:
        """The agent's evaluations, first to last (`evaluation.repeats`): one, or `repeats`, each with task seeds of
        its own. With auto, the seed program of a new run is evaluated twice, and where its two scores differ
        every agent from then on is evaluated NOISY_REPEATS times; a child that beats the run's best once more.
        An invalid first evaluation is the result."""
        results = [await self._run_in_sandbox(agent, genome, repeat=0)]
        if not results[0].valid:
            return results
        auto = self.config.evaluation.repeats == "auto"
        if auto and agent.operator == "seed" and self._repeats == 1:
            results.append(await self._run_in_sandbox(agent, genome, repeat=1))
            if not math.isclose(results[0].score, results[1].score, rel_tol=1e-9, abs_tol=1e-12):
                self._repeats = NOISY_REPEATS
                scores = f"{results[0].score:.6g} and then {results[1].score:.6g}"
                message = (
                    f"the seed program scored {scores}: its score varies between runs, so every agent is scored "
                    f"by the mean of {NOISY_REPEATS} evaluations (evaluation.repeats)"
                )
                self.on_event(LoopEvent("note", agent.key, 0, None, None, message))
        elif auto and self._repeats == 1 and self.book.best is not None and results[0].score > self.book.best[0]:
            results.append(await self._run_in_sandbox(agent, genome, repeat=1))  # a new best, confirmed
        while len(results) < self._repeats:
            results.append(await self._run_in_sandbox(agent, genome, repeat=len(results)))
        return results

    async def _run_in_sandbox(self, agent: Agent, genome: Genome, *, repeat: int) -> AgentResult:
        """Evaluate on the search split through the executor (its `repeat`-th time: task seeds of its own), with the
        agent's own FM channel when the gateway is on."""
        return await self.executor.evaluate(
            self.context, genome, agent_id=agent.key, iteration=agent.iteration, split="search", repeat=repeat
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
        agent = await self.writes(MarkFailed(agent.key, f"sandbox fault: {exc}"))
        self.on_event(LoopEvent("failed", agent.key, agent.iteration, None, self.book.best_score(), str(exc)))
        if self._count_fault(exc):
            return
        if agent.eval_attempts < self.config.evaluation.max_attempts:
            self.scheduler.enqueue(agent.key)
        elif agent.operator == "seed" and not self.scheduler.has_parent.is_set():
            self._abort(RunAborted(f"the seed could not be evaluated: {exc}", fix=getattr(exc, "fix", "")))


def with_usage(proposal: Proposal, earlier: Proposal) -> Proposal:
    """`proposal` charged with the FM usage of `earlier` too (attempts of its iteration that were not stored)."""
    if not (earlier.prompt_tokens or earlier.completion_tokens or earlier.cost_usd or earlier.fm_seconds):
        return proposal
    return dataclasses.replace(
        proposal,
        prompt_tokens=proposal.prompt_tokens + earlier.prompt_tokens,
        completion_tokens=proposal.completion_tokens + earlier.completion_tokens,
        cost_usd=proposal.cost_usd + earlier.cost_usd,
        fm_seconds=proposal.fm_seconds + earlier.fm_seconds,
    )


@dataclass(frozen=True)
class _Repairable:
    """What it takes to send a child's failed run back to the FM that wrote it."""

    operator: str
    ctx: PromptContext
    proposal: Proposal
    model: str
    iteration: int
    attempt: int
