"""The generality suite's program benchmarks (`cambrian.evaluators.programs`): each runs the
`BenchmarkContract`, and each ships a reference program that scores clearly above its seed on both splits, in
the real local sandbox."""

from __future__ import annotations

import ast
from collections.abc import Iterable

import pytest

from cambrian.evaluators.base import Benchmark, Task
from cambrian.evaluators.programs import PROGRAM_BENCHMARKS, ProgramBenchmark
from cambrian.evaluators.registry import get_benchmark
from cambrian.evaluators.runner import evaluate_agent
from cambrian.meta_agent.operators import make_operator
from cambrian.meta_agent.testing import BenchmarkContract
from cambrian.sandbox.local import LocalSandbox


def _contract(program: type[ProgramBenchmark]) -> type[BenchmarkContract]:
    class Contract(BenchmarkContract):
        benchmark_name = program.name

        def secrets(self, benchmark: Benchmark, task: Task) -> Iterable[str]:
            targets = getattr(benchmark, "_targets", None)  # symbolic regression: the y values stay on the host
            if targets is None or task.split != "holdout":
                return []
            return [f"{y:.6f}" for y in targets[(task.split, int(task.id.rsplit("-", 1)[1]))]]

    Contract.__name__ = Contract.__qualname__ = f"Test{program.__name__}Contract"
    return Contract


for _program in PROGRAM_BENCHMARKS:
    globals()[f"Test{_program.__name__}Contract"] = _contract(_program)


@pytest.fixture(scope="module")
def sandbox() -> Iterable[LocalSandbox]:
    box = LocalSandbox()
    yield box
    box.close()


@pytest.mark.parametrize("program", PROGRAM_BENCHMARKS, ids=lambda program: program.name)
def test_the_reference_beats_the_seed_on_both_splits(program: type[ProgramBenchmark], sandbox: LocalSandbox) -> None:
    benchmark = get_benchmark(program.name)
    assert isinstance(benchmark, ProgramBenchmark)
    for split in ("search", "holdout"):
        seed = evaluate_agent(benchmark, benchmark.seed(), sandbox, split=split)
        reference = evaluate_agent(benchmark, benchmark.reference(), sandbox, split=split)
        assert seed.valid and reference.valid, (seed.invalid_reason, reference.invalid_reason)
        assert reference.score > seed.score * 1.05, (split, seed.score, reference.score)


@pytest.mark.parametrize("program", PROGRAM_BENCHMARKS, ids=lambda program: program.name)
def test_every_seed_has_a_block_the_default_operators_can_edit(program: type[ProgramBenchmark]) -> None:
    seed = get_benchmark(program.name).seed()
    assert any("EVOLVE-BLOCK-START" in text for text in seed.files.values())
    for name in ("lines", "diff"):
        assert make_operator(name).cannot_edit(seed) is None, name
    # A whole-region rewrite fits in a reply (fm.max_tokens = 1024) everywhere but the 300-line seed.
    assert (make_operator("rewrite").cannot_edit(seed) is None) == (program.name != "strip_packing")


def test_the_suite_has_the_shapes_it_promises() -> None:
    seeds = {program.name: get_benchmark(program.name).seed() for program in PROGRAM_BENCHMARKS}
    knapsack = ast.parse(seeds["knapsack"].files["priority.py"])
    (function,) = [node for node in knapsack.body if isinstance(node, ast.FunctionDef)]
    assert isinstance(function.body[-1], ast.Return) and len(function.body) == 2  # a docstring and one return
    assert any(isinstance(node, ast.ClassDef) for node in ast.parse(seeds["load_balancing"].files["balancer.py"]).body)
    assert len(seeds["graph_colouring"].files) == 2
    numbers = [
        n
        for n in ast.walk(ast.parse(seeds["job_order"].files["order.py"]))
        if isinstance(n, ast.Constant) and isinstance(n.value, (int, float, complex))
    ]
    assert numbers == []
    assert len(seeds["strip_packing"].files["packer.py"].splitlines()) >= 280
