"""The `OperatorContract` (meta_agent.testing) for the built-in operators and the example plugin's.

An FM operator's replies here are written as its prompt asks (a fenced program, a SEARCH/REPLACE block), each
one number of the parent changed: the contract checks the operator around the reply, not a model (a real
model's replies are tested in tests/e2e).
"""

from __future__ import annotations

import ast

import pytest

from cambrian.evaluators.base import Benchmark, Genome
from cambrian.meta_agent.operators import Operator, make_operator
from cambrian.meta_agent.testing import OperatorContract

NO_NUMBERS = "# EVOLVE-BLOCK-START\ndef pack_circles(n):\n    return list()\n# EVOLVE-BLOCK-END\n"


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
