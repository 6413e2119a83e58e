"""The in-sandbox harness (run_program.py, llm_client.py: stdlib only, copied into every run) and the
host-side helper that builds a harness run."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from evaluators.harness.run_program import HARNESS_FILE, RESULT_FILE, harness_files
from sandbox.base import RunSpec


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
