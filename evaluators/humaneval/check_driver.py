"""The HumanEval check run inside the sandbox: import the solution, run the hidden tests, write a verdict.

Standard library only. The host copies this file into a FRESH sandbox run, after
the agent's own run has ended, as `_check.py`, followed by three lines that set
TEST_SOURCE (the problem's `test`, defining `check(candidate)`), ENTRY_POINT and
call `sys.exit(main(TEST_SOURCE, ENTRY_POINT))`. Next to it: `solution.py` (the
program the agent returned, assembled on the host) and `_nonce.json`
({"salt", "nonce"}, fresh for every check run).

Order matters:
1. read `_nonce.json` and delete it, so the solution cannot find it on disk
   (a file rather than an environment variable: /proc/self/environ keeps a
   process's initial environment even after os.environ forgets it);
2. import `solution` (its import-time code runs here);
3. compile the tests AFTER the import, into a namespace of their own, so the
   solution cannot have replaced `check`; call `check(candidate)`;
4. only then write result.json {"passed": true, "salt", "nonce"} (on a failure: "passed": false,
   "phase", "error_type", and for the solution's own errors "error" and its "traceback" lines).

The host accepts a pass only with the right nonce, so a solution that exits
early (sys.exit, os._exit), prints "PASS" or writes its own result.json does
not pass. Limits said plainly: the solution runs in this process, so code
written to dig through the interpreter's memory (frames, gc) could find the
nonce; the nonce stops the cheap cheats, the sandbox contains the rest.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import traceback
from typing import Any

NONCE_FILE = "_nonce.json"
RESULT_FILE = "result.json"
SOLUTION_MODULE = "solution"
SOLUTION_FILE = "solution.py"
TESTS_FILENAME = "<hidden tests>"  # a name with no file behind it: tracebacks cannot show test lines
MAX_ERROR_CHARS = 1000
MAX_TRACEBACK_CHARS = 2000


def _read_nonce(workdir: str) -> dict[str, str]:
    path = os.path.join(workdir, NONCE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    finally:
        if os.path.exists(path):
            os.remove(path)
    return {"salt": str(data["salt"]), "nonce": str(data["nonce"])}


def _solution_traceback(exc: BaseException) -> str:
    """Only the solution's own frames: the hidden tests' lines never leave the check run."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename.endswith(SOLUTION_FILE)]
    text = "".join(traceback.format_list(frames))
    return text[-MAX_TRACEBACK_CHARS:]


def _raised_in_solution(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and frames[-1].filename.endswith(SOLUTION_FILE)


def _failure(phase: str, exc: BaseException) -> dict[str, Any]:
    """phase: "import" (solution.py did not import), "solution" (the solution raised during the tests)
    or "tests" (the tests' own assertion or operation failed: its message may hold expected values)."""
    failure = {"phase": phase, "error_type": type(exc).__name__, "error": "", "traceback": ""}
    if phase != "tests":
        failure["error"] = str(exc)[:MAX_ERROR_CHARS]
        failure["traceback"] = _solution_traceback(exc)
    return failure


def run_check(test_source: str, entry_point: str) -> tuple[bool, dict[str, Any]]:
    """Import the solution and run the tests on it: (passed, details of a failure).

    `passed` comes from this function's own control flow alone, and everything the tests need is
    taken before the solution's import-time code runs: a solution that patches builtins, this
    module's helpers or the json module cannot turn a failure into a pass.
    """
    clean_builtins = dict(builtins.__dict__)
    compile_, exec_, getattr_, callable_ = compile, exec, getattr, callable
    try:
        module = __import__(SOLUTION_MODULE)
    # The solution's code may raise anything at import, SystemExit included: all of it is a failure.
    except BaseException as exc:  # noqa: BLE001
        return False, _failure("import", exc)
    candidate = getattr_(module, entry_point, None)
    if not callable_(candidate):
        return False, {"phase": "import", "error_type": "NameError",
                       "error": f"solution.py defines no function {entry_point!r}", "traceback": ""}
    # The tests see the builtins as they were before the solution ran.
    namespace: dict[str, Any] = {"__name__": "_hidden_tests", "__builtins__": clean_builtins}
    try:
        exec_(compile_(test_source, TESTS_FILENAME, "exec"), namespace)  # noqa: S102 - the benchmark's own tests
        namespace["check"](candidate)
    except BaseException as exc:  # noqa: BLE001
        return False, _failure("solution" if _raised_in_solution(exc) else "tests", exc)
    return True, {}


def main(test_source: str, entry_point: str) -> int:
    """Check entry point inside the sandbox; returns the exit code (0 unless the driver itself breaks)."""
    workdir = os.getcwd()  # captured first: the solution may change directory
    secret = _read_nonce(workdir)
    dumps, replace, open_ = json.dumps, os.replace, open  # taken before the solution can patch them
    sys.path.insert(0, workdir)
    passed, details = run_check(test_source, entry_point)
    payload = {**details, "passed": passed, "salt": secret["salt"], "nonce": secret["nonce"] if passed else ""}
    tmp = os.path.join(workdir, f"{RESULT_FILE}.tmp{os.getpid()}")
    with open_(tmp, "w", encoding="utf-8") as handle:
        handle.write(dumps(payload))
    replace(tmp, os.path.join(workdir, RESULT_FILE))
    return 0
