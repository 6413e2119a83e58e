"""Staged evaluation with the real local sandbox: hostile programs, limits, stage thresholds."""

from __future__ import annotations

import json
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from cambrian.evaluators.base import BenchmarkError, Genome, Stage, Task, TaskScore
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.evaluators.harness.run_program import HARNESS_FILE, RESULT_FILE, harness_files, read_outcome
from cambrian.evaluators.runner import AgentResult, Limits, evaluate_agent
from cambrian.sandbox.base import RunResult, RunSpec
from cambrian.sandbox.local import LocalSandbox


def packing_genome(code: str) -> Genome:
    return Genome(files={"packing.py": textwrap.dedent(code)}, entry="packing.py")


def evaluate_packing(code: str, *, limits: Limits | None = None) -> AgentResult:
    return evaluate_agent(CirclePacking(), packing_genome(code), LocalSandbox(), limits=limits)


def test_seed_is_valid() -> None:
    bench = CirclePacking()
    result = evaluate_agent(bench, bench.seed(), LocalSandbox())
    assert result.valid and result.invalid_reason is None
    assert result.score == pytest.approx(1.0917368, abs=1e-6)  # the seed's rings
    assert result.stage_reached == 0
    [task] = result.task_results
    assert (task.task_id, task.split, task.stage, task.exit_code) == ("n26", "search", 0, 0)
    assert task.passed and task.executed
    assert result.feedback.startswith("[n26] valid packing")


def test_hanging_program_times_out() -> None:
    result = evaluate_packing("def pack_circles(n):\n    while True:\n        pass\n", limits=Limits(timeout_s=1.0))
    assert not result.valid
    assert result.invalid_reason == "timed out after 1.0 s"
    assert result.score == 0.0
    assert result.task_results[0].timed_out


def test_crashing_program() -> None:
    result = evaluate_packing("def pack_circles(n):\n    return n / 0\n")
    assert not result.valid
    assert result.invalid_reason == "crashed: ZeroDivisionError: division by zero"
    assert "ZeroDivisionError" in result.feedback


def test_program_that_does_not_parse() -> None:
    result = evaluate_packing("def pack_circles(n)\n    return []\n")
    assert not result.valid
    assert result.invalid_reason is not None and result.invalid_reason.startswith("crashed: SyntaxError")


def test_flooding_program_is_cut_off() -> None:
    code = """
        import sys
        def pack_circles(n):
            for _ in range(100):
                sys.stdout.write("x" * 1_000_000)
    """
    result = evaluate_packing(code, limits=Limits(max_output_bytes=1_000_000))
    assert not result.valid
    assert result.invalid_reason == "wrote more than 1000000 bytes of output"
    task = result.task_results[0]
    assert task.output_truncated
    assert len(task.stdout_tail) <= 2000


def test_memory_hog() -> None:
    code = "def pack_circles(n):\n    return bytearray(4 * 1024 ** 3)\n"
    result = evaluate_packing(code, limits=Limits(memory_mb=256))
    assert not result.valid
    assert result.invalid_reason == "ran out of memory (limit 256 MiB)"


def test_unsafe_genome_path_is_the_candidates_fault() -> None:
    genome = Genome(files={"packing.py": "x = 1\n", "../escape.py": "y = 2\n"}, entry="packing.py")
    result = evaluate_agent(CirclePacking(), genome, LocalSandbox())
    assert not result.valid
    assert result.invalid_reason is not None and "../escape.py" in result.invalid_reason
    assert result.task_results == []


def test_an_invalid_packing_makes_an_invalid_agent_with_its_violations_named() -> None:
    result = evaluate_packing("def pack_circles(n):\n    return [(0.5, 0.5, 0.1)] * n\n")
    assert not result.valid  # it ran, but its answer breaks the rules: unusable, as a program benchmark's is
    assert result.score == 0.0
    assert result.invalid_reason is not None
    assert result.invalid_reason.startswith("did not produce a usable result: invalid packing: circles 0 and 1 overlap")
    assert "overlap by" in result.feedback


@dataclass
class TwoStageBenchmark:
    """A tiny benchmark: `solve(x)` must return x; stage 0 needs a mean score of 1 to continue."""

    name: str = "two_stage"
    description: str = "solve(x) returns x; two stages"
    contract: str = "def solve(x: int) -> int"

    def seed(self) -> Genome:
        return Genome(files={"solver.py": "def solve(x):\n    return x\n"}, entry="solver.py")

    def tasks(self, split: str) -> Sequence[Task]:
        if split == "holdout":
            return [Task(id="h1", split="holdout", inputs={"x": 100})]
        return [Task(id=f"t{x}", split="search", inputs={"x": x}) for x in (1, 2, 3)]

    def stages(self) -> Sequence[Stage]:
        return [Stage(task_ids=("t1",), threshold=1.0), Stage(task_ids=("t2", "t3"))]

    def run_spec(self, genome: Genome, task: Task) -> RunSpec:
        files = {**genome.files, **harness_files(entry=genome.entry, function="solve", kwargs=task.inputs)}
        return RunSpec(files=files, command=("{python}", HARNESS_FILE), collect=(RESULT_FILE,), timeout_s=20.0)

    def score(self, task: Task, result: RunResult) -> TaskScore:
        outcome = read_outcome(result.files)
        if outcome is None or not outcome.ok:
            return TaskScore(score=0.0, passed=False, executed=False, feedback="no result")
        right = outcome.value == task.inputs["x"]
        return TaskScore(score=float(right), passed=right, executed=True, feedback="right" if right else "wrong")

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        return sum(s.score for s in scores) / len(scores) if scores else 0.0


def test_threshold_stops_after_first_stage() -> None:
    bench = TwoStageBenchmark()
    wrong = Genome(files={"solver.py": "def solve(x):\n    return -x\n"}, entry="solver.py")
    result = evaluate_agent(bench, wrong, LocalSandbox())
    assert result.valid
    assert result.stage_reached == 0
    assert [t.task_id for t in result.task_results] == ["t1"]
    assert result.score == 0.0


def test_passing_first_stage_runs_the_second() -> None:
    bench = TwoStageBenchmark()
    result = evaluate_agent(bench, bench.seed(), LocalSandbox())
    assert result.stage_reached == 1
    assert [(t.task_id, t.stage) for t in result.task_results] == [("t1", 0), ("t2", 1), ("t3", 1)]
    assert result.score == 1.0
    assert result.feedback == "[t1] right\n[t2] right\n[t3] right"


def test_holdout_runs_all_holdout_tasks_without_stages() -> None:
    bench = TwoStageBenchmark()
    result = evaluate_agent(bench, bench.seed(), LocalSandbox(), split="holdout")
    assert [(t.task_id, t.split, t.stage) for t in result.task_results] == [("h1", "holdout", 0)]
    assert result.score == 1.0


def test_empty_split_and_unknown_split_are_errors() -> None:
    bench = CirclePacking()
    with pytest.raises(BenchmarkError):
        evaluate_agent(bench, bench.seed(), LocalSandbox(), split="holdout")
    with pytest.raises(BenchmarkError):
        evaluate_agent(bench, bench.seed(), LocalSandbox(), split="train")


def test_limits_override_the_spec() -> None:
    spec = RunSpec(files={}, command=("x",), timeout_s=60.0, memory_mb=1024)
    changed = Limits(timeout_s=2.5).apply(spec)
    assert (changed.timeout_s, changed.memory_mb) == (2.5, 1024)
    assert Limits().apply(spec) is spec


class WideFirstStage(TwoStageBenchmark):
    def stages(self) -> Sequence[Stage]:
        return [Stage(task_ids=("t1", "t2"), threshold=1.0), Stage(task_ids=("t3",))]


def test_unreached_stages_count_as_zero_like_with_like() -> None:
    bench = WideFirstStage()
    half = Genome(files={"solver.py": "def solve(x):\n    return x if x == 1 else -x\n"}, entry="solver.py")
    result = evaluate_agent(bench, half, LocalSandbox())
    assert result.stage_reached == 0
    assert [t.task_id for t in result.task_results] == ["t1", "t2"]
    assert result.ran_score == 0.5
    assert result.score == pytest.approx(1 / 3)


@dataclass
class CheckedBenchmark(TwoStageBenchmark):
    """Two-phase scoring: the agent returns x; a separate check run re-derives it and reports what it saw."""

    name: str = "checked"
    scored_with: list[RunResult | None] = field(default_factory=list)  # the `check` of every score call

    def check_spec(self, task: Task, result: RunResult) -> RunSpec | None:
        outcome = read_outcome(result.files)
        if outcome is None or not outcome.ok or outcome.value is None:
            return None
        probe = (
            "import json, os\n"
            "print(json.dumps({'value': %r, 'marker': os.path.exists('agent_marker.txt'),"
            " 'agent_env': os.environ.get('AGENT_ONLY'), 'files': sorted(os.listdir('.'))}))\n"
        ) % (outcome.value,)
        return RunSpec(files={"probe.py": probe}, command=("{python}", "probe.py"), timeout_s=20.0)

    def score(self, task: Task, result: RunResult, *, check: RunResult | None = None) -> TaskScore:
        self.scored_with.append(check)
        if check is None:
            return TaskScore(score=0.0, passed=False, executed=False, feedback="no answer")
        seen = json.loads(check.stdout)
        right = seen["value"] == task.inputs["x"] and not seen["marker"] and seen["agent_env"] is None
        return TaskScore(score=float(right), passed=right, executed=True, feedback=json.dumps(seen))


def test_check_run_is_a_fresh_separate_run_without_the_agents_env() -> None:
    bench = CheckedBenchmark()
    agent = Genome(
        files={"solver.py": "def solve(x):\n    open('agent_marker.txt', 'w').write('x')\n    return x\n"},
        entry="solver.py",
    )
    result = evaluate_agent(bench, agent, LocalSandbox(), env={"AGENT_ONLY": "fm-socket"})
    assert result.score == 1.0, result.feedback
    assert len(bench.scored_with) == 3 and all(c is not None for c in bench.scored_with)
    assert json.loads(result.task_results[0].feedback)["files"] == ["probe.py"]


def test_check_spec_none_scores_with_check_none() -> None:
    bench = CheckedBenchmark()
    crashing = Genome(files={"solver.py": "def solve(x):\n    raise ValueError('no')\n"}, entry="solver.py")
    result = evaluate_agent(bench, crashing, LocalSandbox())
    assert bench.scored_with == [None]
    assert not result.valid and result.task_results[0].feedback == "no answer"


class _BrittleScorer(CirclePacking):
    """A benchmark whose host-side scorer raises on some outputs (a bug of its own, met by an agent's output)."""

    def score(self, task: Task, result: RunResult) -> TaskScore:
        outcome = read_outcome(result.files)
        if outcome is not None and outcome.ok and outcome.value == []:
            raise ValueError("empty\npacking")
        return super().score(task, result)


def test_a_scorer_that_raises_makes_the_agent_invalid_not_the_evaluation_fail() -> None:
    result = evaluate_agent(_BrittleScorer(), packing_genome("def pack_circles(n):\n    return []\n"), LocalSandbox())
    assert not result.valid and result.score == 0.0
    assert result.invalid_reason == (
        "did not produce a usable result: the benchmark could not score this output: ValueError: empty packing"
    )
    assert not result.task_results[0].executed
