"""The in-sandbox harness (run_program.py, llm_client.py: stdlib only, copied into every run), the host-side
helper that builds a harness run (`harness_spec`), and `HarnessBenchmark`, the base of benchmarks whose
agent is one entry function the harness calls with a task's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from cambrian.evaluators.harness.run_program import HARNESS_FILE, RESULT_FILE, harness_files
from cambrian.sandbox.base import RunSpec

__all__ = ["HARNESS_FILE", "RESULT_FILE", "HarnessBenchmark", "harness_files", "harness_spec"]


def harness_spec(
    files: Mapping[str, str],
    *,
    entry: str,
    function: str,
    kwargs: Mapping[str, Any],
    timeout_s: float,
    memory_mb: int,
    llm: bool = False,
) -> RunSpec:
    """A RunSpec that calls `function(**kwargs)` of module `entry` among `files` and collects result.json.

    llm: also pass the agent's `llm` client (agent-level benchmarks). timeout_s: seconds; memory_mb: MiB.
    """
    run_files = dict(files)
    # Added last: the program's files can replace neither the harness, the task nor the FM client.
    run_files.update(harness_files(entry=entry, function=function, kwargs=kwargs, llm=llm))
    return RunSpec(
        files=run_files,
        command=("{python}", HARNESS_FILE),
        collect=(RESULT_FILE,),
        timeout_s=timeout_s,
        memory_mb=memory_mb,
    )


class HarnessBenchmark:
    """`run_spec` for a benchmark whose agent is one function: the harness calls `entry_function(**kwargs)` of
    the agent's entry file, with `task_kwargs(task)` (default: the task's inputs), under the benchmark's
    `options.timeout_s` and `options.memory_mb`, and collects what it returns.

    agent_calls_fm: the harness also passes the agent its `llm` client (agent-level benchmarks).
    """

    entry_function: ClassVar[str]
    agent_calls_fm: ClassVar[bool] = False
    options: Any  # each benchmark's options model, with timeout_s and memory_mb

    def task_kwargs(self, task: Any) -> Mapping[str, Any]:
        """The keyword arguments the entry function gets for `task` (evaluators.base.Task)."""
        return task.inputs

    def run_spec(self, genome: Any, task: Any) -> RunSpec:
        return harness_spec(
            genome.files,
            entry=genome.entry,
            function=self.entry_function,
            kwargs=self.task_kwargs(task),
            timeout_s=self.options.timeout_s,
            memory_mb=self.options.memory_mb,
            llm=self.agent_calls_fm,
        )
