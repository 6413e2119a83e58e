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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from archive.models import Agent, AgentStatus, Run, RunStatus
from archive.selection import ParentSelector, selector_needs, selector_parameters
from archive.store import Archive, genome_hash
from evaluators.base import Benchmark, Genome
from evaluators.runner import AgentResult
from meta_agent.config import RunConfig
from meta_agent.errors import ConfigError, RunAborted, SeedFailed
from meta_agent.llm import FMAuthError, FMGateway, FMUnavailable, GatewayError, LLMClient
from meta_agent.operators import AnyOperator, PromptContext, choose_operator, make_operator, supports_self_modify
from meta_agent.plugins import SELECTORS, make_selector
from meta_agent.search._arms import Arm, cost_of, improvement_reward, operator_arms, restore_bandit
from meta_agent.search._behaviour import BehaviourSpace, TaskRow
from meta_agent.search._evaluation import evaluate_in_sandbox, evaluation_row
from meta_agent.search._memory import _LRU, PromptMemory
from meta_agent.search._proposals import Proposal, Proposer, agent_fm_budget, run_limits
from sandbox.base import Sandbox, SandboxError

#: Consecutive infrastructure faults (sandbox or FM) after which the run stops for the user.
MAX_CONSECUTIVE_FAULTS = 5


@dataclass(frozen=True)
class LoopEvent:
    """What just happened, for progress displays.

    `kind`: seed | proposed | rejected (bad edit) | invalid | evaluated | failed.
    """

    kind: str
    agent_id: int
    iteration: int
    score: float | None
    best_score: float | None
    message: str = ""


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


@dataclass
class _Counters:
    proposals: int = 0
    evaluated: int = 0
    invalid: int = 0
    consecutive_faults: int = 0
    spent_usd: float = 0.0
    stop_reason: str = ""
    budget_stop: bool = False
    abort: Exception | None = None
    fm_failure: Exception | None = None  # the last FM error that cost an iteration its proposal
    in_flight: set[int] = field(default_factory=set)


class SearchLoop:
    """Runs (or resumes) one search until its budget is spent or it is stopped."""

    def __init__(
        self,
        *,
        archive: Archive,
        run: Run,
        config: RunConfig,
        benchmark: Benchmark,
        sandbox: Sandbox,
        selector: ParentSelector,
        operators: Mapping[str, AnyOperator],
        llm: LLMClient | None,
        model_label: str,
        more_llms: Mapping[str, LLMClient] | None = None,
        gateway: FMGateway | None = None,
        on_event: Callable[[LoopEvent], None] | None = None,
        embed_endpoint: Callable[[list[str]], list[list[float]]] | None = None,
    ) -> None:
        """selector: draws parents (`archive.selection`, or any `ParentSelector`). operators: name -> operator
        for every operator `config.search.operators` weighs (the weights stay in the config).
        llm / model_label: the run's FM (`fm.model`); None only when every operator is local (ast_mutate).
        more_llms: label -> client for `fm.models`. gateway: serves the FM to agents under evaluation (each
        gets its own socket and budget); None: no FM. embed_endpoint: texts -> vectors for code embeddings
        (`search.novelty.embedding_model`); None: the local hashing vectorizer. `from_config` builds the
        selector and operators from their names in the config."""
        assert run.id is not None
        self.archive = archive
        self.run = run
        self.run_id: int = run.id
        self.config = config
        self.benchmark = benchmark
        self.sandbox = sandbox
        self.model_label = model_label
        self.llms: dict[str, LLMClient] = {model_label: llm} if llm is not None else {}
        self.llms.update(more_llms or {})
        self.gateway = gateway
        self.on_event = on_event or (lambda event: None)
        self.selector = selector
        self.operators = dict(operators)
        self._check_operators()
        self.limits = run_limits(config)
        self.fm_budget = agent_fm_budget(config)
        self.proposer = Proposer.from_config(
            config,
            benchmark=benchmark,
            operators=self.operators,
            llms=self.llms,
            sandbox=sandbox,
            gateway=lambda: self.gateway,
        )
        self.behaviour = BehaviourSpace(benchmark, config.search.novelty, embed_endpoint=embed_endpoint)
        self._check_strategy_needs()
        kinds = {name: operator.kind for name, operator in self.operators.items()}
        self.arms = operator_arms(config.search.operators, kinds, models=list(self.llms), gateway_model=model_label)
        self.bandit = restore_bandit(config.search.bandit, self.arms, archive.agents(self.run_id))
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._room = asyncio.Condition()
        self._outstanding = 0  # children queued or under evaluation
        self._max_pending = config.search.max_pending or (config.evaluation.concurrency + config.fm.concurrency)
        self._stop = asyncio.Event()
        self._has_parent = asyncio.Event()
        self._counters = _Counters()
        self._best: tuple[float, int] | None = None
        self.memory = PromptMemory(
            archive, failed_attempts_shown=config.search.failed_attempts_shown, inspirations=config.search.inspirations
        )
        self._genome_owner: dict[str, int] = {}  # genome hash -> first agent with it: the duplicate gate
        # Children whose FM conversation may take their failed run back (fm.repair_rounds), until evaluated.
        self._repairable = _LRU[int, _Repairable](capacity=1024)
        self.view = self.behaviour.rebuild(archive, self.run_id, lambda hash_: self.memory.genome(hash_).files)
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
            selector=make_selector(config.search.strategy, selector_params(config, benchmark)),
            operators={name: make_operator(name) for name in config.search.operators},
            **parts,
        )

    # ----- set-up --------------------------------------------------------------------------

    def _check_strategy_needs(self) -> None:
        """What the selector reads must exist: descriptor axes, and enough kept neighbours."""
        needs = selector_needs(self.selector)
        kept = self.config.search.novelty.k
        if needs.neighbours > kept:
            raise ConfigError(
                f"the {self.selector.name} strategy reads {needs.neighbours} nearest neighbours "
                f"(search.params.k), more than the {kept} kept per agent (search.novelty.k)",
                fix=f"set search.novelty.k to at least {needs.neighbours}, or lower search.params.k",
            )
        unknown = [name for name in needs.descriptor_axes if name not in self.behaviour.names]
        if unknown:
            raise ConfigError(
                f"search.params.dims: {self.benchmark.name} has no descriptor {', '.join(map(repr, unknown))}",
                fix=f"use some of {', '.join(self.behaviour.names)}",
            )

    def _check_operators(self) -> None:
        weights = {name: w for name, w in self.config.search.operators.items() if w > 0}
        missing = sorted(set(weights) - set(self.operators))
        if missing:
            raise ConfigError(
                f"search.operators weighs {', '.join(missing)}, but no such operator was given to the loop",
                fix="pass an operator object for every weighted name (SearchLoop.from_config builds them all)",
            )
        if any(self.operators[name].kind == "sandbox" for name in weights) and not supports_self_modify(self.benchmark):
            raise ConfigError(
                f"search.operators: self_modify needs a benchmark whose agents write code (such as humaneval); "
                f"{self.benchmark.name} has none",
                fix="remove self_modify from search.operators, or search a benchmark such as humaneval",
            )
        needs_fm = any(self.operators[name].kind in ("fm", "fm_two_step") for name in weights)
        if needs_fm and not self.llms:
            raise ConfigError("search.operators names FM operators but the run has no FM", fix="configure fm.model")

    # ----- control -------------------------------------------------------------------------

    def request_stop(self, reason: str = "stopped by the user") -> None:
        """Stop proposing; evaluations already running finish and are stored."""
        if not self._stop.is_set():
            self._counters.stop_reason = reason
            self._stop.set()

    def _abort(self, exc: Exception) -> None:
        if self._counters.abort is None:
            self._counters.abort = exc
        self.request_stop(str(exc))

    # ----- main ----------------------------------------------------------------------------

    async def run_until_done(self) -> LoopOutcome:
        self.archive.set_run_status(self.run_id, RunStatus.running)
        self._counters.spent_usd = self.archive.cost_summary(self.run_id).cost_usd
        if len(self.view):
            self._has_parent.set()
            best = self.archive.best(self.run_id, n=1)
            if best:
                self._best = (float(best[0].score), int(best[0].id))
        agents = self.archive.agents(self.run_id)
        for agent in reversed(agents):
            if agent.genome_hash is not None:
                self._genome_owner[agent.genome_hash] = int(agent.id)
        if not agents:
            seed = self.benchmark.seed()
            agent = self.archive.add_agent(self.run_id, files=dict(seed.files), entry=seed.entry, operator="seed")
            self._genome_owner[str(agent.genome_hash)] = int(agent.id)
            if self.behaviour.gate is not None:
                self.behaviour.gate.add(int(agent.id), self.behaviour.code_embedding(seed.files))
            agents = [agent]
            self.on_event(LoopEvent("seed", int(agent.id), 0, None, None, "seed program stored"))
        pending = self.archive.pending(self.run_id, max_attempts=self.config.evaluation.max_attempts)
        if not len(self.view) and not any(a.operator == "seed" for a in pending):
            raise SeedFailed(
                "no agent of this run was ever evaluated successfully, and no seed is left to evaluate",
                fix="start a new run; `cambrian show RUN 1` says why the seed failed",
            )
        for agent in pending:
            self._enqueue(int(agent.id))

        done_iterations = {a.iteration for a in agents if a.iteration > 0}
        todo = iter([i for i in range(1, self.config.budget.iterations + 1) if i not in done_iterations])

        evaluators = [asyncio.create_task(self._evaluate_worker()) for _ in range(self.config.evaluation.concurrency)]
        proposers = [asyncio.create_task(self._propose_worker(todo)) for _ in range(self.config.fm.concurrency)]
        watchdog = asyncio.create_task(self._wall_clock())
        drained = asyncio.create_task(self._drain(proposers))
        stopped = asyncio.create_task(self._stop.wait())
        try:
            await asyncio.wait({drained, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if self._stop.is_set():
                for task in proposers:
                    task.cancel()
                await asyncio.gather(*proposers, return_exceptions=True)
                # Evaluators finish what they hold and take nothing new.
                await self._wait_in_flight()
        finally:
            for task in (*evaluators, watchdog, drained, stopped):
                task.cancel()
            await asyncio.gather(*evaluators, watchdog, drained, stopped, return_exceptions=True)
        return self._finish(done_iterations)

    def _enqueue(self, agent_id: int) -> None:
        self._outstanding += 1
        self._queue.put_nowait(agent_id)

    async def _evaluated_one(self) -> None:
        async with self._room:
            self._outstanding -= 1
            self._room.notify_all()

    async def _wait_for_room(self) -> None:
        """Proposals wait while `max_pending` children are queued or under evaluation, so parents are
        chosen from an archive that knows how recent children did (and fast local operators cannot run
        the whole budget off the seed before its first child is scored)."""
        async with self._room:
            await self._room.wait_for(lambda: self._outstanding < self._max_pending)

    async def _drain(self, proposers: list[asyncio.Task[None]]) -> None:
        await asyncio.gather(*proposers)
        await self._queue.join()

    async def _wait_in_flight(self) -> None:
        while self._counters.in_flight:
            await asyncio.sleep(0.05)

    async def _wall_clock(self) -> None:
        limit = self.config.budget.wall_seconds
        if limit is None:
            return
        await asyncio.sleep(limit)
        self._counters.budget_stop = True
        self.request_stop(f"wall-time budget of {limit:g} s reached")

    def _finish(self, done_before: set[int]) -> LoopOutcome:
        c = self._counters
        fix = str(getattr(c.abort or c.fm_failure, "fix", "") or "")
        iterations_left = self.config.budget.iterations - self.archive.iterations_done(self.run_id)
        if c.abort is not None:
            status, reason = RunStatus.failed, str(c.abort)
        elif c.fm_failure is not None and not c.budget_stop and iterations_left > 0 and not c.stop_reason:
            # The proposers ran out of iterations to try because the FM failed them: that is a failure.
            status, reason = RunStatus.failed, f"the FM failed: {c.fm_failure}"
        else:
            pending = self.archive.pending(self.run_id, max_attempts=self.config.evaluation.max_attempts)
            if c.budget_stop or (not pending and iterations_left <= 0):
                status = RunStatus.finished
                reason = c.stop_reason or f"iteration budget of {self.config.budget.iterations} reached"
            else:
                status, reason = RunStatus.stopped, c.stop_reason or "stopped"
        self.archive.set_run_status(self.run_id, status, error=reason if status == RunStatus.failed else None)
        seed_agents = [a for a in self.archive.agents(self.run_id) if a.operator == "seed"]
        seed_score = seed_agents[0].score if seed_agents else None
        outcome = LoopOutcome(
            status=status,
            reason=reason,
            best_agent_id=self._best[1] if self._best else None,
            best_score=self._best[0] if self._best else None,
            seed_score=seed_score,
            proposals=c.proposals,
            evaluated=c.evaluated,
            invalid=c.invalid,
            cost_usd=c.spent_usd,
            fix=fix if status == RunStatus.failed else "",
        )
        if c.abort is not None:
            raise c.abort
        return outcome

    # ----- proposing -----------------------------------------------------------------------

    async def _propose_worker(self, todo) -> None:
        while not self._stop.is_set():
            await self._has_parent.wait()
            if self._stop.is_set():
                return
            usd = self.config.budget.usd
            if usd is not None and self._counters.spent_usd >= usd:
                self._counters.budget_stop = True
                self.request_stop(f"USD budget of {usd:g} reached (spent {self._counters.spent_usd:.4f})")
                return
            await self._wait_for_room()
            if self._stop.is_set():
                return
            iteration = next(todo, None)
            if iteration is None:
                return
            try:
                if await self._propose(iteration):
                    self._counters.consecutive_faults = 0
            except FMAuthError as exc:
                self._abort(exc)
            except FMUnavailable as exc:
                self._counters.fm_failure = exc
                self._counters.consecutive_faults += 1
                if self._counters.consecutive_faults >= MAX_CONSECUTIVE_FAULTS:
                    self._abort(exc)

    async def _propose(self, iteration: int) -> bool:
        """One iteration: choose parent(s), operator and model, make a child, and queue it for evaluation.

        A child too similar to an existing agent is stored as invalid (the rejection is recorded) and the
        same iteration proposes again, up to `search.novelty.max_reproposals` times. False when the
        sandbox failed (self_modify), so the worker does not reset the count of faults in a row.
        """
        rng = np.random.default_rng([self.config.seed, iteration])
        parent_id = int(self.selector.select(self.view, 1, rng)[0])
        arm = self._choose_arm(rng)
        second_parent_id = self._second_parent(parent_id, rng) if arm.operator == "crossover" else None
        ctx = PromptContext(
            contract=self.benchmark.contract,
            benchmark=self.benchmark.name,
            parent=self.memory.parent_info(parent_id),
            second_parent=self.memory.parent_info(second_parent_id) if second_parent_id is not None else None,
            failed_attempts=self.memory.failed_attempts(parent_id),
            inspirations=self.memory.inspirations(self.view, exclude=parent_id),
        )
        for attempt in range(self.config.search.novelty.max_reproposals + 1):
            if self.bandit is not None:
                self.bandit.record_pull(arm)
            try:
                proposal = await self.proposer.propose(
                    arm.operator, ctx, model=arm.model, iteration=iteration, attempt=attempt
                )
            except (SandboxError, GatewayError) as exc:
                # self_modify runs the parent in the sandbox: a dead sandbox is a fault, not the parent's.
                self._store_invalid(
                    Proposal(None), reason=f"sandbox fault while the parent wrote its child: {exc}",
                    iteration=iteration, parent_id=parent_id, second_parent_id=second_parent_id, arm=arm,
                )  # fmt: skip
                self._count_fault(exc)
                return False
            self._counters.spent_usd += proposal.cost_usd
            stored = dict(iteration=iteration, parent_id=parent_id, second_parent_id=second_parent_id, arm=arm)
            if self._accept(
                proposal, _Repairable(arm.operator, ctx, proposal, arm.model, iteration, attempt), **stored
            ):
                return True
        return True

    def _accept(
        self,
        proposal: Proposal,
        repairable: _Repairable | None,
        *,
        iteration: int,
        parent_id: int,
        second_parent_id: int | None,
        arm: Arm,
    ) -> bool:
        """Store a proposal: a child queued for evaluation, or an invalid agent with its reason. False only
        for a near-duplicate, after which the iteration may propose again."""
        stored = dict(iteration=iteration, parent_id=parent_id, second_parent_id=second_parent_id, arm=arm)
        if proposal.genome is None:
            self._store_invalid(proposal, reason=str(proposal.reason), **stored)
            return True
        child_hash = genome_hash(proposal.genome.files)
        duplicate = self._genome_owner.get(child_hash)
        if duplicate is not None:
            reason = f"the edit produced code identical to agent {duplicate}; make a change that differs"
            self._store_invalid(proposal, reason=reason, **stored)
            return True
        embedding = None
        if self.behaviour.gate is not None:
            embedding = self.behaviour.code_embedding(proposal.genome.files)
            near = self.behaviour.gate.check(embedding)
            if near is not None:
                reason = (
                    f"near-duplicate of agent {near.agent_id} (code similarity {near.similarity:.4f} >= "
                    f"{self.behaviour.gate.threshold}); make a more substantial change"
                )
                self._store_invalid(proposal, reason=reason, **stored)
                return False
        agent_id = self._store_child(proposal, child_hash, embedding, **stored)
        if repairable is not None and proposal.conversation and proposal.repairs_left > 0:
            self._repairable.put(agent_id, repairable)
        return True

    def _choose_arm(self, rng: np.random.Generator) -> Arm:
        """The (model, operator) of this proposal: the bandit's choice, or operator by weight and model uniformly.

        Crossover needs two evaluated agents: until there are, it is not drawn.
        """
        arms = self.arms if len(self.view) >= 2 else [arm for arm in self.arms if arm.operator != "crossover"]
        if self.bandit is not None:
            return self.bandit.choose(rng, allowed=arms)
        weights = {name: w for name, w in self.config.search.operators.items() if any(a.operator == name for a in arms)}
        operator = choose_operator(weights, rng)
        models = [arm.model for arm in arms if arm.operator == operator]
        return Arm(models[int(rng.integers(len(models)))] if len(models) > 1 else models[0], operator)

    def _second_parent(self, parent_id: int, rng: np.random.Generator) -> int:
        """Crossover's other parent: drawn by the same strategy, a different agent (else the best other one)."""
        for candidate in self.selector.select(self.view, 8, rng).tolist():
            if int(candidate) != parent_id:
                return int(candidate)
        order, _ = self.view.ranking()
        return next(int(self.view.ids[row]) for row in order if int(self.view.ids[row]) != parent_id)

    def _store_child(
        self,
        proposal: Proposal,
        child_hash: str,
        embedding: np.ndarray | None,
        *,
        iteration: int,
        parent_id: int,
        second_parent_id: int | None,
        arm: Arm,
    ) -> int:
        assert proposal.genome is not None
        agent = self.archive.add_agent(
            self.run_id,
            files=dict(proposal.genome.files),
            entry=proposal.genome.entry,
            parent_id=parent_id,
            second_parent_id=second_parent_id,
            operator=arm.operator,
            model=arm.model or None,
            iteration=iteration,
            link_llm_calls=True,
            repair_note=proposal.repair_note,
            **proposal.usage(),
        )
        self._genome_owner[child_hash] = int(agent.id)
        if self.behaviour.gate is not None and embedding is not None:
            self.behaviour.gate.add(int(agent.id), embedding)
        self._counters.proposals += 1
        message = proposal.note
        self.on_event(LoopEvent("proposed", int(agent.id), iteration, None, self._best_score(), message))
        self._enqueue(int(agent.id))
        return int(agent.id)

    def _store_invalid(
        self,
        proposal: Proposal,
        *,
        reason: str,
        iteration: int,
        parent_id: int,
        second_parent_id: int | None,
        arm: Arm,
    ) -> None:
        agent = self.archive.add_agent(
            self.run_id,
            parent_id=parent_id,
            second_parent_id=second_parent_id,
            operator=arm.operator,
            model=arm.model or None,
            iteration=iteration,
            status=AgentStatus.invalid,
            invalid_reason=reason,
            link_llm_calls=True,
            **proposal.usage(),
        )
        self.memory.remember_failure(parent_id, f"{arm.operator}: {reason}")
        if self.bandit is not None:
            self.bandit.record_outcome(arm, reward=0.0, cost=cost_of(agent))
        self._counters.proposals += 1
        self._counters.invalid += 1
        self.on_event(LoopEvent("rejected", int(agent.id), iteration, None, self._best_score(), reason))

    # ----- evaluating ----------------------------------------------------------------------

    async def _evaluate_worker(self) -> None:
        while True:
            agent_id = await self._queue.get()
            try:
                if not self._stop.is_set():
                    self._counters.in_flight.add(agent_id)
                    await self._evaluate(agent_id)
            except Exception as exc:  # noqa: BLE001 - an unexpected bug must stop the run, not hang it
                self._abort(RunAborted(f"evaluating agent {agent_id} raised {type(exc).__name__}: {exc}"))
            finally:
                self._counters.in_flight.discard(agent_id)
                await self._evaluated_one()
                self._queue.task_done()

    async def _evaluate(self, agent_id: int) -> None:
        agent = self.archive.mark_evaluating(agent_id)
        genome = self.memory.genome(str(agent.genome_hash))
        started = time.perf_counter()
        try:
            result = await self._run_in_sandbox(agent, genome)
        except (SandboxError, GatewayError) as exc:
            self._on_sandbox_fault(agent, exc)
            return
        self._counters.consecutive_faults = 0
        seconds = time.perf_counter() - started
        evaluations = [evaluation_row(task) for task in result.task_results]
        columns = None
        if result.valid:
            tasks = [TaskRow(t.task_id, t.score, t.passed, t.executed) for t in result.task_results]
            columns = self.behaviour.columns(files=genome.files, tasks=tasks, descriptor=result.descriptor)
        agent = self.archive.finish_evaluation(
            agent_id,
            status=AgentStatus.evaluated if result.valid else AgentStatus.invalid,
            score=result.score if result.valid else None,
            stage_reached=result.stage_reached,
            invalid_reason=None if result.valid else result.invalid_reason,
            feedback=result.feedback,
            eval_seconds=seconds,
            evaluations=evaluations,
            descriptor=columns.stored_descriptor if columns is not None else None,
        )
        self._reward_bandit(agent)
        if columns is not None:
            self.view.add(
                agent_id,
                float(result.score),
                agent.parent_id,
                successes=columns.successes,
                failures=columns.failures,
                descriptor=columns.descriptor,
                embedding=columns.embedding,
            )
            self._counters.evaluated += 1
            if self._best is None or result.score > self._best[0]:
                self._best = (float(result.score), agent_id)
            self._has_parent.set()
            self.on_event(LoopEvent("evaluated", agent_id, agent.iteration, result.score, self._best_score()))
        else:
            self._counters.invalid += 1
            self.on_event(
                LoopEvent("invalid", agent_id, agent.iteration, None, self._best_score(), result.invalid_reason or "")
            )
            if agent.operator == "seed" and not self._has_parent.is_set():
                self._abort(
                    SeedFailed(
                        f"the {self.benchmark.name} seed program failed: {result.invalid_reason}",
                        fix="check the benchmark's seed and the evaluation limits (evaluation.timeout_s, "
                        "evaluation.memory_mb); `cambrian show RUN 1` has the seed's logs",
                    )
                )
        repairable = self._repairable.pop(agent_id)
        if repairable is not None and (not result.valid or not any(t.passed for t in result.task_results)):
            await self._repair_failed_run(agent, repairable, result.invalid_reason or result.feedback)

    async def _repair_failed_run(self, agent: Agent, repairable: _Repairable, failure: str) -> None:
        """Send a child's failed run back to the FM in the conversation that wrote it; the answer becomes a new
        child of the same parent and iteration (its repair_note names the failure). Skipped once stopping."""
        if self._stop.is_set() or not failure:
            return
        arm = Arm(repairable.model, repairable.operator)
        if self.bandit is not None:
            self.bandit.record_pull(arm)
        try:
            proposal = await self.proposer.fix(
                repairable.operator, repairable.ctx, repairable.proposal, failure,
                model=repairable.model, iteration=repairable.iteration, attempt=repairable.attempt,
            )  # fmt: skip
        except (FMUnavailable, FMAuthError) as exc:
            self.on_event(LoopEvent("failed", int(agent.id), agent.iteration, None, self._best_score(),
                                    f"no repair of agent {agent.id}: {exc}"))  # fmt: skip
            return
        self._counters.spent_usd += proposal.cost_usd
        follow_up = dataclasses.replace(repairable, proposal=proposal)
        self._accept(
            proposal, follow_up, iteration=repairable.iteration, parent_id=int(agent.parent_id),  # type: ignore[arg-type]
            second_parent_id=agent.second_parent_id, arm=arm,
        )  # fmt: skip

    def _reward_bandit(self, agent: Agent) -> None:
        """Credit the child's (model, operator) arm: its improvement over its parent (0 if invalid)."""
        if self.bandit is None or agent.iteration <= 0:
            return
        arm = Arm(agent.model or "", agent.operator)
        if arm not in self.arms:
            return
        parent_score = None
        if agent.parent_id is not None and agent.parent_id in self.view:
            parent_score = float(self.view.scores[self.view.index_of(agent.parent_id)])
        child_score = agent.score if agent.status == AgentStatus.evaluated else None
        self.bandit.record_outcome(arm, reward=improvement_reward(child_score, parent_score), cost=cost_of(agent))

    async def _run_in_sandbox(self, agent: Agent, genome: Genome) -> AgentResult:
        """Evaluate on the search split, with the agent's own FM socket when the gateway is on."""
        return await evaluate_in_sandbox(
            self.benchmark,
            genome,
            self.sandbox,
            agent_id=int(agent.id),
            iteration=agent.iteration,
            split="search",
            limits=self.limits,
            gateway=self.gateway,
            fm_budget=self.fm_budget,
        )

    def _count_fault(self, exc: SandboxError | GatewayError) -> bool:
        """Count an infrastructure fault; True (and the run aborted) when there were too many in a row."""
        self._counters.consecutive_faults += 1
        if self._counters.consecutive_faults < MAX_CONSECUTIVE_FAULTS:
            return False
        self._abort(
            RunAborted(
                f"the sandbox failed {self._counters.consecutive_faults} times in a row; last: {exc}",
                fix=getattr(exc, "fix", "") or "check the sandbox with `cambrian sandbox check`, then resume",
            )
        )
        return True

    def _on_sandbox_fault(self, agent: Agent, exc: SandboxError | GatewayError) -> None:
        agent = self.archive.mark_failed(int(agent.id), f"sandbox fault: {exc}")
        self.on_event(LoopEvent("failed", int(agent.id), agent.iteration, None, self._best_score(), str(exc)))
        if self._count_fault(exc):
            return
        if agent.eval_attempts < self.config.evaluation.max_attempts:
            self._enqueue(int(agent.id))
        elif agent.operator == "seed" and not self._has_parent.is_set():
            self._abort(RunAborted(f"the seed could not be evaluated: {exc}", fix=getattr(exc, "fix", "")))

    def _best_score(self) -> float | None:
        return self._best[0] if self._best else None


def selector_params(config: RunConfig, benchmark: Benchmark) -> dict[str, Any]:
    """`search.params`, and for a strategy with a `dims` parameter that was given none, the benchmark's own
    behaviour axes (or code size and pass rate when it has none)."""
    params: dict[str, Any] = dict(config.search.params)
    if "dims" not in params and "dims" in selector_parameters(SELECTORS.get(config.search.strategy)):
        bounds = getattr(benchmark, "descriptor_bounds", None) or {}
        params["dims"] = tuple(bounds) or ("code_size", "pass_fraction")
    return params


@dataclass(frozen=True)
class _Repairable:
    """What it takes to send a child's failed run back to the FM that wrote it."""

    operator: str
    ctx: PromptContext
    proposal: Proposal
    model: str
    iteration: int
    attempt: int
