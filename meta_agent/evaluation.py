"""Evaluating one agent in a sandbox session of its own, with its own FM socket: shared by the search
loop and `cambrian eval`, and the archive row of one task run."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from archive.models import Evaluation
from evaluators.base import Benchmark, Genome
from evaluators.runner import AgentResult, Limits, TaskResult, evaluate_agent
from meta_agent.llm.gateway import AgentChannel, FMGateway
from sandbox.base import FM_SOCKET_INSIDE, Sandbox


@dataclass(frozen=True)
class AgentFMBudget:
    """What one agent may spend through the gateway in one evaluation.

    max_calls / max_tokens: FM calls and tokens (>= 0; 0 refuses every call).
    run_seed: the run's seed, from which each call's default sampling seed is derived.
    """

    max_calls: int
    max_tokens: int
    run_seed: int


async def evaluate_in_sandbox(
    benchmark: Benchmark,
    genome: Genome,
    sandbox: Sandbox,
    *,
    agent_id: int,
    iteration: int,
    split: str,
    limits: Limits,
    gateway: FMGateway | None,
    fm_budget: AgentFMBudget,
) -> AgentResult:
    """Evaluate one agent on `split` in a sandbox session of its own (search loop and `cambrian eval` alike).

    With a gateway the agent gets its own FM socket and budget for this evaluation, closed afterwards;
    its calls are recorded under `agent_id`. SandboxError and GatewayError propagate (infrastructure faults).
    """
    session = await asyncio.to_thread(sandbox.session)
    channel: AgentChannel | None = None
    try:
        env: dict[str, str] = {}
        if gateway is not None:
            host_path = await asyncio.to_thread(session.fm_socket_host_path)
            channel = await gateway.open_agent(
                agent_id,
                max_calls=fm_budget.max_calls,
                max_tokens=fm_budget.max_tokens,
                run_seed=fm_budget.run_seed,
                iteration=iteration,
                socket_path=host_path,
            )
            # A sandbox sharing the host filesystem (host_path None) sees the socket where it is.
            env = channel.env(FM_SOCKET_INSIDE if host_path is not None else str(channel.socket_path))
        return await asyncio.to_thread(
            evaluate_agent, benchmark, genome, sandbox, split=split, limits=limits, session=session, env=env
        )
    finally:
        if channel is not None:
            await channel.close()
        await asyncio.to_thread(session.close)


def evaluation_row(task: TaskResult) -> Evaluation:
    """The archive row of one task run (agent_id is filled in when the archive stores it)."""
    return Evaluation(
        agent_id=0,  # filled in by Archive.finish_evaluation
        task_id=task.task_id,
        split=task.split,
        stage=task.stage,
        score=task.score,
        passed=task.passed,
        executed=task.executed,
        duration_s=task.duration_s,
        exit_code=task.exit_code,
        timed_out=task.timed_out,
        oom_killed=task.oom_killed,
        output_truncated=task.output_truncated,
        feedback=task.feedback,
        stdout_tail=task.stdout_tail,
        stderr_tail=task.stderr_tail,
    )
