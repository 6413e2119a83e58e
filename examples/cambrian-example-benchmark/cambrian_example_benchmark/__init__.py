"""A complete third-party Cambrian benchmark: evolve `def f(x)` to fit points, scored by squared error.

Copy this package to start your own. Three parts make a benchmark:

1. `tasks(split)`: what the agent is run on. Here each task is a handful of x
   values; the y values it is scored against stay on the host. The `search`
   split drives selection; the `holdout` split (x values between the search
   ones) only ever reaches `cambrian eval --split holdout`.
2. `run_spec(genome, task)`: what runs in the sandbox. Cambrian's stdlib
   harness calls `probe.evaluate(module=..., xs=[...])`, which imports the
   agent's `f` and returns `[f(x) for x in xs]` as result.json.
3. `score(task, result)`: on the host, from the collected result.json.

`pyproject.toml` registers `make_benchmark` under the entry point group
`cambrian.benchmarks` as `example`, so after `pip install -e .` the CLI knows
it: `cambrian benchmarks`, `cambrian run example`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from importlib import resources

from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Stage, Task, TaskScore
from cambrian.evaluators.feedback import not_executed, run_failure
from cambrian.evaluators.harness import harness_spec
from cambrian.evaluators.harness.run_program import entry_module, read_outcome
from cambrian.sandbox.base import RunResult, RunSpec

SEED_ENTRY = "curve.py"
PROBE_FILE = "_example_probe.py"  # the probe's name inside the sandbox; underscored so it cannot clash
POINTS_PER_TASK = 4
#: x values per split: search points every 0.5 on [-3, 2.5]; holdout points halfway between them.
SEARCH_XS = tuple(-3.0 + 0.5 * i for i in range(12))
HOLDOUT_XS = tuple(-2.75 + 0.5 * i for i in range(8))
PASS_MSE = 0.01  # a task passes when its mean squared error is at most this


def target(x: float) -> float:
    """The curve behind the points (never sent into the sandbox)."""
    return 1.5 * math.sin(x) + 0.25 * x * x - 0.5


def make_benchmark(
    *,
    first_stage: int = 1,
    threshold: float = 0.1,
    timeout_s: float = 10.0,
    memory_mb: int = 256,
    feedback_policy: FeedbackPolicy | None = None,
) -> CurveFit:
    """Fit def f(x) to points: minimise squared error (example third-party benchmark)."""
    return CurveFit(
        first_stage=first_stage,
        threshold=threshold,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        feedback_policy=feedback_policy,
    )


class CurveFit:
    """Evolve `f(x)`; a task's score is 1 / (1 + mean squared error) over its points, in (0, 1].

    first_stage: search tasks in stage 1 (1..2); the rest run only if stage 1's mean score reaches
    `threshold` (0..1). timeout_s: wall clock per run, seconds. memory_mb: memory per run, MiB.
    """

    name = "example"
    description = "Fit def f(x) to points: minimise squared error (example third-party benchmark)."

    def __init__(
        self,
        *,
        first_stage: int = 1,
        threshold: float = 0.1,
        timeout_s: float = 10.0,
        memory_mb: int = 256,
        feedback_policy: FeedbackPolicy | None = None,
    ) -> None:
        n_search = len(SEARCH_XS) // POINTS_PER_TASK
        if not 1 <= first_stage < n_search:
            raise BenchmarkError(
                f"first_stage = {first_stage} is out of range",
                fix=f"set benchmark_options.first_stage to 1..{n_search - 1}",
            )
        if not 0.0 <= threshold <= 1.0:
            raise BenchmarkError(
                f"threshold = {threshold} is out of range", fix="set benchmark_options.threshold to a score in 0..1"
            )
        if timeout_s <= 0 or memory_mb < 64:
            raise BenchmarkError(
                "timeout_s must be > 0 and memory_mb >= 64", fix="raise benchmark_options.timeout_s / memory_mb"
            )
        self.first_stage = first_stage
        self.threshold = threshold
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        # What failures may show: the run's `evaluation.feedback`, given to the factory.
        self.feedback_policy = feedback_policy or FeedbackPolicy()
        points = ", ".join(f"({x:g}, {target(x):.4f})" for x in SEARCH_XS)
        self.contract = (
            "Write `def f(x: float) -> float` in the entry file. It is called on each x of a task and must "
            f"return y for it. The points to fit (x, y): {points}.\n"
            f"Score per task: 1 / (1 + mean squared error) over its {POINTS_PER_TASK} points, in (0, 1]; "
            "higher is better; 0 for a crash, a timeout or a non-number. Held-out x values lie between "
            "these points, so a smooth formula generalises better than a lookup table.\n"
            f"Environment: Python 3 standard library only; no network; {timeout_s:g} s per run.\n"
            "Edit only between the EVOLVE-BLOCK-START and EVOLVE-BLOCK-END markers."
        )

    def seed(self) -> Genome:
        text = resources.files(__package__).joinpath("seed", SEED_ENTRY).read_text(encoding="utf-8")
        return Genome(files={SEED_ENTRY: text}, entry=SEED_ENTRY)

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in ("search", "holdout"):
            raise BenchmarkError(f"unknown split {split!r}", fix="use 'search' or 'holdout'")
        xs = SEARCH_XS if split == "search" else HOLDOUT_XS
        chunks = [xs[i : i + POINTS_PER_TASK] for i in range(0, len(xs), POINTS_PER_TASK)]
        return [Task(id=f"{split}-{i}", split=split, inputs={"xs": list(chunk)}) for i, chunk in enumerate(chunks)]

    def stages(self) -> Sequence[Stage]:
        ids = tuple(task.id for task in self.tasks("search"))
        return [Stage(ids[: self.first_stage], threshold=self.threshold), Stage(ids[self.first_stage :])]

    def run_spec(self, genome: Genome, task: Task) -> RunSpec:
        probe = resources.files(__package__).joinpath("probe.py").read_text(encoding="utf-8")
        # The probe imports the agent's module and evaluates its f(x) at the task's points.
        kwargs = {"module": entry_module(genome.entry), "xs": task.inputs["xs"]}
        return harness_spec(
            {**genome.files, PROBE_FILE: probe},
            entry=PROBE_FILE,
            function="evaluate",
            kwargs=kwargs,
            timeout_s=self.timeout_s,
            memory_mb=self.memory_mb,
        )

    def score(self, task: Task, result: RunResult) -> TaskScore:
        failure = run_failure(result, self.feedback_policy, who="the program")  # timeout, crash, no result
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        assert outcome is not None  # run_failure returned None: the run wrote a value
        xs = task.inputs["xs"]
        ys = outcome.value
        if not isinstance(ys, list) or len(ys) != len(xs) or not all(isinstance(y, (int, float)) for y in ys):
            return not_executed("f(x) did not return one number per x", self.feedback_policy)
        errors = [(y - target(x)) ** 2 for x, y in zip(xs, ys)]
        mse = sum(errors) / len(errors)
        worst = xs[max(range(len(errors)), key=errors.__getitem__)]
        feedback = f"mean squared error {mse:.4g} over {len(xs)} points; largest error at x={worst:g}"
        return TaskScore(score=1.0 / (1.0 + mse), passed=mse <= PASS_MSE, executed=True, feedback=feedback)

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        """Mean task score in [0, 1]; 0.0 for no tasks."""
        return sum(s.score for s in scores) / len(scores) if scores else 0.0
