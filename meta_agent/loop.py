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
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Callable, Generic, TypeVar

import numpy as np

from archive.models import Agent, AgentStatus, Run, RunStatus
from archive.selection import make_selector
from archive.store import Archive, genome_hash
from evaluators.base import Benchmark, Genome
from evaluators.runner import AgentResult, Limits
from meta_agent.config import RunConfig
from meta_agent.edits import EditError
from meta_agent.errors import RunAborted, SeedFailed
from meta_agent.llm.client import LLMClient, derive_seed
from meta_agent.llm.errors import FMAuthError, FMBadRequest, FMUnavailable
from meta_agent.evaluation import AgentFMBudget, evaluate_in_sandbox, evaluation_row
from meta_agent.llm.gateway import FMGateway, GatewayError
from meta_agent.operators import ParentInfo, PromptContext, choose_operator, make_operator
from sandbox.base import Sandbox, SandboxError

K = TypeVar("K")
V = TypeVar("V")

#: Consecutive infrastructure faults (sandbox or FM) after which the run stops for the user.
MAX_CONSECUTIVE_FAULTS = 5


@dataclass(frozen=True)
class LoopEvent:
    """What just happened, for progress displays. `kind`: seed | proposed | rejected (bad edit) | invalid | evaluated | failed."""

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
        llm: LLMClient,
        model_label: str,
        gateway: FMGateway | None = None,
        on_event: Callable[[LoopEvent], None] | None = None,
    ) -> None:
        """gateway: serves the FM to agents under evaluation (each gets its own socket and budget); None: no FM."""
        assert run.id is not None
        self.archive = archive
        self.run = run
        self.run_id: int = run.id
        self.config = config
        self.benchmark = benchmark
        self.sandbox = sandbox
        self.llm = llm
        self.model_label = model_label
        self.gateway = gateway
        self.on_event = on_event or (lambda event: None)
        self.selector = make_selector(config.search.strategy, **config.search.params)
        self.operators = {name: make_operator(name) for name in config.search.operators}
        self.limits = Limits(
            timeout_s=config.evaluation.timeout_s,
            memory_mb=config.evaluation.memory_mb,
            max_output_bytes=config.evaluation.max_output_bytes,
        )
        self.view = archive.view(self.run_id)
        self._queue: asyncio.Queue[int] = asyncio.Queue()
        self._stop = asyncio.Event()
        self._has_parent = asyncio.Event()
        self._counters = _Counters()
        self._best: tuple[float, int] | None = None
        # Genomes are immutable and evaluated agents never change what a prompt shows of them,
        # so the hot path reads both from memory after the first time.
        self._genomes = _LRU[str, Genome](capacity=4096)
        self._parents = _LRU[int, ParentInfo](capacity=4096)
        self._genome_owner: dict[str, int] = {}  # genome hash -> first agent with it: the duplicate gate
        self._failures = _LRU[int, deque[str]](capacity=4096)  # parent -> reasons its children were invalid

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
            agents = [agent]
            self.on_event(LoopEvent("seed", int(agent.id), 0, None, None, "seed program stored"))
        pending = self.archive.pending(self.run_id, max_attempts=self.config.evaluation.max_attempts)
        if not len(self.view) and not any(a.operator == "seed" for a in pending):
            raise SeedFailed(
                "no agent of this run was ever evaluated successfully, and no seed is left to evaluate",
                fix="start a new run; `cambrian show RUN 1` says why the seed failed",
            )
        for agent in pending:
            self._queue.put_nowait(int(agent.id))

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
        if c.abort is not None:
            status, reason = RunStatus.failed, str(c.abort)
        else:
            pending = self.archive.pending(self.run_id, max_attempts=self.config.evaluation.max_attempts)
            iterations_left = self.config.budget.iterations - self.archive.iterations_done(self.run_id)
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
            iteration = next(todo, None)
            if iteration is None:
                return
            try:
                await self._propose(iteration)
                self._counters.consecutive_faults = 0
            except (FMAuthError,) as exc:
                self._abort(exc)
            except FMUnavailable as exc:
                self._counters.consecutive_faults += 1
                if self._counters.consecutive_faults >= MAX_CONSECUTIVE_FAULTS:
                    self._abort(exc)

    async def _propose(self, iteration: int) -> None:
        rng = np.random.default_rng([self.config.seed, iteration])
        parent_id = int(self.selector.select(self.view, 1, rng)[0])
        operator_name = choose_operator(self.config.search.operators, rng)
        operator = self.operators[operator_name]
        parent_info = self._parent_info(parent_id)
        ctx = PromptContext(
            contract=self.benchmark.contract,
            benchmark=self.benchmark.name,
            parent=parent_info,
            failed_attempts=self._failed_attempts(parent_id),
            inspirations=self._inspirations(exclude=parent_id),
        )
        seed = derive_seed(self.config.seed, iteration, 0)
        try:
            completion = await self.llm.complete(
                operator.messages(ctx), seed=seed, purpose="mutate", iteration=iteration
            )
        except FMBadRequest as exc:
            # The prompt itself was refused (e.g. longer than the context): the parent's fault, not the FM's.
            self._store_invalid(iteration, parent_id, operator_name, f"the FM refused the prompt: {exc}", None)
            return
        self._counters.spent_usd += completion.cost_usd
        usage = dict(
            prompt_tokens=completion.prompt_tokens,
            completion_tokens=completion.completion_tokens,
            cost_usd=completion.cost_usd,
        )
        try:
            child = operator.apply(parent_info.genome, completion.text)
        except EditError as exc:
            self._store_invalid(iteration, parent_id, operator_name, str(exc), usage)
            return
        child_hash = genome_hash(child.files)
        duplicate = self._genome_owner.get(child_hash)
        if duplicate is not None:
            reason = f"the edit produced code identical to agent {duplicate}; make a change that differs"
            self._store_invalid(iteration, parent_id, operator_name, reason, usage)
            return
        agent = self.archive.add_agent(
            self.run_id,
            files=dict(child.files),
            entry=child.entry,
            parent_id=parent_id,
            operator=operator_name,
            model=self.model_label,
            iteration=iteration,
            link_llm_calls=True,
            **usage,
        )
        self._genome_owner[child_hash] = int(agent.id)
        self._counters.proposals += 1
        self.on_event(LoopEvent("proposed", int(agent.id), iteration, None, self._best_score()))
        self._queue.put_nowait(int(agent.id))

    def _store_invalid(
        self, iteration: int, parent_id: int, operator_name: str, reason: str, usage: dict | None
    ) -> None:
        agent = self.archive.add_agent(
            self.run_id,
            parent_id=parent_id,
            operator=operator_name,
            model=self.model_label,
            iteration=iteration,
            status=AgentStatus.invalid,
            invalid_reason=reason,
            link_llm_calls=True,
            **(usage or {}),
        )
        self._remember_failure(parent_id, f"{operator_name}: {reason}")
        self._counters.proposals += 1
        self._counters.invalid += 1
        self.on_event(LoopEvent("rejected", int(agent.id), iteration, None, self._best_score(), reason))

    def _parent_info(self, agent_id: int) -> ParentInfo:
        """What prompts show of an evaluated agent (cached: it never changes once evaluated)."""
        info = self._parents.get(agent_id)
        if info is None:
            agent = self.archive.get_agent(agent_id)
            assert agent.genome_hash is not None, "only evaluated agents are selected"
            info = ParentInfo(
                agent_id=agent_id, genome=self._genome(agent.genome_hash), score=agent.score, feedback=agent.feedback
            )
            self._parents.put(agent_id, info)
        return info

    def _failed_attempts(self, parent_id: int) -> list[str]:
        """Why this parent's recent children were invalid, oldest first (read from the archive once)."""
        reasons = self._failures.get(parent_id)
        if reasons is None:
            n = self.config.search.failed_attempts_shown
            recent = self.archive.recent_invalid_children(parent_id, n) if n else []
            reasons = deque(
                (f"{a.operator}: {a.invalid_reason}" for a in reversed(recent) if a.invalid_reason), maxlen=n
            )
            self._failures.put(parent_id, reasons)
        return list(reasons)

    def _remember_failure(self, parent_id: int | None, reason: str) -> None:
        if parent_id is None:
            return
        self._failed_attempts(parent_id)  # load the history first, so the order stays true
        self._failures.get(parent_id).append(reason)  # type: ignore[union-attr]

    def _genome(self, hash_: str) -> Genome:
        genome = self._genomes.get(hash_)
        if genome is None:
            files, entry = self.archive.get_genome(hash_)
            genome = Genome(files=files, entry=entry)
            self._genomes.put(hash_, genome)
        return genome

    def _inspirations(self, *, exclude: int) -> list[ParentInfo]:
        k = self.config.search.inspirations
        if k == 0 or len(self.view) < 2:
            return []
        scores = self.view.scores
        ids = self.view.ids
        m = min(k + 1, len(scores))
        # argpartition is O(n): a full sort costs milliseconds at 100k agents, on every proposal.
        top = np.argpartition(-scores, m - 1)[:m]
        top = top[np.argsort(-scores[top], kind="stable")]
        chosen = [int(ids[i]) for i in top if int(ids[i]) != exclude][:k]
        return [self._parent_info(agent_id) for agent_id in chosen]

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
                self._queue.task_done()

    async def _evaluate(self, agent_id: int) -> None:
        agent = self.archive.mark_evaluating(agent_id)
        genome = self._genome(str(agent.genome_hash))
        started = time.perf_counter()
        try:
            result = await self._run_in_sandbox(agent, genome)
        except (SandboxError, GatewayError) as exc:
            self._on_sandbox_fault(agent, exc)
            return
        self._counters.consecutive_faults = 0
        seconds = time.perf_counter() - started
        evaluations = [evaluation_row(task) for task in result.task_results]
        agent = self.archive.finish_evaluation(
            agent_id,
            status=AgentStatus.evaluated if result.valid else AgentStatus.invalid,
            score=result.score if result.valid else None,
            stage_reached=result.stage_reached,
            invalid_reason=None if result.valid else result.invalid_reason,
            feedback=result.feedback,
            eval_seconds=seconds,
            evaluations=evaluations,
        )
        if result.valid:
            self.view.add(agent_id, float(result.score), agent.parent_id if agent.parent_id is not None else -1)
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
            fm_budget=AgentFMBudget(
                max_calls=self.config.evaluation.agent_fm_calls,
                max_tokens=self.config.evaluation.agent_fm_tokens,
                run_seed=self.config.seed,
            ),
        )

    def _on_sandbox_fault(self, agent: Agent, exc: SandboxError | GatewayError) -> None:
        agent = self.archive.mark_failed(int(agent.id), f"sandbox fault: {exc}")
        self._counters.consecutive_faults += 1
        self.on_event(LoopEvent("failed", int(agent.id), agent.iteration, None, self._best_score(), str(exc)))
        if self._counters.consecutive_faults >= MAX_CONSECUTIVE_FAULTS:
            self._abort(
                RunAborted(
                    f"the sandbox failed {self._counters.consecutive_faults} times in a row; last: {exc}",
                    fix=getattr(exc, "fix", "") or "check the sandbox with `cambrian sandbox check`, then resume",
                )
            )
        elif agent.eval_attempts < self.config.evaluation.max_attempts:
            self._queue.put_nowait(int(agent.id))
        elif agent.operator == "seed" and not self._has_parent.is_set():
            self._abort(RunAborted(f"the seed could not be evaluated: {exc}", fix=getattr(exc, "fix", "")))

    def _best_score(self) -> float | None:
        return self._best[0] if self._best else None


class _LRU(Generic[K, V]):
    """A bounded mapping that forgets the least recently used entry."""

    def __init__(self, *, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self.capacity:
            self._items.popitem(last=False)
