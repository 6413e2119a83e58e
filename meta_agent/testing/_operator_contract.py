"""The contract every operator passes, built-in or a plugin's: `OperatorContract`, and the `ContractEnv` it
lends the operator (seeded draws, the FM's replies from the test, the real static check).

    class TestScaleConstant(OperatorContract):
        benchmark_name = "example"
        def make_operator(self):
            return ScaleConstant()

An operator that calls the FM (`uses_fm`) gets its replies from the test's `reply(messages, parent)`, so the
contract checks the operator, not a model: a reply that makes a child of the parent, written as the
operator's prompt asks for it. An operator whose parent agent writes its child (`runs_agent`, as
`self_modify`) gets what the parent's entry function returned from the test's `parent_returns(prompt,
parent)` in the same way: the contract checks the operator around the agent's run, not the sandbox (the
search's own tests run that); its benchmark must build agent tasks (`benchmark_name = "humaneval"`).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from cambrian.evaluators.base import Benchmark, Genome, entry_function
from cambrian.evaluators.registry import get_benchmark
from cambrian.meta_agent.edits import EditError, check_child
from cambrian.meta_agent.operators import (
    Operator,
    ParentInfo,
    PromptContext,
    Proposal,
    make_operator,
    supports_self_modify,
)

#: The FM's reply to one call: the messages the operator sent, and the parent it edits.
Replier = Callable[[list[dict[str, str]], Genome], str]
#: What the parent agent's entry function returns when run on a task: the prompt it was given, and the parent.
ParentRun = Callable[[str, Genome], object]


class ContractEnv:
    """An `OperatorEnv` for tests: draws seeded by `seed`, FM replies from `reply` (None: an operator that
    asks the FM fails the test), the static check the search runs, and no sandbox: the parent agent's run
    returns what `parent_run(prompt, parent)` says (None: an operator that runs its parent fails the test).
    Records every FM call (`calls`: purpose and messages) and parent run (`parent_runs`; the prompts in
    `parent_prompts`)."""

    def __init__(
        self,
        parent: Genome,
        *,
        seed: int = 0,
        reply: Replier | None = None,
        entry_function: str | None = None,
        repair_rounds: int = 1,
        redraws: int = 0,
        parent_run: ParentRun | None = None,
    ) -> None:
        self._parent = parent
        self._seed = seed
        self._reply = reply
        self._entry_function = entry_function
        self._repair_rounds = repair_rounds
        self._redraws = redraws
        self._parent_run = parent_run
        self.calls: list[tuple[str, list[dict[str, str]]]] = []
        self.parent_runs = 0
        self.parent_prompts: list[str] = []

    @property
    def repair_rounds(self) -> int:
        return self._repair_rounds

    @property
    def redraws(self) -> int:
        return self._redraws

    def rng(self, salt: int | None = None) -> np.random.Generator:
        return np.random.default_rng([self._seed] if salt is None else [self._seed, salt])

    def idea(self) -> str | None:
        return None

    async def complete(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        purpose: str,
        grammar: str | None = None,
        max_tokens: int | None = None,
        draw: int = 0,
    ) -> str:
        shown = [dict(message) for message in messages]
        self.calls.append((purpose, shown))
        if self._reply is None:
            raise AssertionError("the operator called the FM: declare uses_fm = True (and give the test a reply)")
        return self._reply(shown, self._parent)

    def check(self, child: Genome, parent: Genome, *, note: str = "") -> Proposal:
        checked = check_child(child, parent, entry_function=self._entry_function)
        return Proposal(checked.genome, note=note, repair_note=checked.repair_note)

    async def derive(self, make: Callable[[], Genome], parent: Genome, *, note: str = "") -> Proposal:
        return self.check(make(), parent, note=note)

    async def run_parent(self, parent: Genome, prompt: str) -> object:
        self.parent_runs += 1
        self.parent_prompts.append(prompt)
        if self._parent_run is None:
            raise AssertionError(
                "the operator ran its parent agent: declare runs_agent = True (and give the test parent_returns)"
            )
        return self._parent_run(prompt, parent)


class OperatorContract:
    """What every operator does; subclass it with `make_operator()` (and, for an FM operator, `reply`).

    The parent is the seed of `benchmark_name` (override `parent` for another); a crossover's second parent
    is `second_parent`. Its prompt shows `parent_feedback` as the parent's last evaluation (give an operator
    that works from failures, as `diagnose`, a failure to read). `uneditable_parent` may give a program the
    operator cannot edit: it must then say why (`cannot_edit`, or an EditError). An operator that runs its
    parent agent (`runs_agent`) gets what the agent returned from `parent_returns`. `registered`: the
    operator is found by its name (`make_operator`, which reads the `cambrian.operators` entry points too).
    """

    benchmark_name: str = "circle_packing"
    options: Mapping[str, Any] = {}
    registered: bool = True
    parent_feedback: str = "scored 0.5"

    def make_operator(self) -> Operator:
        raise TypeError(f"{type(self).__name__} must define make_operator() to run the OperatorContract")

    def make_benchmark(self) -> Benchmark:
        return get_benchmark(self.benchmark_name, dict(self.options))

    def parent(self, benchmark: Benchmark) -> Genome:
        return benchmark.seed()

    def second_parent(self, benchmark: Benchmark) -> Genome:
        return self.parent(benchmark)

    def uneditable_parent(self, benchmark: Benchmark) -> Genome | None:
        return None

    def reply(self, messages: list[dict[str, str]], parent: Genome) -> str:
        raise AssertionError(f"{type(self).__name__}: an operator that calls the FM needs the test's reply()")

    def parent_returns(self, prompt: str, parent: Genome) -> object:
        """What the parent agent's entry function returns when run on the agent task for `prompt` (for an
        operator that declares `runs_agent`): written as the prompt asks, as `reply` is for an FM call."""
        raise AssertionError(
            f"{type(self).__name__}: an operator that runs its parent needs the test's parent_returns()"
        )

    def propose(
        self, *, seed: int = 0, parent: Genome | None = None
    ) -> tuple[Genome, Proposal | EditError, ContractEnv]:
        """The parent (the contract's, unless given), what one proposal of it made (a Proposal, or the EditError
        it raised), and the env it was lent."""
        operator = self.make_operator()
        benchmark = self.make_benchmark()
        if operator.runs_agent:
            assert supports_self_modify(benchmark), (
                f"{operator.name} runs its parent agent: give the contract a benchmark that builds agent tasks "
                "(benchmark_name = 'humaneval', or one with self_modify_task)"
            )
        parent = self.parent(benchmark) if parent is None else parent
        context = PromptContext(
            contract=benchmark.contract,
            benchmark=benchmark.name,
            parent=ParentInfo(agent_id=1, genome=parent, score=0.5, feedback=self.parent_feedback),
            second_parent=(
                ParentInfo(agent_id=2, genome=self.second_parent(benchmark), score=0.4, feedback="scored 0.4")
                if operator.needs_second_parent
                else None
            ),
        )
        env = ContractEnv(
            parent,
            seed=seed,
            reply=self.reply if operator.uses_fm else None,
            entry_function=entry_function(benchmark),
            parent_run=self.parent_returns if operator.runs_agent else None,
        )
        try:
            return parent, asyncio.run(operator.propose(context, env)), env
        except EditError as refused:
            return parent, refused, env

    # ----- the contract ------------------------------------------------------------------------

    def test_it_declares_what_it_is(self) -> None:
        operator = self.make_operator()
        assert isinstance(operator, Operator)
        assert isinstance(operator.name, str) and operator.name.isidentifier(), operator.name
        flags = (operator.uses_fm, operator.runs_agent, operator.needs_second_parent)
        assert all(isinstance(flag, bool) for flag in flags)

    def test_it_makes_a_checked_child_of_the_parent(self) -> None:
        parent, made, _ = self.propose()
        assert isinstance(made, Proposal), f"no child of the contract's parent: {made}"
        assert made.genome is not None, f"a Proposal without a genome must give its reason: {made.reason}"
        assert made.genome.entry in made.genome.files and made.genome != parent
        again = check_child(made.genome, parent, entry_function=entry_function(self.make_benchmark()))
        assert again.genome == made.genome, "the child was not passed through env.check (or env.derive)"

    def test_the_same_draws_make_the_same_child(self) -> None:
        first, second = self.propose(seed=7)[1], self.propose(seed=7)[1]
        assert isinstance(first, Proposal) and isinstance(second, Proposal), f"no child: {first} / {second}"
        assert first.genome == second.genome, "the operator draws from something besides env.rng()"

    def test_it_calls_the_fm_and_runs_the_parent_only_as_it_declares(self) -> None:
        operator = self.make_operator()
        _, _, env = self.propose()
        if operator.uses_fm:
            assert env.calls, "uses_fm is set, but the operator made its child without an FM call"
        if operator.runs_agent:
            assert env.parent_runs, "runs_agent is set, but the operator made its child without running its parent"
        assert not env.calls or operator.uses_fm
        assert not env.parent_runs or operator.runs_agent

    def test_the_parent_is_left_as_it_was(self) -> None:
        parent = self.parent(self.make_benchmark())
        before = copy.deepcopy(dict(parent.files))
        self.propose(parent=parent)
        assert dict(parent.files) == before

    def test_cannot_edit_is_a_pure_answer_about_the_code(self) -> None:
        operator = self.make_operator()
        benchmark = self.make_benchmark()
        parent = self.parent(benchmark)
        assert operator.cannot_edit(parent) is None, "the contract's parent must be one the operator can edit"
        uneditable = self.uneditable_parent(benchmark)
        if uneditable is None:
            return
        reason = operator.cannot_edit(uneditable)
        assert reason == operator.cannot_edit(uneditable)
        if reason is not None:
            assert isinstance(reason, str) and reason.strip(), "a reason names what the operator needs"
            return
        _, made, _ = self.propose(parent=uneditable)
        refused = made if isinstance(made, EditError) else None
        assert refused is not None and str(refused).strip(), "an uneditable parent gets an EditError with its reason"

    def test_it_is_found_by_its_name(self) -> None:
        if not self.registered:
            return
        operator = self.make_operator()
        assert type(make_operator(operator.name)) is type(operator)
