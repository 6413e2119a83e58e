"""The `BenchmarkContract` (meta_agent.testing) for every built-in benchmark and the example plugin.

Each says what only the host may know of a task (`secrets`): the contract checks that no run spec
carries it and that search feedback never shows it for a holdout task.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import pytest

from cambrian.evaluators.base import Benchmark, Task
from cambrian.meta_agent.testing import BenchmarkContract, json_forms

EXAMPLE_DIR = Path(__file__).resolve().parents[2] / "examples" / "cambrian-example-benchmark"


class TestCirclePacking(BenchmarkContract):
    benchmark_name = "circle_packing"  # nothing hidden: the score is computed from the returned circles


class TestDeceptiveTrap(BenchmarkContract):
    benchmark_name = "deceptive"  # nothing hidden: the trap function is the contract


class TestHumanEval(BenchmarkContract):
    benchmark_name = "humaneval"
    options = {"n_search": 6, "n_holdout": 4, "stage_sizes": [3], "thresholds": [0.0]}
    seed_runs_without_fm = False  # the seed agent asks the FM for each function

    def secrets(self, benchmark: Benchmark, task: Task) -> Iterable[str]:
        problem = benchmark.problem(task.id)  # type: ignore[attr-defined]
        asserts = [line.strip() for line in problem.test.splitlines() if line.strip().startswith("assert")]
        body = problem.canonical_solution.strip()
        return [*asserts, *([body] if len(body) > 40 else [])]


class TestArcProgram(BenchmarkContract):
    benchmark_name = "arc-program"

    def secrets(self, benchmark: Benchmark, task: Task) -> Iterable[str]:
        if task.split != "holdout":
            return []  # a train pair's output is shown in the contract on purpose
        return json_forms(benchmark._expected[task.id])  # type: ignore[attr-defined]


class TestArcAgent(BenchmarkContract):
    benchmark_name = "arc"
    options = {"n_search": 4, "n_holdout": 2, "stage_sizes": [2], "thresholds": [0.0]}
    seed_runs_without_fm = False  # the seed agent asks the FM for the grid

    def secrets(self, benchmark: Benchmark, task: Task) -> Iterable[str]:
        answer = benchmark._answers[task.id]  # type: ignore[attr-defined]
        inputs = str(task.inputs)
        # A test output equal to one of the task's own grids (some ARC rules keep a grid) is no secret.
        return [form for form in json_forms(answer) if form.replace(" ", "") not in inputs.replace(" ", "")]


@pytest.mark.usefixtures("example_plugin")
class TestExamplePlugin(BenchmarkContract):
    benchmark_name = "example"

    def secrets(self, benchmark: Benchmark, task: Task) -> Iterable[str]:
        from cambrian_example_benchmark import target

        return [repr(target(x)) for x in task.inputs["xs"] if not math.isclose(target(x), round(target(x), 2))]
