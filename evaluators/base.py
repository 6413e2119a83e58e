"""The Benchmark protocol: tasks, stages, what runs in the sandbox, host-side scores.

A benchmark never runs candidate code itself: it says what to run (`run_spec`)
and scores the result on the host (`score`), with answers that never enter the
sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from sandbox.base import RunResult, RunSpec

SPLITS = ("search", "holdout")


class BenchmarkError(Exception):
    """A user-caused benchmark problem (unknown name, bad option)."""

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class Genome:
    """An agent's code: relative path -> text, plus the entry file."""

    files: Mapping[str, str]
    entry: str

    def __post_init__(self) -> None:
        if self.entry not in self.files:
            raise ValueError(f"entry file {self.entry!r} is not among the genome's files")


@dataclass(frozen=True)
class Task:
    id: str
    split: str  # "search" drives selection; "holdout" is never shown to selection
    inputs: Mapping[str, Any] = field(default_factory=dict)  # what the sandbox sees


@dataclass(frozen=True)
class Stage:
    """A subset of search tasks; the next stage runs only if this one reaches `threshold`."""

    task_ids: tuple[str, ...]
    threshold: float | None = None  # mean score needed to continue; None = always continue


@dataclass(frozen=True)
class TaskScore:
    score: float
    passed: bool
    executed: bool  # False: the program did not produce a usable result
    feedback: str  # public: may be shown to the meta-agent


@runtime_checkable
class Benchmark(Protocol):
    name: str
    description: str
    #: What the meta-agent is told about the program it edits: signature, rules, score.
    contract: str

    def seed(self) -> Genome: ...

    def tasks(self, split: str) -> Sequence[Task]: ...

    def stages(self) -> Sequence[Stage]: ...

    def run_spec(self, genome: Genome, task: Task) -> RunSpec: ...

    def score(self, task: Task, result: RunResult) -> TaskScore: ...

    def aggregate(self, scores: Sequence[TaskScore]) -> float: ...
