"""`arc-program` (program search): evolve `transform(grid)` for ONE ARC-AGI-1 task.

The agent is a program with `transform(grid: list[list[int]]) -> list[list[int]]`.
Search tasks are the ARC task's demonstration (train) pairs, one Task per
pair; holdout tasks are its test pairs, whose outputs never enter the sandbox
and are never shown to the meta-agent. The train pairs, inputs and outputs,
are part of the contract: they are the visible training data.

Score per pair (host side): 1.0 for an exact match; otherwise, when the
returned grid has the expected shape, the fraction of cells equal (partial
credit, 0..1); 0.0 for another shape. A value that is not a grid is unusable,
as a crash is (0.0, not executed: a program with no usable grid is invalid).
`passed` only on an exact match. The agent's score is the mean over the pairs.

Feedback on a train pair may name expected cells (visible data); on a test
pair it says only "exact match", "wrong shape", "not a grid" or the fraction
of cells right, never an expected value or shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cambrian.evaluators.arc.common import ArcBenchmarkBase
from cambrian.evaluators.arc.data import (
    ArcTask,
    Grid,
    GridError,
    cell_accuracy,
    check_grid,
    find_task,
    format_grid,
    shape,
)
from cambrian.evaluators.base import FeedbackPolicy, Stage, Task, TaskScore
from cambrian.evaluators.base import parse_options as parse_benchmark_options
from cambrian.evaluators.feedback import not_executed, run_failure
from cambrian.evaluators.harness.run_program import read_outcome
from cambrian.sandbox.base import RunResult

FUNCTION = "transform"
SEED_ENTRY = "transform.py"
DEFAULT_TASK = "a5313dff"  # fill the cells enclosed by a shape with colour 1: a short flood-fill program
_MAX_WRONG_CELLS = 5  # wrong cells named in a train pair's feedback
_TASK_ID = re.compile(r"[0-9a-f]{8}")


class ArcProgramOptions(BaseModel):
    """Options of the `arc-program` benchmark (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    task: str = Field(DEFAULT_TASK, description="ARC-AGI-1 task id (training or evaluation set)")
    timeout_s: float = Field(30.0, gt=0, le=3600, description="wall-clock limit of one transform run, seconds")
    memory_mb: int = Field(512, ge=64, le=65536, description="memory limit of one run, MiB")

    @field_validator("task")
    @classmethod
    def _looks_like_an_id(cls, value: str) -> str:
        if not _TASK_ID.fullmatch(value):
            raise ValueError(f"{value!r} is not an ARC task id (8 lowercase hex digits, e.g. {DEFAULT_TASK!r})")
        return value


def parse_program_options(options: Mapping[str, Any] | None) -> ArcProgramOptions:
    """Validate `options`; BenchmarkError names the bad key or value."""
    return parse_benchmark_options(
        ArcProgramOptions,
        options,
        benchmark="arc-program",
        hint=f"task: an 8-hex-digit ARC-AGI-1 id such as {DEFAULT_TASK!r}",
    )


class ArcProgramBenchmark(ArcBenchmarkBase):
    """Evolve `transform(grid)` for one ARC task; score = mean per-pair score, 0..1 (1 = all pairs exact)."""

    name = "arc-program"
    entry_function = FUNCTION  # what the harness calls; the static check keeps it callable
    SEED_ENTRY = SEED_ENTRY
    description = "ARC-AGI-1, one task: evolve transform(grid); train pairs select, test pairs are the holdout."

    def __init__(
        self, options: ArcProgramOptions | None = None, *, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        self.options = options or ArcProgramOptions()
        self.feedback_policy = feedback_policy or FeedbackPolicy()
        self.arc_task: ArcTask = find_task(self.options.task)
        # Expected outputs stay on the host: Task.inputs carry only the input grid.
        self._expected: dict[str, Grid] = {}
        self._tasks: dict[str, list[Task]] = {"search": [], "holdout": []}
        for split, prefix, pairs in (("search", "train", self.arc_task.train), ("holdout", "test", self.arc_task.test)):
            for index, pair in enumerate(pairs):
                task_id = f"{prefix}-{index}"
                self._expected[task_id] = pair.output
                self._tasks[split].append(Task(id=task_id, split=split, inputs={"grid": pair.input}))
        self.contract = self._contract()

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, *, feedback_policy: FeedbackPolicy | None = None
    ) -> ArcProgramBenchmark:
        """Build from a user's option mapping and the run's feedback policy; BenchmarkError names an unknown key
        or bad value."""
        return cls(parse_program_options(options), feedback_policy=feedback_policy)

    def stages(self) -> Sequence[Stage]:
        """One stage: a task has 2..10 train pairs, all cheap to run."""
        return [Stage(task_ids=tuple(task.id for task in self._tasks["search"]), threshold=None)]

    def score(self, task: Task, result: RunResult, *, check: RunResult | None = None) -> TaskScore:
        """1.0 exact; else the fraction of cells right when the shape matches; else 0 (`check` is unused)."""
        policy = self.feedback_policy
        failure = run_failure(result, policy, who="transform")
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        expected = self._expected[task.id]
        visible = task.split == "search"  # a train pair's output is in the contract; a test pair's never
        try:
            returned = check_grid(outcome.value if outcome is not None else None)
        except GridError as exc:
            return not_executed(f"not a grid: {exc}", policy)  # unusable: no cell of it can be compared
        accuracy = 1.0 if returned == expected else cell_accuracy(returned, expected)
        if accuracy == 1.0:
            feedback = "exact match"
        elif shape(returned) != shape(expected):
            feedback = "wrong shape"
            if visible:
                feedback += f": returned {_dims(returned)}, expected {_dims(expected)}"
        else:
            feedback = f"{accuracy:.3f} of the cells right"
            if visible:
                feedback += _wrong_cells(returned, expected) + f"\nreturned:\n{format_grid(returned)}"
        return TaskScore(score=accuracy, passed=accuracy == 1.0, executed=True, feedback=policy.clip(feedback))

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        """Mean per-pair score, 0..1; 0.0 for no tasks."""
        return sum(s.score for s in scores) / len(scores) if scores else 0.0

    def _contract(self) -> str:
        examples = "\n".join(
            f"Train pair {index} (task id train-{index}):\ninput:\n{format_grid(pair.input)}\n"
            f"output:\n{format_grid(pair.output)}\n"
            for index, pair in enumerate(self.arc_task.train)
        )
        return (
            f"Write `def {FUNCTION}(grid: list[list[int]]) -> list[list[int]]` in the entry file. It solves ARC "
            f"task {self.arc_task.id}: the train pairs below show one hidden rule; transform(input) must return "
            "the output for each of them and for unseen test inputs of the same task.\n"
            "A grid is a list of rows, each a list of ints 0..9 (colours), all rows the same length, 1..30 rows "
            "and columns. Below, each row is written as its digits: the input\n  070\n  777\nis the grid "
            "[[0, 7, 0], [7, 7, 7]].\n\n"
            f"{examples}\n"
            "Score per pair: 1 for an exact match; otherwise the fraction of cells equal when the shape is right; "
            "0 for a wrong shape, a non-grid, a crash or a timeout. The program's score is the mean over the train "
            "pairs; the task's test pairs are held out. A general rule beats memorising the pairs.\n"
            "Environment: Python 3 with the standard library plus numpy and scipy (both installed); no network; "
            f"{self.options.timeout_s:g} s wall clock and {self.options.memory_mb} MiB of memory per call. "
            "Printed output is kept only as a log.\n"
            "Edit only between the EVOLVE-BLOCK-START and EVOLVE-BLOCK-END markers."
        )


def _dims(grid: Grid) -> str:
    rows, columns = shape(grid)
    return f"{rows}x{columns}"


def _wrong_cells(returned: Grid, expected: Grid) -> str:
    """'; wrong cells (row, column): (2, 3) is 0, expected 1; ...' for the first few wrong cells."""
    wrong = [
        f"({r}, {c}) is {returned[r][c]}, expected {expected[r][c]}"
        for r in range(len(expected))
        for c in range(len(expected[0]))
        if returned[r][c] != expected[r][c]
    ]
    shown = "; ".join(wrong[:_MAX_WRONG_CELLS])
    more = f"; and {len(wrong) - _MAX_WRONG_CELLS} more" if len(wrong) > _MAX_WRONG_CELLS else ""
    return f"; wrong cells (row, column): {shown}{more}"
