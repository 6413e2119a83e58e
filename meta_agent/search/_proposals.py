"""Making one child: lend an operator what it needs for one proposal and say what came of it.

The loop picks the parent(s), the operator and the model; `Proposer.propose` calls the operator's
`propose(context, env)` with an `OperatorEnv` of its own for that attempt (`_Env`): draws seeded by the
run seed, iteration and attempt; the FM of the proposal's arm, every call counted for the child; the
static check; the parent agent's run on the executor (for `runs_agent` operators, e.g. self_modify).
`Proposer.fix` takes a child whose run failed back to the FM conversation that wrote it.

Every failure the candidate or the FM's reply causes comes back as a `Proposal` with a public reason,
never as an exception; infrastructure faults (FM unreachable, sandbox dead) propagate for the loop to
count.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence

import numpy as np

from cambrian.evaluators.base import AgentsWriteCode, Genome, entry_function
from cambrian.evaluators.base import ideas as benchmark_ideas
from cambrian.meta_agent.config import RunConfig, fm_redraws, fm_repair_rounds
from cambrian.meta_agent.edits import EditError, EditPool, check_child, edit_processes
from cambrian.meta_agent.llm import Completion, FMBadRequest, LLMClient, Request, derive_seed
from cambrian.meta_agent.operators import (
    FMOperator,
    Operator,
    PromptContext,
    Proposal,
    run_repair_note,
)
from cambrian.meta_agent.search._executor import Executor
from cambrian.meta_agent.search.evaluation import EvaluationContext


class Proposer:
    """Runs operators for the loop."""

    def __init__(
        self,
        *,
        context: EvaluationContext,
        operators: Mapping[str, Operator],
        llms: Mapping[str, LLMClient],
        executor: Executor | None,
        run_seed: int,
        repair_rounds: int = 1,
        redraws: int = 0,
        ideas: bool = True,
        edit_processes: int = 0,
    ) -> None:
        """context: the run's evaluation context: its benchmark, and, for a parent agent writing its child, the
        limits, the agents' gateway and budget. executor: where such a parent runs (`runs_agent` operators:
        self_modify); None when no such operator runs. repair_rounds: times a reply that fails to parse, apply
        or pass the static check goes back to the FM with the error, in the same conversation (FM operators
        only; >= 0). redraws: times such a reply is first drawn again from the same prompt with another seed
        (>= 0). ideas: give each FM proposal one direction drawn from the benchmark's `ideas` (seeded by
        run seed, iteration and attempt).
        edit_processes: worker processes that parse, apply and check FM replies (`EditPool`; 0: this thread);
        started at the first reply, stopped by `close()`."""
        self.benchmark = benchmark = context.benchmark
        self.operators = operators
        self.llms = llms
        self.executor = executor
        self.context = context
        self.run_seed = run_seed
        self.repair_rounds = max(0, repair_rounds)
        self.redraws = max(0, redraws)
        #: The function the harness calls in the entry file; the static check keeps it callable.
        self.entry_function = entry_function(benchmark)
        self.ideas = benchmark_ideas(benchmark) if ideas else ()
        self.edits = EditPool(edit_processes, entry_function=self.entry_function)

    def close(self) -> None:
        """Stop the edit processes, if any ran (a later proposal starts them again)."""
        self.edits.close()

    @classmethod
    def from_config(
        cls,
        config: RunConfig,
        *,
        context: EvaluationContext,
        operators: Mapping[str, Operator],
        llms: Mapping[str, LLMClient],
        executor: Executor | None,
    ) -> Proposer:
        """The proposer a run's settings describe (the loop and bench/fm_efficacy.py build it alike)."""
        return cls(
            context=context,
            operators=operators,
            llms=llms,
            executor=executor,
            run_seed=config.seed,
            repair_rounds=fm_repair_rounds(config.fm),
            redraws=fm_redraws(config.fm),
            ideas=config.search.ideas,
            edit_processes=edit_processes(config.search.edit_processes),
        )

    def idea(self, iteration: int, attempt: int) -> str | None:
        """The direction one FM proposal is asked to try: a seeded draw from the benchmark's ideas (None: none)."""
        if not self.ideas:
            return None
        rng = np.random.default_rng([self.run_seed, iteration, attempt, 0x1DEA])
        return self.ideas[int(rng.integers(len(self.ideas)))]

    async def propose(
        self,
        operator_name: str,
        ctx: PromptContext,
        *,
        model: str,
        iteration: int,
        attempt: int,
        proposal_id: str | None = None,
    ) -> Proposal:
        """One attempt at a child of `ctx.parent` (and `ctx.second_parent` for crossover).

        model: the label of the FM to ask ("" for operators that call none). attempt: 0, then 1, 2, ...
        for re-proposals of the same iteration; it varies the FM seed and the operator's draws. proposal_id:
        recorded with every FM call the attempt makes (a parent agent's included): the child that stores it
        is linked to them.
        Raises FMUnavailable / FMAuthError (FM down) and SandboxError / GatewayError (sandbox down).
        """
        env = _Env(self, model=model, iteration=iteration, attempt=attempt, proposal_id=proposal_id)
        try:
            return env.counted(await self.operators[operator_name].propose(ctx, env))
        except EditError as exc:
            return env.counted(Proposal(None, str(exc)))
        except FMBadRequest as exc:
            # The prompt itself was refused (e.g. longer than the context): the parent's fault, not the FM's.
            return env.counted(Proposal(None, f"the FM refused the prompt: {exc}"))

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
        proposal_id: str | None = None,
    ) -> Proposal:
        """The child again, after it failed when run (`FMOperator.fix`): `failure` (its public feedback)
        goes back to the FM in the conversation that wrote it. The new Proposal carries this call's usage
        only; a reply that cannot become a child gives a reason. proposal_id: the repair's own proposal."""
        operator = self.operators[operator_name]
        if not isinstance(operator, FMOperator):
            raise ValueError(f"{operator_name} is not an FM operator: only those keep a conversation to go back to")
        env = _Env(self, model=model, iteration=iteration, attempt=attempt, idea=failed.idea, proposal_id=proposal_id)
        try:
            return env.counted(await operator.fix(ctx, failed, failure, env))
        except EditError as exc:  # refused: stored invalid, and still marked as the repair it was
            return env.counted(Proposal(None, str(exc), repair_note=run_repair_note(failure)))


class _Env:
    """What one proposal may use (`operators.OperatorEnv`), and what its FM calls cost."""

    def __init__(
        self,
        proposer: Proposer,
        *,
        model: str,
        iteration: int,
        attempt: int,
        idea: str | None = None,
        proposal_id: str | None = None,
    ) -> None:
        self._proposer = proposer
        self._proposal_id = proposal_id
        self._model = model
        self._iteration = iteration
        self._attempt = attempt
        self._seed = derive_seed(proposer.run_seed, iteration, attempt)
        self._idea = idea  # the direction given to this proposal, recorded on the child
        self.prompt_tokens = 0
        self.completion_tokens = 0
        self.cost_usd = 0.0
        self.fm_seconds = 0.0

    @property
    def repair_rounds(self) -> int:
        return self._proposer.repair_rounds

    @property
    def redraws(self) -> int:
        return self._proposer.redraws

    def rng(self, salt: int | None = None) -> np.random.Generator:
        key = [self._proposer.run_seed, self._iteration, self._attempt]
        return np.random.default_rng(key if salt is None else [*key, salt])

    def idea(self) -> str | None:
        self._idea = self._proposer.idea(self._iteration, self._attempt)
        return self._idea

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        purpose: str,
        grammar: str | None = None,
        max_tokens: int | None = None,
        draw: int = 0,
    ) -> str:
        llm = self._proposer.llms.get(self._model)
        if llm is None:
            raise ValueError(f"this proposal has no FM {self._model!r}: an operator that asks one must set uses_fm")
        limit = getattr(llm, "max_tokens", None)  # fm.max_tokens; an operator's own cap only lowers it
        if max_tokens is not None and limit is not None:
            max_tokens = min(int(limit), max_tokens)
        completion = await llm.complete(
            Request(
                [dict(message) for message in messages],
                seed=derive_seed(self._proposer.run_seed, self._iteration, self._attempt, draw),
                purpose=purpose,
                iteration=self._iteration,
                proposal_id=self._proposal_id,
                grammar=grammar,
                max_tokens=max_tokens,
            )
        )
        self._count(completion)
        return completion.text

    def check(self, child: Genome, parent: Genome, *, note: str = "") -> Proposal:
        checked = check_child(child, parent, entry_function=self._proposer.entry_function)
        return Proposal(checked.genome, note=note, repair_note=checked.repair_note)

    async def derive(self, make: Callable[[], Genome], parent: Genome, *, note: str = "") -> Proposal:
        checked = await self._proposer.edits.derive(make, parent)
        return Proposal(checked.genome, note=note, repair_note=checked.repair_note)

    async def run_parent(self, parent: Genome, prompt: str) -> object:
        proposer = self._proposer
        benchmark = proposer.benchmark
        if not isinstance(benchmark, AgentsWriteCode):
            raise ValueError(f"{benchmark.name} builds no agent tasks (AgentsWriteCode: self_modify_task)")
        if proposer.executor is None:
            raise ValueError("the proposer was given no executor to run the parent agent on")
        task = benchmark.self_modify_task(prompt)
        run = await proposer.executor.run_parent(
            proposer.context, parent, task, iteration=self._iteration, fm_seed=self._seed, proposal_id=self._proposal_id
        )
        self.prompt_tokens += run.prompt_tokens
        self.completion_tokens += run.completion_tokens
        self.cost_usd += run.cost_usd
        if run.error is not None:
            raise EditError(run.error)
        return run.returned

    def counted(self, proposal: Proposal) -> Proposal:
        """`proposal` with what this proposal's FM calls cost, and its idea."""
        return dataclasses.replace(
            proposal,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            cost_usd=self.cost_usd,
            fm_seconds=self.fm_seconds,
            idea=proposal.idea or self._idea,
        )

    def _count(self, completion: Completion) -> None:
        self.prompt_tokens += completion.prompt_tokens
        self.completion_tokens += completion.completion_tokens
        self.cost_usd += completion.cost_usd
        self.fm_seconds += completion.latency_s


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


@dataclasses.dataclass(frozen=True)
class Repairable:
    """What it takes to send a child's failed run back to the FM that wrote it (`Proposer.fix`)."""

    operator: str
    ctx: PromptContext
    proposal: Proposal
    model: str
    iteration: int
    attempt: int
