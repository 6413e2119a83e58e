"""`ProgramBenchmark`: the shared body of the small program-search benchmarks of the generality suite.

Each of them is one function (or class) the agent writes, run by the stdlib harness on a task's
inputs, and scored here on the host from what it returned. A task module says only what differs:

- its name, description and the words of its contract (`task_text`);
- the entry file and function, and optionally a probe: a file of the benchmark's own, placed next to
  the agent's files, whose `evaluate(module=..., **inputs)` imports the agent and drives it (a greedy
  packer calling the agent's priority for each item, a timer around a function);
- `_instances`: the inputs of each task per split, made in its __init__ from fixed seeds (`per_instance`
  computes what the host keeps of each, e.g. the optimum, keyed by `instance_key(task)`);
- `judge(task, value, result)`: the TaskScore of one returned value, checked on the host.

The files live in `files/<name>/`: `seed/` (what a search starts from), `reference/` (a known
stronger program: the bench and the tests score it beside the seed) and the probe, if any.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from importlib import resources
from typing import Any, ClassVar, TypeVar

from pydantic import BaseModel, ConfigDict, Field

from cambrian.evaluators.base import BenchmarkError, FeedbackPolicy, Genome, Stage, Task, TaskScore
from cambrian.evaluators.base import parse_options as parse_benchmark_options
from cambrian.evaluators.feedback import not_executed, opened, run_failure
from cambrian.evaluators.harness import HarnessBenchmark, harness_spec
from cambrian.evaluators.harness.run_program import entry_module, read_outcome
from cambrian.sandbox.base import RunResult, RunSpec

#: Where a probe goes in the sandbox: underscored, so an agent's own file cannot take its name by accident.
T = TypeVar("T")

PROBE_FILE = "_cambrian_probe.py"
PROBE_FUNCTION = "evaluate"


class ProgramOptions(BaseModel):
    """Options every program benchmark takes (unknown keys are refused)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    timeout_s: float = Field(20.0, gt=0, le=3600, description="wall-clock limit per run, seconds")
    memory_mb: int = Field(512, ge=64, le=65536, description="memory limit per run, MiB")


class ProgramBenchmark(HarnessBenchmark):
    """A program-search benchmark whose tasks are inputs to one agent function (see the module docstring).

    timeout_s: wall clock of one run, seconds. memory_mb: memory of one run, MiB.
    """

    name: str
    description: str
    #: The agent's function the static check keeps callable (the harness calls the probe's, when there is one).
    entry_function: ClassVar[str]
    #: The entry file of the seed (and of every child).
    entry: ClassVar[str]
    #: The probe's file name in files/<name>/, or None: the harness calls `entry_function(**inputs)` itself.
    probe: ClassVar[str | None] = None
    #: What the agent is told beyond the environment and the EVOLVE-BLOCK rule: signature, calls, score.
    task_text: ClassVar[str]
    #: Python packages the agent may import besides the standard library (named in the contract).
    packages: ClassVar[str] = "the standard library plus numpy"

    def __init__(
        self, *, timeout_s: float = 20.0, memory_mb: int = 512, feedback_policy: FeedbackPolicy | None = None
    ) -> None:
        self.options = self.parse_options({"timeout_s": timeout_s, "memory_mb": memory_mb})
        self.feedback_policy = feedback_policy or FeedbackPolicy()  # runs see no answer, so all may be shown
        self.contract = (
            f"{self.task_text.strip()}\n"
            f"Environment: Python 3 with {self.packages}; no network; {self.options.timeout_s:g} s wall clock "
            f"and {self.options.memory_mb} MiB of memory per run.\n"
            "Edit only between the EVOLVE-BLOCK-START and EVOLVE-BLOCK-END markers."
        )

    @classmethod
    def parse_options(cls, options: Mapping[str, Any] | None) -> ProgramOptions:
        """Validate `options`; BenchmarkError names the bad key or value."""
        return parse_benchmark_options(
            ProgramOptions, options, benchmark=cls.name, hint="timeout_s > 0, memory_mb >= 64"
        )

    @classmethod
    def from_options(
        cls, options: Mapping[str, Any] | None = None, *, feedback_policy: FeedbackPolicy | None = None
    ) -> ProgramBenchmark:
        """Build from a user's option mapping and the run's feedback policy; BenchmarkError names an unknown key
        or bad value."""
        parsed = cls.parse_options(options)
        return cls(timeout_s=parsed.timeout_s, memory_mb=parsed.memory_mb, feedback_policy=feedback_policy)

    # ----- what a task module provides ---------------------------------------------------------

    #: Each split's task inputs ("search", "holdout"), made deterministically by the subclass's __init__.
    _instances: dict[str, list[dict[str, Any]]]

    def instances(self, split: str) -> Sequence[Mapping[str, Any]]:
        """The inputs of each task of `split` ("search" or "holdout"), the same on every call."""
        return self._instances[split]

    def per_instance(self, value: Callable[[Mapping[str, Any]], T]) -> dict[tuple[str, int], T]:
        """`value(inputs)` for every instance of both splits, keyed as `instance_key`: what the host knows."""
        return {
            (split, index): value(inputs)
            for split, instances in self._instances.items()
            for index, inputs in enumerate(instances)
        }

    @staticmethod
    def instance_key(task: Task) -> tuple[str, int]:
        """(split, index) of the instance a task runs on, from its id ("search-2")."""
        return task.split, int(task.id.rsplit("-", 1)[1])

    @abstractmethod
    def judge(self, task: Task, value: Any, result: RunResult) -> TaskScore:
        """The score of what the agent's run returned for `task` (checked here; never trust the value)."""

    # ----- the Benchmark protocol --------------------------------------------------------------

    def seed(self) -> Genome:
        return self._genome("seed")

    def reference(self) -> Genome:
        """A known stronger program than the seed, kept to measure how far a search got."""
        return self._genome("reference")

    def tasks(self, split: str) -> Sequence[Task]:
        if split not in ("search", "holdout"):
            raise BenchmarkError(f"unknown split {split!r}", fix="use 'search' or 'holdout'")
        return [
            Task(id=f"{split}-{i}", split=split, inputs=dict(inputs)) for i, inputs in enumerate(self.instances(split))
        ]

    def stages(self) -> Sequence[Stage]:
        return [Stage(task_ids=tuple(task.id for task in self.tasks("search")))]

    def run_spec(self, genome: Genome, task: Task) -> RunSpec:
        if self.probe is None:
            return super().run_spec(genome, task)
        probe = self._files().joinpath(self.probe).read_text(encoding="utf-8")
        return harness_spec(
            {**genome.files, PROBE_FILE: probe},
            entry=PROBE_FILE,
            function=PROBE_FUNCTION,
            kwargs={"module": entry_module(genome.entry), **task.inputs},
            timeout_s=self.options.timeout_s,
            memory_mb=self.options.memory_mb,
        )

    def score(self, task: Task, result: RunResult) -> TaskScore:
        failure = run_failure(result, opened(self.feedback_policy), who="the program")
        if failure is not None:
            return failure
        outcome = read_outcome(result.files)
        assert outcome is not None  # run_failure returned None: the run wrote a value
        return self.judge(task, outcome.value, result)

    def aggregate(self, scores: Sequence[TaskScore]) -> float:
        """Mean task score; 0.0 for no tasks."""
        return sum(s.score for s in scores) / len(scores) if scores else 0.0

    def unusable(self, feedback: str) -> TaskScore:
        """Score 0 for a value that cannot be scored; `feedback` says why."""
        return not_executed(f"unusable result: {feedback}", self.feedback_policy)

    def _files(self) -> Any:
        return resources.files("cambrian.evaluators.programs").joinpath("files").joinpath(self.name)

    def _genome(self, kind: str) -> Genome:
        folder = self._files().joinpath(kind)
        files = _read_tree(folder, "")
        if self.entry not in files:
            raise RuntimeError(f"the packaged {kind} of {self.name} has no {self.entry}; reinstall cambrian")
        return Genome(files=files, entry=self.entry)


def _read_tree(folder: Any, prefix: str) -> dict[str, str]:
    """Every .py file under `folder` (a resources Traversable), keyed by its relative path."""
    files: dict[str, str] = {}
    for item in sorted(folder.iterdir(), key=lambda entry: entry.name):
        if item.is_dir() and item.name != "__pycache__":
            files.update(_read_tree(item, f"{prefix}{item.name}/"))
        elif item.name.endswith(".py"):
            files[f"{prefix}{item.name}"] = item.read_text(encoding="utf-8")
    return files
