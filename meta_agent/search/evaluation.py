"""Running one agent in a sandbox session of its own, with its own FM socket: its evaluation (shared by
the search loop and `cambrian eval`), a parent writing its child (`self_modify`), and the archive row
of one task run."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hashlib
import statistics
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from cambrian.archive.models import Evaluation, detached, utcnow
from cambrian.evaluators.base import Benchmark, Genome, Task
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.evaluators.runner import AgentResult, Limits, TaskResult, evaluate_agent
from cambrian.meta_agent.config import RunConfig
from cambrian.meta_agent.llm.gateway import AgentChannel, FMGateway
from cambrian.sandbox.base import FM_SOCKET_INSIDE, RunResult, RunSpec, Sandbox, SandboxSession

__all__ = [
    "AgentFMBudget",
    "EvaluationContext",
    "SelfModifyRun",
    "agent_fm_budget",
    "evaluate_in_sandbox",
    "evaluation_row",
    "failed_run",
    "mean_result",
    "parent_run_outcome",
    "parent_run_spec",
    "repeat_limits",
    "run_limits",
    "run_self_modify",
]


@dataclass(frozen=True)
class AgentFMBudget:
    """What one agent may spend through the gateway in one evaluation (or one run of a parent writing its child).

    max_calls / max_tokens: FM calls and tokens (>= 0; 0 refuses every call).
    run_seed: the run's seed, from which each call's default sampling seed is derived.
    """

    max_calls: int
    max_tokens: int
    run_seed: int

    def times(self, tasks: int) -> AgentFMBudget:
        """This budget (one task's) for an evaluation of `tasks` tasks, shared by them: a task may use more when
        others use less; the evaluation never more than tasks x the one task's."""
        n = max(1, tasks)
        return dataclasses.replace(self, max_calls=self.max_calls * n, max_tokens=self.max_tokens * n)


@dataclass(frozen=True)
class EvaluationContext:
    """What every evaluation of one run shares, bound once: the benchmark, the per-task limits, the agents' FM
    gateway (None: agents call no FM) and what one agent may spend through it per task.

    An evaluation then takes only what varies: the agent, its genome, the split and which repeat it is.
    """

    benchmark: Benchmark
    limits: Limits
    fm_budget: AgentFMBudget
    gateway: FMGateway | None = None

    @classmethod
    def of_run(cls, config: RunConfig, benchmark: Benchmark, gateway: FMGateway | None = None) -> EvaluationContext:
        """A search's context: `evaluation.*` limits with the run's seed, `evaluation.agent_fm_*` per task."""
        return cls(benchmark, run_limits(config), agent_fm_budget(config), gateway)

    def budget(self, split: str) -> AgentFMBudget:
        """An agent's budget for one evaluation on `split`: the per-task budget times its tasks, shared by them."""
        return self.fm_budget.times(len(list(self.benchmark.tasks(split))))

    def limits_of(self, repeat: int) -> Limits:
        """The limits of an agent's `repeat`-th evaluation (`repeat_limits`)."""
        return repeat_limits(self.limits, repeat)


@dataclass(frozen=True)
class SelfModifyRun:
    """What a parent agent returned when asked to write its own child (the `self_modify` operator).

    returned: its solve's return value (None when it produced none); error: a public sentence when it
    crashed, timed out or returned nothing; the rest: what its FM calls used.
    """

    returned: Any
    error: str | None
    calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


def _open_session(sandbox: Sandbox, *, socket: bool) -> tuple[SandboxSession, str | None]:
    """A new session and, when `socket`, where its FM socket goes on the host (None: where the run sees it), in
    one hand-off to a thread (each costs the event loop's thread about 0.13 ms of CPU: bench/driver_floor.py)."""
    session = sandbox.session()
    try:
        return session, session.fm_socket_host_path() if socket else None
    except BaseException:
        session.close()
        raise


def _evaluate_in_new_session(
    benchmark: Benchmark, genome: Genome, sandbox: Sandbox, *, split: str, limits: Limits
) -> AgentResult:
    """An evaluation with no FM socket, in a session of its own opened and closed in the same thread."""
    with sandbox.session() as session:
        return evaluate_agent(benchmark, genome, sandbox, split=split, limits=limits, session=session, env={})


@contextlib.asynccontextmanager
async def _agent_session(
    sandbox: Sandbox,
    gateway: FMGateway | None,
    *,
    agent_id: int | None,
    iteration: int,
    fm_budget: AgentFMBudget,
    purpose: str = "agent",
    proposal_id: str | None = None,
) -> AsyncIterator[tuple[SandboxSession, dict[str, str], AgentChannel | None]]:
    """A sandbox session of its own and, with a gateway, the agent's FM socket; both closed afterwards."""
    session, host_path = await asyncio.to_thread(_open_session, sandbox, socket=gateway is not None)
    channel: AgentChannel | None = None
    try:
        env: dict[str, str] = {}
        if gateway is not None:
            if host_path is None and agent_id is None:
                # A sandbox sharing the host filesystem: an id-less run needs a path of its own.
                host_path = str(gateway.socket_dir / f"iteration-{iteration}-{id(session):x}.sock")
                shared_fs = True
            else:
                shared_fs = host_path is None
            channel = await gateway.open_agent(
                agent_id,
                max_calls=fm_budget.max_calls,
                max_tokens=fm_budget.max_tokens,
                run_seed=fm_budget.run_seed,
                iteration=iteration,
                socket_path=host_path,
                purpose=purpose,
                proposal_id=proposal_id,
            )
            # A sandbox sharing the host filesystem sees the socket where it is.
            env = channel.env(str(channel.socket_path) if shared_fs else FM_SOCKET_INSIDE)
        yield session, env, channel
    finally:
        if channel is not None:
            await channel.close()
        await asyncio.to_thread(session.close)


async def evaluate_in_sandbox(
    context: EvaluationContext,
    genome: Genome,
    sandbox: Sandbox,
    *,
    agent_id: int,
    iteration: int,
    split: str,
    repeat: int = 0,
) -> AgentResult:
    """Evaluate one agent on `split` in a sandbox session of its own (search loop and `cambrian eval` alike), its
    `repeat`-th time (task seeds of its own).

    With the context's gateway the agent gets its own FM socket and budget for this evaluation, closed
    afterwards; its calls are recorded under `agent_id`. SandboxError and GatewayError propagate
    (infrastructure faults). Without a gateway the whole session, from opening to closing, is one hand-off
    to a thread.
    """
    benchmark, gateway, limits = context.benchmark, context.gateway, context.limits_of(repeat)
    if gateway is None:
        return await asyncio.to_thread(_evaluate_in_new_session, benchmark, genome, sandbox, split=split, limits=limits)
    budget = context.budget(split)
    async with _agent_session(sandbox, gateway, agent_id=agent_id, iteration=iteration, fm_budget=budget) as (
        session,
        env,
        _,
    ):
        return await asyncio.to_thread(
            evaluate_agent, benchmark, genome, sandbox, split=split, limits=limits, session=session, env=env
        )


async def run_self_modify(
    context: EvaluationContext,
    parent: Genome,
    task: Task,
    sandbox: Sandbox,
    *,
    iteration: int,
    fm_seed: int,
    proposal_id: str | None = None,
) -> SelfModifyRun:
    """Run the parent agent's own entry point on `task` (its own source and an improvement instruction) in
    the sandbox, with its FM socket (one task's budget, its calls' seeds derived from `fm_seed`), and return
    what it wrote. Its FM calls are recorded with purpose "self_modify", no agent id and `proposal_id`, which
    links them to the child it becomes. SandboxError and GatewayError propagate (infrastructure faults).
    """
    budget = dataclasses.replace(context.fm_budget, run_seed=fm_seed)
    async with _agent_session(
        sandbox,
        context.gateway,
        agent_id=None,
        iteration=iteration,
        fm_budget=budget,
        purpose="self_modify",
        proposal_id=proposal_id,
    ) as (session, env, channel):
        spec = parent_run_spec(context.benchmark, parent, task, context.limits)
        spec = dataclasses.replace(spec, env={**spec.env, **env})
        result = await asyncio.to_thread(session.run, spec)
    return parent_run_outcome(result, spec.timeout_s, channel)


def parent_run_spec(benchmark: Benchmark, parent: Genome, task: Task, limits: Limits) -> RunSpec:
    """The run of `parent` on the task asking it to write its child, within the run's limits (its FM socket's
    env is added where it runs)."""
    return limits.apply(benchmark.run_spec(parent, task), task_id=task.id)


def parent_run_outcome(result: RunResult, timeout_s: float, channel: AgentChannel | None) -> SelfModifyRun:
    """What a parent's run (limited to `timeout_s`) returned as its child, or the public sentence saying why
    nothing; with what its FM channel used."""
    outcome = read_outcome(result.files)
    error: str | None = None
    if result.timed_out:
        error = f"the parent agent timed out after {timeout_s:.1f} s while writing its child"
    elif outcome is None:
        error = f"the parent agent produced no result while writing its child (exit code {result.exit_code})"
    elif not outcome.ok:
        error = f"the parent agent crashed while writing its child: {outcome.error_summary()}"
    returned = outcome.value if error is None and outcome is not None else None
    if channel is None:
        return SelfModifyRun(returned=returned, error=error)
    return SelfModifyRun(
        returned=returned,
        error=error,
        calls=channel.calls_used,
        prompt_tokens=channel.prompt_tokens_used,
        completion_tokens=channel.completion_tokens_used,
        cost_usd=channel.cost_usd,
    )


def evaluation_row(task: TaskResult) -> Evaluation:
    """The archive row of one task run (agent_id is filled in when the archive stores it).

    Built without pydantic's validation (`detached`), as a row read back would be: the values are the
    TaskResult's own, already typed, and validating every task row cost the loop 0.2 ms per candidate.
    """
    return detached(
        Evaluation,
        {
            "id": None,
            "agent_id": 0,  # filled in by Archive.finish_evaluation
            "task_id": task.task_id,
            "split": task.split,
            "stage": task.stage,
            "score": task.score,
            "passed": task.passed,
            "executed": task.executed,
            "duration_s": task.duration_s,
            "exit_code": task.exit_code,
            "timed_out": task.timed_out,
            "oom_killed": task.oom_killed,
            "output_truncated": task.output_truncated,
            "feedback": task.feedback,
            "stdout_tail": task.stdout_tail,
            "stderr_tail": task.stderr_tail,
            "created_at": utcnow(),
            "output_hash": task.output_hash,
        },
    )


def repeat_limits(limits: Limits, repeat: int) -> Limits:
    """The limits of an agent's `repeat`-th evaluation (0: the first): the same, with task seeds of its own (the
    first keeps the run's seed, so every agent's first evaluation draws the same numbers)."""
    if repeat == 0 or limits.seed is None:
        return limits
    digest = hashlib.sha256(f"{limits.seed}/repeat {repeat}".encode()).digest()
    return dataclasses.replace(limits, seed=int.from_bytes(digest[:8], "big"))


def mean_result(results: list[AgentResult]) -> tuple[AgentResult, float | None]:
    """Several evaluations of one agent as one: the first, with its score (an invalid one counts 0), its score
    over what ran and each task's score replaced by their means; and the scores' standard deviation (None for
    one evaluation)."""
    first = results[0]
    if len(results) == 1:
        return first, None
    scores = [result.score if result.valid else 0.0 for result in results]
    by_task: dict[str, list[float]] = {}
    for result in results:
        for task in result.task_results:
            by_task.setdefault(task.task_id, []).append(task.score)
    tasks = [dataclasses.replace(task, score=statistics.fmean(by_task[task.task_id])) for task in first.task_results]
    mean = dataclasses.replace(
        first,
        score=statistics.fmean(scores),
        ran_score=statistics.fmean(result.ran_score for result in results),
        task_results=tasks,
    )
    return mean, statistics.pstdev(scores)


def failed_run(result: AgentResult) -> bool:
    """Whether a child's run failed, so its FM conversation is asked to fix it: it is invalid, or no task
    passed and none earned a score (a HumanEval agent failing every test). A valid program that
    scores, below the benchmark's optimum, did not fail: asked to "fix" it, a model sends it back unchanged
    (measured: 31 of 72 refusals on five suite tasks were such replies)."""
    return not result.valid or not any(task.passed or task.score > 0 for task in result.task_results)


def run_limits(config: RunConfig) -> Limits:
    """The per-task limits a run's `evaluation.*` settings override (None keeps the benchmark's), and the run's
    seed, from which each task's random seed is derived."""
    return Limits(
        timeout_s=config.evaluation.timeout_s,
        memory_mb=config.evaluation.memory_mb,
        max_output_bytes=config.evaluation.max_output_bytes,
        seed=config.seed,
    )


def agent_fm_budget(config: RunConfig) -> AgentFMBudget:
    """What one agent may spend through the gateway per task (`evaluation.agent_fm_*`); an evaluation gets
    `.times(its tasks)`, a parent writing its child (one run) this."""
    return AgentFMBudget(
        max_calls=config.evaluation.agent_fm_calls,
        max_tokens=config.evaluation.agent_fm_tokens,
        run_seed=config.seed,
    )
