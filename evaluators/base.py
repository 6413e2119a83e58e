"""The Benchmark protocol: tasks, stages, what runs in the sandbox, host-side scores.

A benchmark never runs candidate code itself: it says what to run (`run_spec`)
and scores the result on the host (`score`), with answers that never enter the
sandbox.

Two-phase scoring (optional): a benchmark whose answers are tests that must
run (HumanEval) also defines `check_spec(task, result) -> RunSpec | None`. When
it returns a spec, the runner runs it after the agent's run has ended, in a
separate, fresh one-run sandbox session without the agent's FM socket, and
calls `score(task, result, check=check_result)`. Only the check run sees the
tests; benchmarks without `check_spec` are scored as `score(task, result)`.

Feedback: a benchmark is built with the run's `FeedbackPolicy` (its factory's
`feedback_policy` argument, from `evaluation.feedback`), keeps it as its
attribute `feedback_policy` and follows it when writing `TaskScore.feedback`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, ValidationError

from cambrian.errors import CambrianError
from cambrian.sandbox.base import RunResult, RunSpec

OptionsT = TypeVar("OptionsT", bound=BaseModel)

SPLITS = ("search", "holdout")


class BenchmarkError(CambrianError):
    """A user-caused benchmark problem (unknown name, bad option)."""


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
    #: Behaviour features of this run, computed on the host (MAP-Elites bins agents by them). A benchmark
    #: that emits them names each with its (low, high) range in its `descriptor_bounds` attribute
    #: (None = categorical: each distinct value is its own cell).
    descriptor: Mapping[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class FeedbackPolicy:
    """What the meta-agent may see of a task's failure; benchmarks follow it when writing feedback.

    Hidden test files are never shown whole, and holdout tasks never show a test case or an expected
    value. On the search split a benchmark may name the failing case (HumanEval: the failing assert,
    its input, the expected and the actual value) when `error_message` is on: search tasks drive
    selection, and the holdout score is what tells overfitting to them apart.
    max_chars: cap on one task's feedback text, characters (>= 40).
    error_type: show the exception's type ("AssertionError").
    error_message: show the exception's message (truncated to fit max_chars).
    traceback: show the traceback lines of the agent's own code (never of hidden test files).
    output: show the tail of what the agent's own run printed.
    """

    max_chars: int = 2000
    error_type: bool = True
    error_message: bool = True
    traceback: bool = False
    output: bool = False

    OPTION_NAMES: ClassVar[tuple[str, ...]] = ("max_chars", "error_type", "error_message", "traceback", "output")

    def __post_init__(self) -> None:
        if self.max_chars < 40:
            raise BenchmarkError(
                f"feedback max_chars is {self.max_chars}; it must be at least 40",
                fix="set evaluation.feedback.max_chars to 40 or more (default 2000)",
            )

    @classmethod
    def from_options(cls, options: Mapping[str, Any] | None) -> FeedbackPolicy:
        """Build from a config mapping (e.g. `evaluation.feedback`); BenchmarkError names a bad key or value."""
        options = dict(options or {})
        unknown = sorted(str(key) for key in options if key not in cls.OPTION_NAMES)
        if unknown:
            raise BenchmarkError(
                f"unknown feedback option(s): {', '.join(unknown)}",
                fix=f"use only {', '.join(cls.OPTION_NAMES)}",
            )
        for key, value in options.items():
            expected = int if key == "max_chars" else bool
            if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
                raise BenchmarkError(
                    f"feedback option {key} = {value!r} is not a{'n int' if expected is int else ' bool'}",
                    fix=f"set {key} to {'a number of characters' if expected is int else 'true or false'}",
                )
        return cls(**options)

    def describe_error(self, error_type: str, message: str) -> str:
        """'KeyError: 'x'', 'KeyError', a message alone, or '' as the policy allows; message truncated."""
        message = message.strip()
        if self.error_message and len(message) > self.max_chars // 2:
            message = message[: self.max_chars // 2 - 3] + "..."
        parts = [part for part, shown in ((error_type, self.error_type), (message, self.error_message)) if shown]
        return ": ".join(part for part in parts if part)

    def clip(self, text: str) -> str:
        """`text` cut to max_chars (the cut marked with '...')."""
        return text if len(text) <= self.max_chars else text[: self.max_chars - 3] + "..."


@runtime_checkable
class Benchmark(Protocol):
    """What a benchmark provides. What some benchmarks offer besides, each a small protocol of its own:
    `CallsEntryFunction`, `OffersIdeas`, `HasDescriptors`, `AgentsWriteCode`, `AgentsCallFM`; two-phase
    scoring: `CheckedBenchmark`."""

    name: str
    description: str
    #: What the meta-agent is told about the program it edits: signature, rules, score.
    contract: str
    #: What failures may show: the run's policy, given when the benchmark is built.
    feedback_policy: FeedbackPolicy

    def seed(self) -> Genome: ...

    def tasks(self, split: str) -> Sequence[Task]: ...

    def stages(self) -> Sequence[Stage]: ...

    def run_spec(self, genome: Genome, task: Task) -> RunSpec: ...

    def score(self, task: Task, result: RunResult) -> TaskScore:
        """Score one task run on the host."""
        ...

    def aggregate(self, scores: Sequence[TaskScore]) -> float: ...


@runtime_checkable
class CallsEntryFunction(Protocol):
    """A benchmark whose programs must define one function by name (the harness or a probe calls it): the
    static check refuses a child that drops it or changes how it is called."""

    entry_function: str


@runtime_checkable
class OffersIdeas(Protocol):
    """A benchmark with directions a proposal may be asked to try (one drawn per proposal, `search.ideas`)."""

    ideas: Sequence[str]


@runtime_checkable
class HasDescriptors(Protocol):
    """A benchmark whose task scores carry behaviour descriptors (`TaskScore.descriptors`): each name with its
    (low, high) range, or None for a categorical one; MAP-Elites bins agents by them."""

    descriptor_bounds: Mapping[str, tuple[float, float] | None]


@runtime_checkable
class AgentsWriteCode(Protocol):
    """A benchmark whose agents can write their own children (the `self_modify` operator): it builds the
    task that asks an agent to."""

    def self_modify_task(self, prompt: str) -> Task: ...


@runtime_checkable
class AgentsCallFM(Protocol):
    """A benchmark whose harness hands its agents an FM client (through the gateway) when `agent_calls_fm`."""

    agent_calls_fm: bool


def entry_function(benchmark: object) -> str | None:
    """The function a benchmark's programs must define (`CallsEntryFunction`), or None."""
    return benchmark.entry_function if isinstance(benchmark, CallsEntryFunction) else None


def ideas(benchmark: object) -> tuple[str, ...]:
    """A benchmark's directions to try (`OffersIdeas`); () for none."""
    return tuple(benchmark.ideas or ()) if isinstance(benchmark, OffersIdeas) else ()


def descriptor_bounds(benchmark: object) -> dict[str, tuple[float, float] | None]:
    """A benchmark's descriptor axes with their ranges (`HasDescriptors`); {} for none."""
    return dict(benchmark.descriptor_bounds or {}) if isinstance(benchmark, HasDescriptors) else {}


def agents_call_fm(benchmark: object) -> bool:
    """Whether a benchmark's agents call the FM (`AgentsCallFM`)."""
    return isinstance(benchmark, AgentsCallFM) and bool(benchmark.agent_calls_fm)


@runtime_checkable
class CheckedBenchmark(Protocol):
    """What a benchmark adds whose answers are tests that must run (HumanEval): after the agent's run, the
    runner runs `check_spec(task, result)` (when not None) in a fresh sandbox session and passes its result."""

    def check_spec(self, task: Task, result: RunResult) -> RunSpec | None: ...

    def score(self, task: Task, result: RunResult, *, check: RunResult | None = None) -> TaskScore:
        """Score one task run on the host; `check`: the check run's result (None when check_spec gave None)."""
        ...


def parse_options(model: type[OptionsT], options: Mapping[str, Any] | None, *, benchmark: str, hint: str) -> OptionsT:
    """A benchmark's options validated by its pydantic `model`; BenchmarkError names the bad key or value.

    hint: the valid ranges, shown in the fix after the list of option names.
    """
    try:
        return model.model_validate(dict(options or {}))
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or 'options'}: {err['msg']}" for err in exc.errors()
        )
        raise BenchmarkError(
            f"bad {benchmark} options: {problems}",
            fix=f"use only these options: {', '.join(model.model_fields)} ({hint})",
        ) from exc


def check_stage_options(sizes: Sequence[int], thresholds: Sequence[float]) -> None:
    """Raise ValueError unless there is one threshold in 0..1 per stage size and every size is >= 1
    (for the `stage_sizes`/`thresholds` options of staged benchmarks; call it in a pydantic validator)."""
    if len(sizes) != len(thresholds):
        raise ValueError(
            f"{len(sizes)} stage_sizes but {len(thresholds)} thresholds: give one threshold per leading stage"
        )
    if any(size < 1 for size in sizes):
        raise ValueError("every stage size must be at least 1")
    if any(not 0.0 <= threshold <= 1.0 for threshold in thresholds):
        raise ValueError("every threshold is a pass rate in 0..1")


def staged_plan(task_ids: Sequence[str], sizes: Sequence[int], thresholds: Sequence[float]) -> list[Stage]:
    """Leading stages of `sizes` tasks, each gating what follows by its threshold, then the rest ungated.

    A stage that would be empty is left out; a threshold with nothing after it gates nothing.
    """
    stages: list[Stage] = []
    start = 0
    for size, threshold in zip(sizes, thresholds):
        chunk = task_ids[start : start + size]
        start += size
        if not chunk:
            break
        stages.append(Stage(task_ids=tuple(chunk), threshold=threshold if start < len(task_ids) else None))
    if start < len(task_ids):
        stages.append(Stage(task_ids=tuple(task_ids[start:]), threshold=None))
    return stages
