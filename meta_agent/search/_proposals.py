"""Making one child: drive an operator of any kind and say what came of it.

The loop picks the parent(s), the operator and the model; `Proposer.propose`
runs the operator the way its kind needs (`meta_agent.operators`):

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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np

from evaluators.base import Benchmark, Genome
from evaluators.runner import Limits
from meta_agent.config import RunConfig
from meta_agent.edits import EditError, check_child
from meta_agent.llm import Completion, FMBadRequest, FMGateway, LLMClient, derive_seed
from meta_agent.operators import (
    AnyOperator,
    LocalOperator,
    Operator,
    PromptContext,
    SandboxOperator,
    TwoStepOperator,
    render,
)
from meta_agent.search._evaluation import AgentFMBudget, run_self_modify
from sandbox.base import Sandbox

# How a child made by `Proposer.fix` (a failed run sent back to the FM) begins its repair_note: such a child
# shares its iteration with the child that failed.
RUN_REPAIR_NOTE = "FM repair after the run failed"


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
    repair_note: str | None = None  # what was repaired before evaluation (static imports, an FM repair round)
    idea: str | None = None  # the direction the prompt asked the FM to try, if any
    #: The FM conversation that wrote the child, its last reply included (FM operators): where `Proposer.fix`
    #: continues when the child fails to run. `repairs_left`: how many more times it may go back.
    conversation: tuple[Mapping[str, str], ...] = ()
    repairs_left: int = 0


@dataclass
class _Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    idea: str | None = None

    def add(self, completion: Completion) -> None:
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.cost_usd += completion.cost_usd

    def proposal(
        self, genome: Genome | None, reason: str | None = None, note: str = "", repair_note: str | None = None
    ) -> Proposal:
        return Proposal(
            genome, reason, self.prompt_tokens, self.completion_tokens, self.cost_usd, note, repair_note, self.idea
        )


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
        repair_rounds: int = 1,
        ideas: bool = True,
    ) -> None:
        """repair_rounds: times a reply that fails to parse, apply or pass the static check goes back to the
        FM with the error, in the same conversation (FM operators only; >= 0). ideas: give each FM proposal
        one direction drawn from the benchmark's `ideas` (seeded by run seed, iteration and attempt)."""
        self.benchmark = benchmark
        self.operators = operators
        self.llms = llms
        self.sandbox = sandbox
        self.limits = limits
        self.run_seed = run_seed
        self.fm_budget = fm_budget
        self.gateway = gateway
        self.repair_rounds = max(0, repair_rounds)
        #: The function the harness calls in the entry file; the static check keeps it callable.
        self.entry_function: str | None = getattr(benchmark, "entry_function", None)
        self.ideas: tuple[str, ...] = tuple(getattr(benchmark, "ideas", ()) or ()) if ideas else ()

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
            repair_rounds=config.fm.repair_rounds,
            ideas=config.search.ideas,
        )

    def idea(self, iteration: int, attempt: int) -> str | None:
        """The direction one FM proposal is asked to try: a seeded draw from the benchmark's ideas (None: none)."""
        if not self.ideas:
            return None
        rng = np.random.default_rng([self.run_seed, iteration, attempt, 0x1DEA])
        return self.ideas[int(rng.integers(len(self.ideas)))]

    def focus(self, operator: object, parent: Genome, iteration: int, attempt: int) -> str | None:
        """The lines an operator that picks them (`lines`) asks the FM to rewrite: a seeded draw (else None)."""
        pick = getattr(operator, "pick", None)
        if pick is None:
            return None
        return pick(parent, np.random.default_rng([self.run_seed, iteration, attempt, 0xF0C5]))

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
        kind = operator.kind
        usage = _Usage()
        parent = ctx.parent.genome
        try:
            # The registry checked that each operator follows the protocol of its kind.
            if kind == "local":
                local = cast(LocalOperator, operator)
                rng = np.random.default_rng([self.run_seed, iteration, attempt])
                with_note = getattr(local, "mutate_with_note", None)  # AstMutation names its edits
                child, note = with_note(parent, rng) if with_note else (local.mutate(parent, rng), "")
                return self._checked(usage, child, parent, note=note)
            if kind == "sandbox":
                return await self._self_modify(
                    cast(SandboxOperator, operator), ctx, iteration=iteration, attempt=attempt
                )
            fm = cast(Operator, operator)
            llm = self.llms[model]
            seed = derive_seed(self.run_seed, iteration, attempt)
            if ctx.idea is None and ctx.second_parent is None:  # crossover's direction is the other parent
                ctx = dataclasses.replace(ctx, idea=self.idea(iteration, attempt))
                usage.idea = ctx.idea
            if ctx.focus is None:
                ctx = dataclasses.replace(ctx, focus=self.focus(fm, parent, iteration, attempt))
            if kind == "fm_two_step":
                two_step = cast(TwoStepOperator, operator)
                planned = await llm.complete(
                    two_step.plan_messages(ctx), seed=seed, purpose="diagnose", iteration=iteration
                )
                usage.add(planned)
                ctx = dataclasses.replace(ctx, plan=two_step.parse_plan(planned.text))
            return await self._edit(fm, ctx, llm, usage, seed=seed, iteration=iteration)
        except EditError as exc:
            return usage.proposal(None, str(exc))
        except FMBadRequest as exc:
            # The prompt itself was refused (e.g. longer than the context): the parent's fault, not the FM's.
            return usage.proposal(None, f"the FM refused the prompt: {exc}")

    async def _edit(
        self, operator: Operator, ctx: PromptContext, llm: LLMClient, usage: _Usage, *, seed: int, iteration: int
    ) -> Proposal:
        """Ask for the edit; a reply that cannot become a checked child goes back with its error, up to
        `repair_rounds` times, in the same conversation (the ledger's purpose "repair")."""
        messages = list(operator.messages(ctx))
        grammar = operator.grammar(ctx)
        errors: list[str] = []
        for round_ in range(self.repair_rounds + 1):
            completion = await llm.complete(
                messages, seed=seed, purpose="repair" if round_ else "mutate", iteration=iteration, grammar=grammar,
                max_tokens=_reply_cap(operator, llm),
            )  # fmt: skip
            usage.add(completion)
            try:
                child = _apply(operator, ctx, completion.text)
                checked = check_child(child, ctx.parent.genome, entry_function=self.entry_function)
            except EditError as exc:
                errors.append(str(exc))
                if round_ == self.repair_rounds:
                    if round_:
                        return usage.proposal(None, f"{exc} (still failing after {round_} repair round(s))")
                    raise
                messages += [
                    {"role": "assistant", "content": completion.text},
                    {"role": "user", "content": render("repair", {
                        "error": str(exc), "fix": exc.fix.rstrip("."), "format_hint": operator.format_hint(ctx),
                    }).strip()},
                ]  # fmt: skip
                continue
            repairs = list(checked.repairs)
            if errors:
                repairs.insert(0, f"FM repair round {len(errors)} fixed: {_first_line(errors[-1])}")
            conversation = (*messages, {"role": "assistant", "content": completion.text})
            return dataclasses.replace(
                usage.proposal(checked.genome, repair_note="; ".join(repairs) or None),
                conversation=conversation,
                repairs_left=self.repair_rounds - round_,
            )
        raise AssertionError("unreachable: the last round returns or raises")

    async def fix(
        self,
        operator_name: str,
        ctx: PromptContext,
        failed: Proposal,
        failure: str,
        *,
        model: str,
        iteration: int,
        attempt: int,
    ) -> Proposal:
        """The child again, after it failed when run: `failure` (its public feedback: the crash, the timeout,
        the invalid result) goes back to the FM in the conversation that wrote it (ledger purpose "repair").

        `failed` must carry a conversation and repairs_left > 0. The answer is checked like any reply and
        comes back as a new Proposal (its usage only); a reply that cannot become a child gives a reason.
        """
        if not failed.conversation or failed.repairs_left <= 0:
            raise ValueError("fix needs a proposal with its FM conversation and repair rounds left")
        operator = cast(Operator, self.operators[operator_name])  # only FM operators keep a conversation
        llm = self.llms[model]
        ctx = dataclasses.replace(
            ctx, idea=failed.idea, focus=ctx.focus or self.focus(operator, ctx.parent.genome, iteration, attempt)
        )
        usage = _Usage(idea=failed.idea)
        message = render("repair_run", {"failure": failure.strip(), "format_hint": operator.format_hint(ctx)})
        messages = [*failed.conversation, {"role": "user", "content": message.strip()}]
        completion = await llm.complete(
            messages, seed=derive_seed(self.run_seed, iteration, attempt), purpose="repair", iteration=iteration,
            grammar=operator.grammar(ctx), max_tokens=_reply_cap(operator, llm),
        )  # fmt: skip
        usage.add(completion)
        try:
            child = _apply(operator, ctx, completion.text)
            checked = check_child(child, ctx.parent.genome, entry_function=self.entry_function)
        except EditError as exc:
            return usage.proposal(None, f"{exc} (the repair after a failed run)")
        note = "; ".join([f"{RUN_REPAIR_NOTE}: {_first_line(failure)}", *checked.repairs])
        return dataclasses.replace(
            usage.proposal(checked.genome, repair_note=note),
            conversation=(*messages, {"role": "assistant", "content": completion.text}),
            repairs_left=failed.repairs_left - 1,
        )

    def _checked(self, usage: _Usage, child: Genome, parent: Genome, *, note: str = "") -> Proposal:
        """A child that passed the static check (with its repairs), or the reason it did not."""
        checked = check_child(child, parent, entry_function=self.entry_function)
        return usage.proposal(checked.genome, note=note, repair_note=checked.repair_note)

    async def _self_modify(
        self, operator: SandboxOperator, ctx: PromptContext, *, iteration: int, attempt: int
    ) -> Proposal:
        task = self.benchmark.self_modify_task(operator.task_prompt(ctx))  # type: ignore[attr-defined]  # compose checked supports_self_modify
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
            return self._checked(usage, operator.apply(ctx.parent.genome, run.returned), ctx.parent.genome)
        except EditError as exc:  # here, so the parent's FM usage stays on the invalid child
            return usage.proposal(None, str(exc))


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _apply(operator: Operator, ctx: PromptContext, reply: str) -> Genome:
    """The child `operator` makes of `reply`: with the second parent of a crossover, or the lines a `lines`
    proposal asked for."""
    if ctx.second_parent is not None:
        return operator.apply(ctx.parent.genome, reply, second_parent=ctx.second_parent.genome)  # type: ignore[call-arg]  # a crossover's apply
    if ctx.focus is not None:
        return operator.apply(ctx.parent.genome, reply, focus=ctx.focus)  # type: ignore[call-arg]  # an operator that picks lines
    return operator.apply(ctx.parent.genome, reply)


def _reply_cap(operator: object, llm: LLMClient) -> int | None:
    """The most tokens a reply of `operator` may take: None (the client's fm.max_tokens), or less where the
    operator's reply is short by nature (`lines`: a few lines; a small model that loses the format writes
    on to the limit, so a tight cap is what that costs)."""
    cap = getattr(operator, "max_reply_tokens", None)
    if cap is None:
        return None
    limit = getattr(llm, "max_tokens", None)
    return cap if limit is None else min(int(limit), cap)
