"""The `OperatorContract` (meta_agent.testing) for the built-in operators and the example plugin's.

An FM operator's replies here are written as its prompt asks (a fenced program, a SEARCH/REPLACE block, the
named lines in a code block, a numbered plan), each one number of the parent changed (or, for lines without a
number, one statement added): the contract checks the operator around the reply, not a model (a real model's
replies are tested in tests/e2e). `self_modify`'s parent agent returns its own module with one knob turned, as
its task asks: the contract checks the operator around the agent's run, not the sandbox (tests/meta_agent/
search runs that).
"""

from __future__ import annotations

import ast
import re

import pytest

from cambrian.evaluators.base import Benchmark, Genome
from cambrian.meta_agent.operators import OPERATORS, Operator, Proposal, make_operator
from cambrian.meta_agent.testing import OperatorContract

NO_NUMBERS = "# EVOLVE-BLOCK-START\ndef pack_circles(n):\n    return list()\n# EVOLVE-BLOCK-END\n"
#: A program whose editable region holds no statement: `lines` and `knob` have nothing to ask for.
NO_STATEMENTS = "# EVOLVE-BLOCK-START\n\n# EVOLVE-BLOCK-END\ndef pack_circles(n):\n    return list()\n"
#: How the `lines` prompt names the lines to rewrite (prompts/lines.txt).
ASKED_LINES = re.compile(
    r"Rewrite only these lines of \S+ so that the program scores higher:\n```\w*\n(.*?)\n```", re.S
)
NUMBER = re.compile(r"\b\d+\.\d+|\b\d+\b")


def first_number(source: str) -> tuple[int, str, str]:
    """The line number (0-based), the old line and the line with its first float literal scaled by 1.1, from
    inside the EVOLVE-BLOCK."""
    lines = source.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "# EVOLVE-BLOCK-START")
    node = next(
        node
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and type(node.value) is float and node.lineno - 1 > start
    )
    old = lines[node.lineno - 1]
    new = old[: node.col_offset] + repr(round(node.value * 1.1, 6)) + old[node.end_col_offset :]
    return node.lineno - 1, old, new


def one_number_changed(genome: Genome) -> str:
    source = genome.files[genome.entry]
    row, _, new = first_number(source)
    lines = source.splitlines()
    lines[row] = new
    return "\n".join(lines) + "\n"


def asked_lines(messages: list[dict[str, str]]) -> str:
    """The lines a `lines` or `knob` prompt asks to rewrite."""
    found = ASKED_LINES.search(messages[-1]["content"])
    assert found is not None, "the lines prompt shows the lines to rewrite in a code block"
    return found.group(1)


def changed_lines(lines: str) -> str:
    """The lines with their first number changed (a float scaled by 1.1, an int plus one), or, without a
    number, one statement added before them at their indentation."""
    number = NUMBER.search(lines)
    if number is None:
        indent = lines[: len(lines) - len(lines.lstrip())]
        return f"{indent}attempts = 0\n{lines}"
    text = number.group()
    new = repr(round(float(text) * 1.1, 6)) if "." in text else str(int(text) + 1)
    return lines[: number.start()] + new + lines[number.end() :]


class TestAstMutate(OperatorContract):
    def make_operator(self) -> Operator:
        return make_operator("ast_mutate")

    def uneditable_parent(self, benchmark: Benchmark) -> Genome:
        return Genome(files={"packing.py": NO_NUMBERS}, entry="packing.py")


class TestRewrite(OperatorContract):
    def make_operator(self) -> Operator:
        return make_operator("rewrite")

    def reply(self, messages: list[dict[str, str]], parent: Genome) -> str:
        return f"The radii grow a little:\n```python\n{one_number_changed(parent)}```\n"


class TestDiff(OperatorContract):
    def make_operator(self) -> Operator:
        return make_operator("diff")

    def reply(self, messages: list[dict[str, str]], parent: Genome) -> str:
        _, old, new = first_number(parent.files[parent.entry])
        return f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n"


class TestLines(OperatorContract):
    def make_operator(self) -> Operator:
        return make_operator("lines")

    def reply(self, messages: list[dict[str, str]], parent: Genome) -> str:
        return f"```python\n{changed_lines(asked_lines(messages))}\n```\n"

    def uneditable_parent(self, benchmark: Benchmark) -> Genome:
        return Genome(files={"packing.py": NO_STATEMENTS}, entry="packing.py")


class TestKnob(OperatorContract):
    """On the HumanEval agent, whose module-level numbers (SAMPLES, MAX_TOKENS, TEMPERATURE) are its knobs."""

    benchmark_name = "humaneval"

    def make_operator(self) -> Operator:
        return make_operator("knob")

    def reply(self, messages: list[dict[str, str]], parent: Genome) -> str:
        asked = asked_lines(messages)
        assert re.fullmatch(r"[A-Z_]+ = [\d.]+", asked), f"knob asked for {asked!r}, not a knob"
        return f"```python\n{changed_lines(asked)}\n```\n"

    def uneditable_parent(self, benchmark: Benchmark) -> Genome:
        return Genome(files={"packing.py": NO_STATEMENTS}, entry="packing.py")


class TestDiagnose(OperatorContract):
    """A plan from the parent's failure first (purpose "diagnose"), then the SEARCH/REPLACE edit it asks for."""

    parent_feedback = "n=26: failed: circles 3 and 7 overlap by 0.012"
    PLAN = "1. Move the rings a little further apart.\n2. Keep every circle inside the square."

    def make_operator(self) -> Operator:
        return make_operator("diagnose")

    def reply(self, messages: list[dict[str, str]], parent: Genome) -> str:
        if messages[-1]["content"].startswith("## Contract"):  # the plan's request; then the edit's
            return self.PLAN
        _, old, new = first_number(parent.files[parent.entry])
        return f"<<<<<<< SEARCH\n{old}\n=======\n{new}\n>>>>>>> REPLACE\n"

    def test_the_plan_reads_the_failure_and_the_edit_follows_the_plan(self) -> None:
        _, made, env = self.propose()
        assert isinstance(made, Proposal), made
        (plan_purpose, plan_messages), (edit_purpose, edit_messages) = env.calls
        assert (plan_purpose, edit_purpose) == ("diagnose", "mutate")
        assert self.parent_feedback in plan_messages[-1]["content"]
        assert edit_messages[: len(plan_messages)] == plan_messages  # one conversation: the server caches it
        assert edit_messages[len(plan_messages)] == {"role": "assistant", "content": self.PLAN}


class TestSelfModify(OperatorContract):
    """The HumanEval agent writes its child: its module returned with one more sample drawn per problem."""

    benchmark_name = "humaneval"

    def make_operator(self) -> Operator:
        return make_operator("self_modify")

    def parent_returns(self, prompt: str, parent: Genome) -> object:
        module = prompt.split("\n# ----------", 1)[0]  # the task block the operator appended is not the module
        assert module.strip() == parent.files[parent.entry].strip(), "the task shows the agent its own module"
        assert "SAMPLES = 1\n" in module
        return module.replace("SAMPLES = 1\n", "SAMPLES = 2\n", 1)


class TestCrossover(OperatorContract):
    def make_operator(self) -> Operator:
        return make_operator("crossover")

    def second_parent(self, benchmark: Benchmark) -> Genome:
        seed = benchmark.seed()
        return Genome(files={**seed.files, seed.entry: one_number_changed(seed)}, entry=seed.entry)

    def reply(self, messages: list[dict[str, str]], parent: Genome) -> str:
        child = Genome(files={**parent.files, parent.entry: one_number_changed(parent)}, entry=parent.entry)
        return f"```python\n{one_number_changed(child)}```\n"  # the second parent's change, and one more


@pytest.mark.usefixtures("example_plugin")
class TestExamplePluginOperator(OperatorContract):
    benchmark_name = "example"

    def make_operator(self) -> Operator:
        from cambrian_example_benchmark.search import ScaleConstant

        return ScaleConstant()

    def uneditable_parent(self, benchmark: Benchmark) -> Genome:
        return Genome(
            files={"curve.py": "# EVOLVE-BLOCK-START\ndef f(x):\n    return x\n# EVOLVE-BLOCK-END\n"}, entry="curve.py"
        )


# ----- the contracts catch what they promise to catch ------------------------------------------------------


class _Careless(Operator):
    """Calls the FM without declaring it, and draws from its own generator instead of env.rng()."""

    name = "careless"

    async def propose(self, context, env):  # type: ignore[no-untyped-def]
        import random

        await env.complete([{"role": "user", "content": "hi"}], purpose="mutate")
        parent = context.parent.genome
        source = parent.files[parent.entry].replace("0.35 * ring", f"{random.random():.6f} * ring", 1)
        return env.check(Genome(files={**parent.files, parent.entry: source}, entry=parent.entry), parent)


class _CarelessContract(OperatorContract):
    registered = False

    def make_operator(self) -> Operator:
        return _Careless()


def test_every_built_in_operator_runs_the_contract() -> None:
    contracts = (TestAstMutate, TestRewrite, TestDiff, TestLines, TestKnob, TestDiagnose, TestSelfModify, TestCrossover)
    tested = {contract().make_operator().name for contract in contracts}
    assert tested == set(OPERATORS), f"no OperatorContract for {sorted(set(OPERATORS) - tested)}"


def test_the_operator_contract_fails_an_undeclared_fm_call_and_unseeded_draws() -> None:
    contract = _CarelessContract()
    with pytest.raises(AssertionError, match="declare uses_fm"):
        contract.test_it_makes_a_checked_child_of_the_parent()
    _Careless.uses_fm = True  # declared now: the FM replies; the draws are still its own
    try:
        contract.reply = lambda messages, parent: "ok"  # type: ignore[method-assign]
        with pytest.raises(AssertionError, match="draws from something besides env.rng"):
            contract.test_the_same_draws_make_the_same_child()
    finally:
        _Careless.uses_fm = False


class _Boastful(Operator):
    """Declares that its parent agent writes its child, and writes the child itself."""

    name = "boastful"
    runs_agent = True

    async def propose(self, context, env):  # type: ignore[no-untyped-def]
        parent = context.parent.genome
        source = parent.files[parent.entry].replace("SAMPLES = 1", "SAMPLES = 2", 1)
        return env.check(Genome(files={**parent.files, parent.entry: source}, entry=parent.entry), parent)


def test_the_operator_contract_fails_a_declared_parent_run_that_never_happens() -> None:
    class Contract(OperatorContract):
        benchmark_name = "humaneval"
        registered = False

        def make_operator(self) -> Operator:
            return _Boastful()

    with pytest.raises(AssertionError, match="without running its parent"):
        Contract().test_it_calls_the_fm_and_runs_the_parent_only_as_it_declares()
    with pytest.raises(AssertionError, match="builds agent tasks"):
        type("OnCircles", (Contract,), {"benchmark_name": "circle_packing"})().propose()
