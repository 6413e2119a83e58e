"""The in-sandbox harness: import the agent's module, call one function, write result.json.

Standard library only: this file is copied into the sandbox, next to the
agent's files, as `_cambrian_harness.py` and run as

    python _cambrian_harness.py

from the work dir. Where the environment variable CAMBRIAN_TASK_SEED holds a number, it first seeds
`random` and, for programs that use numpy, `numpy.random` with it (`seed_randomness`), so that a program
drawing random numbers scores the same way on every run. It reads `task.json` there:

    {"module": "packing", "function": "pack_circles", "kwargs": {"n": 26}}

(`module` is the entry file's path without `.py`, with dots for folders). An
agent-level task also carries `"llm": true`: the harness then imports `llm`
from `_cambrian_llm` (the FM client placed next to it) and calls
`function(**kwargs, llm=llm)`, e.g. `solve(task={...}, llm=llm)`. It then
writes `result.json` atomically (temp file + rename, so a killed run never
leaves half a file):

    {"ok": true, "value": <JSON value>, "seconds": <float, wall time of the call>}
    {"ok": false, "error_type": "ZeroDivisionError", "error": "<message, <= 2000 chars>",
     "traceback": "<last 4000 chars>"}

The value is made JSON-safe: tuples become lists, objects with `tolist()`
(numpy arrays and scalars, without importing numpy) are converted, and NaN or
infinity is an error ("result contains NaN"). The agent's prints go to stdout
and stderr as usual; a traceback of the agent's error is also printed to
stderr. The exit code is 0 even when the agent raised (result.json says so);
it is non-zero only when the harness itself breaks (e.g. task.json missing).

The host side of the same protocol is at the bottom: `harness_files` builds
the files a benchmark places in its RunSpec, `read_outcome` parses what came
back.
"""

from __future__ import annotations

import functools
import importlib
import json
import math
import os
import sys
import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any

HARNESS_FILE = "_cambrian_harness.py"  # the name this file gets inside the sandbox
TASK_FILE = "task.json"
RESULT_FILE = "result.json"
TASK_SEED_ENV = "CAMBRIAN_TASK_SEED"  # the task's random seed, set by the host (evaluators.runner.task_seed)
MAX_ERROR_CHARS = 2000
MAX_TRACEBACK_CHARS = 4000


class UnsafeResultError(ValueError):
    """The agent's return value cannot be written as strict JSON."""


def to_json_safe(value: Any, *, path: str = "result") -> Any:
    """Return `value` as plain JSON types; raise UnsafeResultError naming where it fails.

    Tuples and lists become lists; dict keys must be str, int, float or bool
    (JSON turns them into strings); NaN and +-inf are refused.
    """
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if math.isnan(value):
            raise UnsafeResultError(f"result contains NaN (at {path})")
        if math.isinf(value):
            raise UnsafeResultError(f"result contains infinity (at {path})")
        return float(value)
    if isinstance(value, (list, tuple)):
        return [to_json_safe(item, path=f"{path}[{i}]") for i, item in enumerate(value)]
    if isinstance(value, dict):
        safe: dict[str, Any] = {}
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)):
                raise UnsafeResultError(f"result has a {type(key).__name__} dict key (at {path})")
            safe[str(key)] = to_json_safe(item, path=f"{path}[{key!r}]")
        return safe
    if hasattr(value, "tolist"):  # numpy arrays and scalars, without importing numpy
        converted = value.tolist()
        if converted is not value:
            return to_json_safe(converted, path=path)
    raise UnsafeResultError(
        f"result contains a {type(value).__name__} object (at {path}), which is not JSON; "
        "return lists, numbers, strings, bools, None and dicts"
    )


def _write_atomically(path: str, payload: Mapping[str, Any]) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as handle:
        json.dump(payload, handle, allow_nan=False)
    os.replace(tmp, path)


def _agent_frames(tb: TracebackType | None) -> TracebackType | None:
    """Skip the harness's and importlib's own frames: the meta-agent needs the agent's lines."""
    here = os.path.abspath(__file__)
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not (
            os.path.abspath(filename) == here
            or filename.startswith("<frozen importlib")
            or filename.endswith(os.path.join("importlib", "__init__.py"))
        ):
            return tb
        tb = tb.tb_next
    return None  # no agent frame (a SyntaxError, no such function): the message says it all


def _failure(exc: BaseException, workdir: str) -> dict[str, Any]:
    text = "".join(traceback.format_exception(type(exc), exc, _agent_frames(exc.__traceback__)))
    # Paths relative to the work dir: the same agent gives the same text in every run.
    text = text.replace(os.path.join(workdir, ""), "")
    sys.stderr.write(text)
    return {
        "ok": False,
        "error_type": type(exc).__name__,
        "error": str(exc)[:MAX_ERROR_CHARS],
        "traceback": text[-MAX_TRACEBACK_CHARS:],
    }


def seed_randomness(seed: int, workdir: str) -> None:
    """Seed `random` and, where the program uses numpy, `numpy.random` (the legacy global generator, and every
    `default_rng()` called without a seed, which gets the next of a seeded sequence): a program that draws
    random numbers returns the same values on every run with the same seed."""
    import random

    random.seed(seed)
    if "numpy" not in sys.modules and not _mentions_numpy(workdir):
        return  # importing numpy costs a tenth of a second: only for programs that use it
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed % 2**32)
    unseeded, base = numpy.random.default_rng, seed
    draws = iter(range(1, 2**31))

    def default_rng(seed: Any = None) -> Any:
        return unseeded([base, next(draws)] if seed is None else seed)

    numpy.random.default_rng = default_rng  # same calls, same results: only an unseeded call differs


def _mentions_numpy(workdir: str) -> bool:
    for folder, _, names in os.walk(workdir):
        for name in names:
            if name.endswith(".py") and name != HARNESS_FILE:
                try:
                    with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                        if "numpy" in handle.read():
                            return True
                except OSError:
                    continue
    return False


def run_task(workdir: str) -> dict[str, Any]:
    """Run the task in `workdir`/task.json and return the result payload (never raises for agent errors)."""
    with open(os.path.join(workdir, TASK_FILE), encoding="utf-8") as handle:
        task = json.load(handle)
    module_name, function_name = task["module"], task["function"]
    kwargs = dict(task.get("kwargs", {}))
    seed = os.environ.get(TASK_SEED_ENV, "")
    if seed.isdigit():
        seed_randomness(int(seed), workdir)
    try:
        if task.get("llm") is True:
            # Imported before the agent so that a broken agent module cannot shadow the client.
            from _cambrian_llm import llm  # the gateway client, present only in a sandbox

            kwargs["llm"] = llm
        module = importlib.import_module(module_name)
        function = getattr(module, function_name, None)
        if not callable(function):
            raise AttributeError(f"module {module_name!r} defines no function {function_name!r}")
        started = time.perf_counter()
        value = function(**kwargs)
        seconds = time.perf_counter() - started
        return {"ok": True, "value": to_json_safe(value), "seconds": seconds}
    # The agent's code may raise anything, SystemExit included: all of it is its result.
    except BaseException as exc:  # noqa: BLE001 - whatever the agent raised is its result
        return _failure(exc, workdir)


def main() -> int:
    """Harness entry point inside the sandbox; returns the process exit code."""
    workdir = os.getcwd()  # captured first: the agent may change directory
    payload = run_task(workdir)
    try:
        sys.stdout.flush()  # the agent's prints before the result appears
    except (OSError, ValueError):
        pass  # the agent closed or broke stdout: its result still counts
    _write_atomically(os.path.join(workdir, RESULT_FILE), payload)
    return 0


# ---- host side: used by benchmarks, never inside the sandbox ----


def entry_module(entry: str) -> str:
    """'pkg/solver.py' -> 'pkg.solver': the module name the harness imports."""
    if not entry.endswith(".py"):
        raise ValueError(f"entry file {entry!r} is not a .py file")
    return entry[: -len(".py")].replace("/", ".")


@functools.lru_cache(maxsize=1)
def harness_text() -> str:
    """This file's text, read as package data so it works from a wheel too (once per process)."""
    from importlib import resources

    return resources.files("cambrian.evaluators.harness").joinpath("run_program.py").read_text(encoding="utf-8")


def harness_files(*, entry: str, function: str, kwargs: Mapping[str, Any], llm: bool = False) -> dict[str, str]:
    """The files a benchmark adds to its RunSpec: the harness, task.json and the agents' `llm()` client.

    llm: True for an agent-level benchmark: the harness passes the FM client as the keyword `llm`
    (`function(**kwargs, llm=llm)`); the RunSpec then needs the gateway's env and mount to reach the FM.
    """
    from cambrian.evaluators.harness.llm_client import LLM_CLIENT_FILE, llm_client_text

    if llm and "llm" in kwargs:
        raise ValueError("kwargs may not contain 'llm' when llm=True: the harness passes the FM client under it")
    task: dict[str, Any] = {"module": entry_module(entry), "function": function, "kwargs": dict(kwargs)}
    if llm:
        task["llm"] = True
    return {HARNESS_FILE: harness_text(), TASK_FILE: json.dumps(task), LLM_CLIENT_FILE: llm_client_text()}


@dataclass(frozen=True)
class HarnessOutcome:
    """result.json as read on the host. `value` only when ok; the error fields only when not."""

    ok: bool
    value: Any = None
    seconds: float | None = None
    error_type: str = ""
    error: str = ""
    traceback: str = ""

    def error_summary(self) -> str:
        """'ZeroDivisionError: division by zero' (empty when ok)."""
        if self.ok:
            return ""
        return f"{self.error_type}: {self.error}" if self.error else self.error_type


def read_outcome(files: Mapping[str, str]) -> HarnessOutcome | None:
    """Parse result.json from a run's collected files; None when it is absent or not harness JSON."""
    text = files.get(RESULT_FILE)
    if text is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("ok"), bool):
        return None
    if data["ok"]:
        seconds = data.get("seconds")
        return HarnessOutcome(
            ok=True, value=data.get("value"), seconds=float(seconds) if isinstance(seconds, (int, float)) else None
        )
    return HarnessOutcome(
        ok=False,
        error_type=str(data.get("error_type", "Error")),
        error=str(data.get("error", ""))[:MAX_ERROR_CHARS],
        traceback=str(data.get("traceback", ""))[-MAX_TRACEBACK_CHARS:],
    )


if __name__ == "__main__":
    sys.exit(main())
