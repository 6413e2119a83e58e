"""Making one child: drive an operator of any kind and say what came of it.

The loop picks the parent(s), the operator and the model; `Proposer.propose`
runs the operator the way its kind needs (meta_agent/operators.py):

- "fm": one FM call (rewrite, diff, crossover);
- "fm_two_step": an improvement plan first (purpose "diagnose"), then the edit;
- "sandbox": the parent agent itself writes its child in the sandbox, with
  its FM socket (self_modify, the Darwin Goedel Machine's move);
- "local": no FM at all (ast_mutate, the ablation baseline).

Every failure the candidate or the FM's reply causes comes back as a
`Proposal` with a public reason, never as an exception; infrastructure
faults (FM unreachable, sandbox dead) propagate for the loop to count.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from evaluators.base import Benchmark, Genome
from evaluators.runner import Limits
from meta_agent.edits import EditError
from meta_agent.config import RunConfig
from meta_agent.evaluation import AgentFMBudget, run_self_modify
from meta_agent.llm.client import Completion, LLMClient, derive_seed
from meta_agent.llm.errors import FMBadRequest
from meta_agent.llm.gateway import FMGateway
from meta_agent.operators import OPERATOR_KINDS, AnyOperator, PromptContext
from sandbox.base import Sandbox


def run_limits(config: RunConfig) -> Limits:
    """The per-task limits a run's `evaluation.*` settings override (None keeps the benchmark's)."""
    return Limits(
        timeout_s=config.evaluation.timeout_s,
        memory_mb=config.evaluation.memory_mb,
        max_output_bytes=config.evaluation.max_output_bytes,
    )


def agent_fm_budget(config: RunConfig) -> AgentFMBudget:
    """What one agent may spend through the gateway per evaluation (`evaluation.agent_fm_*`)."""
    return AgentFMBudget(
        max_calls=config.evaluation.agent_fm_calls,
        max_tokens=config.evaluation.agent_fm_tokens,
        run_seed=config.seed,
    )


@dataclass(frozen=True)
class Proposal:
    """What one attempt at a child produced: a genome, or the public reason there is none.

    Token and cost figures cover every FM call the attempt made (all of them in the ledger too).
    note: a short description of what changed, where the operator gives one (ast_mutate).
    """

    genome: Genome | None
    reason: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    note: str = ""

    def usage(self) -> dict[str, float | int]:
        return {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens, "cost_usd": self.cost_usd}


@dataclass
class _Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0

    def add(self, completion: Completion) -> None:
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.cost_usd += completion.cost_usd

    def proposal(self, genome: Genome | None, reason: str | None = None, note: str = "") -> Proposal:
        return Proposal(genome, reason, self.prompt_tokens, self.completion_tokens, self.cost_usd, note)


class Proposer:
    """Runs operators for the loop. `gateway` is read at each call (the session attaches it after start)."""

    def __init__(
        self,
        *,
        benchmark: Benchmark,
        operators: Mapping[str, AnyOperator],
        llms: Mapping[str, LLMClient],
        sandbox: Sandbox,
        limits: Limits,
        run_seed: int,
        fm_budget: AgentFMBudget,
        gateway: Callable[[], FMGateway | None],
    ) -> None:
        self.benchmark = benchmark
        self.operators = operators
        self.llms = llms
        self.sandbox = sandbox
        self.limits = limits
        self.run_seed = run_seed
        self.fm_budget = fm_budget
        self.gateway = gateway

    @classmethod
    def from_config(
        cls,
        config: RunConfig,
        *,
        benchmark: Benchmark,
        operators: Mapping[str, AnyOperator],
        llms: Mapping[str, LLMClient],
        sandbox: Sandbox,
        gateway: Callable[[], FMGateway | None],
    ) -> Proposer:
        """The proposer a run's settings describe (the loop and bench/fm_efficacy.py build it alike)."""
        return cls(
            benchmark=benchmark,
            operators=operators,
            llms=llms,
            sandbox=sandbox,
            limits=run_limits(config),
            run_seed=config.seed,
            fm_budget=agent_fm_budget(config),
            gateway=gateway,
        )

    async def propose(
        self,
        operator_name: str,
        ctx: PromptContext,
        *,
        model: str,
        iteration: int,
        attempt: int,
    ) -> Proposal:
        """One attempt at a child of `ctx.parent` (and `ctx.second_parent` for crossover).

        model: the label of the FM to ask ("" for local operators). attempt: 0, then 1, 2, ... for
        re-proposals of the same iteration; it varies the FM seed and the local operator's draws.
        Raises FMUnavailable / FMAuthError (FM down) and SandboxError / GatewayError (sandbox down).
        """
        operator = self.operators[operator_name]
        kind = OPERATOR_KINDS[operator_name]
        usage = _Usage()
        parent = ctx.parent.genome
        try:
            if kind == "local":
                rng = np.random.default_rng([self.run_seed, iteration, attempt])
                child, note = operator.mutate_with_note(parent, rng)  # type: ignore[union-attr]
                return usage.proposal(child, note=note)
            if kind == "sandbox":
                return await self._self_modify(operator, ctx, iteration=iteration, attempt=attempt)
            llm = self.llms[model]
            seed = derive_seed(self.run_seed, iteration, attempt)
            if kind == "fm_two_step":
                planned = await llm.complete(
                    operator.plan_messages(ctx), seed=seed, purpose="diagnose", iteration=iteration  # type: ignore[union-attr]
                )
                usage.add(planned)
                ctx = dataclasses.replace(ctx, plan=operator.parse_plan(planned.text))  # type: ignore[union-attr]
            completion = await llm.complete(operator.messages(ctx), seed=seed, purpose="mutate", iteration=iteration)  # type: ignore[union-attr]
            usage.add(completion)
            if operator_name == "crossover":
                second = ctx.second_parent.genome if ctx.second_parent is not None else None
                return usage.proposal(operator.apply(parent, completion.text, second_parent=second))  # type: ignore[call-arg]
            return usage.proposal(operator.apply(parent, completion.text))  # type: ignore[arg-type]
        except EditError as exc:
            return usage.proposal(None, str(exc))
        except FMBadRequest as exc:
            # The prompt itself was refused (e.g. longer than the context): the parent's fault, not the FM's.
            return usage.proposal(None, f"the FM refused the prompt: {exc}")

    async def _self_modify(self, operator: AnyOperator, ctx: PromptContext, *, iteration: int, attempt: int) -> Proposal:
        task = self.benchmark.self_modify_task(operator.task_prompt(ctx))  # type: ignore[attr-defined,union-attr]
        run = await run_self_modify(
            self.benchmark,
            ctx.parent.genome,
            task,
            self.sandbox,
            iteration=iteration,
            limits=self.limits,
            gateway=self.gateway(),
            fm_budget=dataclasses.replace(self.fm_budget, run_seed=derive_seed(self.run_seed, iteration, attempt)),
        )
        usage = _Usage(run.prompt_tokens, run.completion_tokens, run.cost_usd)
        if run.error is not None:
            return usage.proposal(None, run.error)
        try:
            return usage.proposal(operator.apply(ctx.parent.genome, run.returned))  # type: ignore[arg-type]
        except EditError as exc:  # here, so the parent's FM usage stays on the invalid child
            return usage.proposal(None, str(exc))
