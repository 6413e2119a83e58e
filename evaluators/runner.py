"""Staged evaluation of one agent: run its tasks in a sandbox, score them, say what happened.

Three separable parts: `StagedPlan` (which stage's tasks run next, whether to stop, the aggregate),
`run_task` (one task run in a sandbox session, then scored), and `evaluate_agent`, which drives the plan
with `run_task` one task after another in one session. A distributed executor drives the same plan with
its own way of running a stage's tasks (meta_agent's Ray executor spreads them over a cluster).

Blocking; the search loop calls `evaluate_agent` from a worker thread. On the
search split the benchmark's stages run in order, each only if the previous
one's mean score reached its threshold; a stage in which no task executed at
all also stops the evaluation (a program that cannot run once will not run
later). On the holdout split every holdout task runs, without stages.

Like with like: an agent's search score is the benchmark's aggregate over ALL
tasks of ALL stages, a task in a stage it did not reach counting as 0 (as the
Darwin Goedel Machine does), so an agent stopped early never outranks one
that earned its score on more tasks. `stage_reached`, `ran_score` and the
per-task results record what it actually ran.

Two-phase scoring: when the benchmark defines `check_spec(task, result)` and
it returns a spec, that spec runs after the agent's run has ended, through
`sandbox.run` (a separate, fresh one-run session, never the agent's, without
the agent's FM env and mounts and without the run limits meant for agents);
the benchmark then scores with `score(task, result, check=check_result)`.

SandboxError propagates: it is an infrastructure fault, and the loop marks the
agent failed and retries. Everything the candidate causes (crash, timeout,
too much output, no result, unsafe file paths) comes back as a result.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath

from cambrian.evaluators.base import SPLITS, Benchmark, BenchmarkError, CheckedBenchmark, Genome, Stage, Task, TaskScore
from cambrian.evaluators.harness.run_program import TASK_SEED_ENV, read_outcome
from cambrian.sandbox.base import Mount, RunResult, RunSpec, Sandbox, SandboxSession

TAIL_CHARS = 2000  # kept of each task's stdout/stderr, and of the joined feedback
_EXCEPTION_SUFFIXES = ("Error", "Exception", "Interrupt", "Exit")


def task_seed(seed: int, task_id: str) -> int:
    """The random seed of one task's run: a 32-bit hash of the evaluation's seed and the task id (numpy's legacy
    seeding takes at most 32 bits), the same in every process."""
    digest = hashlib.sha256(f"{seed}:{task_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


@dataclass(frozen=True)
class Limits:
    """Overrides of a benchmark's run limits; None keeps the benchmark's value. And the evaluation's seed.

    timeout_s: wall clock per task run, seconds (> 0). memory_mb: MiB.
    max_output_bytes: per stream, bytes.
    seed: each task's run gets `task_seed(seed, task id)` in CAMBRIAN_TASK_SEED, from which the harness seeds
    `random` and `numpy.random`: the same program scores the same way (None: unseeded runs).
    """

    timeout_s: float | None = None
    memory_mb: int | None = None
    max_output_bytes: int | None = None
    seed: int | None = None

    def apply(self, spec: RunSpec, *, task_id: str | None = None) -> RunSpec:
        """`spec` with every limit set here replaced, and the task's seed in its env when `task_id` is given."""
        limits = {"timeout_s": self.timeout_s, "memory_mb": self.memory_mb, "max_output_bytes": self.max_output_bytes}
        changes: dict[str, object] = {name: value for name, value in limits.items() if value is not None}
        if self.seed is not None and task_id is not None:
            changes["env"] = {**spec.env, TASK_SEED_ENV: str(task_seed(self.seed, task_id))}
        return dataclasses.replace(spec, **changes) if changes else spec  # type: ignore[arg-type]


@dataclass(frozen=True)
class TaskResult:
    """One task run of one agent: what the archive stores as an Evaluation row."""

    task_id: str
    split: str
    stage: int  # 0-based stage index; 0 on the holdout split
    score: float
    passed: bool
    executed: bool  # False: crashed, timed out, OOM, output limit, no usable result
    feedback: str  # public
    duration_s: float  # wall clock of the sandbox run (plus its check run, if any), seconds
    exit_code: int | None
    timed_out: bool
    oom_killed: bool
    output_truncated: bool
    stdout_tail: str  # last TAIL_CHARS characters
    stderr_tail: str
    #: sha256 of what the run returned (the harness's value, as canonical JSON); None when it returned none.
    #: Two runs with equal hashes on every task behaved alike: a child that repeats its parent's is a no-op.
    output_hash: str | None = None


@dataclass
class AgentResult:
    """The evaluation of one agent on one split."""

    score: float  # benchmark.aggregate over every planned task; tasks in unreached stages count as 0
    stage_reached: int  # index of the last stage run, 0-based
    task_results: list[TaskResult] = field(default_factory=list)
    valid: bool = True  # False when no task executed: the candidate's own fault
    invalid_reason: str | None = None  # public sentence when not valid
    feedback: str = ""  # public per-task feedback for the next prompt, <= ~TAIL_CHARS
    ran_score: float = 0.0  # benchmark.aggregate over only the tasks that ran
    #: Behaviour features: each descriptor the benchmark emitted, averaged over the executed tasks.
    descriptor: dict[str, float] = field(default_factory=dict)

    @property
    def duration_s(self) -> float:
        """Total sandbox wall clock over all task runs, seconds."""
        return sum(t.duration_s for t in self.task_results)


def evaluate_agent(
    benchmark: Benchmark,
    genome: Genome,
    sandbox: Sandbox,
    *,
    split: str = "search",
    limits: Limits | None = None,
    session: SandboxSession | None = None,
    env: Mapping[str, str] | None = None,
    mounts: Sequence[Mount] = (),
) -> AgentResult:
    """Evaluate `genome` on `split` ("search": staged; "holdout": every task, no stages), one task after another.

    session: run in this already-open session (the caller closes it); default: a new one from `sandbox`.
    env, mounts: added to every task's RunSpec (the FM gateway socket of this agent); never to check runs.
    sandbox: also runs the benchmark's check runs (`check_spec`), each in a fresh one-run session.
    """
    plan = StagedPlan(benchmark, genome, split)
    limits = limits or Limits()
    # One agent's tasks share a session (a container), nobody else's.
    with contextlib.nullcontext(session) if session is not None else sandbox.session() as active:
        while (jobs := plan.next_stage()) is not None:
            plan.record(
                [
                    run_task(
                        benchmark, genome, active, job, limits=limits, env=env or {}, mounts=mounts, checker=sandbox
                    )
                    for job in jobs
                ]
            )
    return plan.result()


@dataclass(frozen=True)
class TaskJob:
    """One task of an agent's evaluation to run: the task and the 0-based stage it belongs to."""

    task: Task
    stage: int


@dataclass(frozen=True)
class TaskRun:
    """One task run, scored: the archive's row, the benchmark's score, and what ran (spec and raw result)."""

    result: TaskResult
    score: TaskScore
    spec: RunSpec
    run: RunResult


class StagedPlan:
    """The staged evaluation of one agent, apart from how its tasks run: whoever runs tasks (one session in
    turn here, a cluster's slots in `meta_agent`'s Ray executor) asks `next_stage()` for the next stage's
    jobs (None once done), runs them in any order or at once, gives their runs to `record()`, and finally
    reads `result()`. A stage starts only after the previous one's runs are recorded and passed its
    threshold, so early stopping holds however the tasks are spread.

    Raises BenchmarkError for an unknown split, a split without tasks, or stages naming unknown tasks.
    """

    def __init__(self, benchmark: Benchmark, genome: Genome, split: str = "search") -> None:
        if split not in SPLITS:
            raise BenchmarkError(f"unknown split {split!r}", fix=f"use one of {', '.join(SPLITS)}")
        self.benchmark = benchmark
        self._runs: list[TaskRun] = []
        self._stage_reached = 0
        self._next = 0
        self._unsafe = _unsafe_path(genome)
        self._plan: list[Stage] = []
        self._by_id: dict[str, Task] = {}
        if self._unsafe is not None:
            return  # the candidate's own fault: nothing runs
        tasks = list(benchmark.tasks(split))
        if not tasks:
            raise BenchmarkError(
                f"benchmark {benchmark.name!r} has no {split} tasks",
                fix="evaluate on a split the benchmark provides" + (" (search)" if split == "holdout" else ""),
            )
        self._plan = _plan(benchmark, tasks) if split == "search" else [Stage(task_ids=tuple(t.id for t in tasks))]
        self._by_id = {t.id: t for t in tasks}

    def next_stage(self) -> list[TaskJob] | None:
        """The jobs of the next stage to run, or None when the evaluation is over."""
        if self._next >= len(self._plan):
            return None
        self._stage_reached = self._next
        stage = self._plan[self._next]
        return [TaskJob(task=self._by_id[tid], stage=self._next) for tid in stage.task_ids]

    def record(self, runs: Sequence[TaskRun]) -> None:
        """The runs of the stage `next_stage()` gave last (in its order); decides whether the next stage runs."""
        stage = self._plan[self._next]
        self._runs += runs
        self._next += 1
        scores = [run.score for run in runs]
        if not any(score.executed for score in scores):
            self._next = len(self._plan)  # a program that cannot run once will not run later
            return
        mean = sum(score.score for score in scores) / len(scores) if scores else 0.0
        if stage.threshold is not None and mean < stage.threshold:
            self._next = len(self._plan)

    def result(self) -> AgentResult:
        """The agent's result over what ran (tasks of stages not reached count as 0 in `score`)."""
        if self._unsafe is not None:
            reason = f"genome file path {self._unsafe!r} is not a plain relative path (absolute or with '..')"
            return AgentResult(score=0.0, stage_reached=0, valid=False, invalid_reason=reason, feedback=reason)
        runs = self._runs
        task_results = [run.result for run in runs]
        valid = any(t.executed for t in task_results)
        ran_scores = [run.score for run in runs]
        unrun = sum(len(stage.task_ids) for stage in self._plan) - len(ran_scores)
        return AgentResult(
            score=float(self.benchmark.aggregate(ran_scores + [_NOT_RUN] * unrun)),
            ran_score=float(self.benchmark.aggregate(ran_scores)),
            stage_reached=self._stage_reached,
            task_results=task_results,
            valid=valid,
            invalid_reason=None if valid else _invalid_reason(runs[0].score, runs[0].spec, runs[0].run),
            feedback=_joined_feedback(task_results),
            descriptor=_mean_descriptor(ran_scores),
        )


def _mean_descriptor(scores: Sequence[TaskScore]) -> dict[str, float]:
    """Each descriptor averaged over the executed tasks that emitted it (non-finite values ignored)."""
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for score in scores:
        if not score.executed:
            continue
        for name, value in score.descriptor.items():
            if math.isfinite(value):
                sums[name] = sums.get(name, 0.0) + float(value)
                counts[name] = counts.get(name, 0) + 1
    return {name: sums[name] / counts[name] for name in sums}


def _plan(benchmark: Benchmark, tasks: Sequence[Task]) -> list[Stage]:
    """The benchmark's stages, checked against its search tasks; no stages = one stage of all tasks."""
    stages = list(benchmark.stages())
    if not stages:
        return [Stage(task_ids=tuple(t.id for t in tasks))]
    known = {t.id for t in tasks}
    for index, stage in enumerate(stages):
        missing = [tid for tid in stage.task_ids if tid not in known]
        if missing:
            raise BenchmarkError(
                f"stage {index} of benchmark {benchmark.name!r} names unknown search tasks: {', '.join(missing)}",
                fix="make every stage list ids of tasks that tasks('search') returns",
            )
    return stages


#: Stands in for a task of a stage the agent did not reach (like-with-like scores).
_NOT_RUN = TaskScore(score=0.0, passed=False, executed=False, feedback="not run: an earlier stage stopped")


def run_task(
    benchmark: Benchmark,
    genome: Genome,
    session: SandboxSession,
    job: TaskJob,
    *,
    limits: Limits,
    env: Mapping[str, str],
    mounts: Sequence[Mount] = (),
    checker: Sandbox,
) -> TaskRun:
    """Run one task of `genome` in `session` and score it (trusted code: answers and checks stay here).

    env, mounts: added to the task's RunSpec (the agent's FM socket); never to the check run, which runs
    after the agent's run has ended through `checker.run` (a fresh one-run session).
    SandboxError propagates (an infrastructure fault).
    """
    task = job.task
    spec = limits.apply(benchmark.run_spec(genome, task), task_id=task.id)
    if env or mounts:
        spec = dataclasses.replace(spec, env={**spec.env, **env}, mounts=(*spec.mounts, *mounts))
    result = session.run(spec)
    check_duration_s = 0.0
    if isinstance(benchmark, CheckedBenchmark):
        # The agent's run has ended: its tests run now, where the agent's code never was.
        spec_for_check = benchmark.check_spec(task, result)
        check_result = checker.run(spec_for_check) if spec_for_check is not None else None
        check_duration_s = check_result.duration_s if check_result is not None else 0.0
        score = _scored(lambda: benchmark.score(task, result, check=check_result))
    else:
        score = _scored(lambda: benchmark.score(task, result))
    task_result = TaskResult(
        task_id=task.id,
        split=task.split,
        stage=job.stage,
        score=float(score.score),
        passed=score.passed,
        executed=score.executed,
        feedback=score.feedback,
        duration_s=result.duration_s + check_duration_s,
        exit_code=result.exit_code,
        timed_out=result.timed_out,
        oom_killed=result.oom_killed,
        output_truncated=result.output_truncated,
        stdout_tail=result.stdout[-TAIL_CHARS:],
        stderr_tail=result.stderr[-TAIL_CHARS:],
        output_hash=output_hash(result) if score.executed else None,
    )
    return TaskRun(result=task_result, score=score, spec=spec, run=result)


def _scored(score: Callable[[], TaskScore]) -> TaskScore:
    """The benchmark's score of one run. A scorer that raises on what the program returned (a packing its
    certifier cannot settle, a value its checks never foresaw) scores the task as not run, with the error as
    its feedback: the agent's output broke trusted code, so the agent is invalid for it, and the run goes on
    (a resume scores the same output the same way)."""
    try:
        return score()
    except Exception as exc:  # noqa: BLE001 - any scorer failure on this output is the agent's verdict
        message = " ".join(str(exc).split())[:200]
        return TaskScore(
            score=0.0,
            passed=False,
            executed=False,
            feedback=f"the benchmark could not score this output: {type(exc).__name__}"
            + (f": {message}" if message else ""),
        )


def output_hash(result: RunResult) -> str | None:
    """sha256 of the value the run returned (result.json's, as canonical JSON), None when it returned none."""
    outcome = read_outcome(result.files)
    if outcome is None or not outcome.ok:
        return None
    text = json.dumps(outcome.value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _invalid_reason(score: TaskScore, spec: RunSpec, result: RunResult) -> str:
    """One public sentence for why the first task did not execute."""
    if result.timed_out:
        return f"timed out after {spec.timeout_s:.1f} s"
    if result.output_truncated:
        return f"wrote more than {spec.max_output_bytes} bytes of output"
    if result.oom_killed:
        return f"ran out of memory (limit {spec.memory_mb} MiB)"
    outcome = read_outcome(result.files)
    if outcome is not None and not outcome.ok:
        return f"crashed: {outcome.error_summary()}"
    if result.exit_code not in (0, None):
        last = _last_error_line(result.stderr)
        return f"crashed: {last}" if last else f"exited with code {result.exit_code}"
    first_line = score.feedback.strip().splitlines()[0] if score.feedback.strip() else "no usable result"
    return f"did not produce a usable result: {first_line}"


def _last_error_line(stderr: str) -> str:
    """The 'SomeError: message' line a Python traceback ends with, if there is one."""
    for line in reversed(stderr.strip().splitlines()[-20:]):
        head = line.split(":", 1)[0]
        is_exception_name = head.replace(".", "").isidentifier() and head.endswith(_EXCEPTION_SUFFIXES)
        if is_exception_name and not line.startswith(" "):
            return line.strip()[:300]
    return ""


def _joined_feedback(task_results: Sequence[TaskResult]) -> str:
    text = "\n".join(f"[{t.task_id}] {t.feedback}" for t in task_results)
    return text if len(text) <= TAIL_CHARS else text[: TAIL_CHARS - 3] + "..."


def _unsafe_path(genome: Genome) -> str | None:
    """The first genome path that is absolute or climbs out with '..', if any."""
    for path in genome.files:
        pure = PurePosixPath(path)
        if not path or "\\" in path or pure.is_absolute() or ".." in pure.parts:
            return path
    return None
