"""Host side of the HumanEval check run: assemble the program, build its RunSpec, verify its verdict.

The check run keeps the solution in a child process apart from the tests and
the secret (see `check_driver.py`); its verdict is authenticated: each run gets a
fresh salt and nonce = HMAC-SHA256(key, f"{task_id}:{salt}"), where the key
is the benchmark instance's own random secret and never enters a sandbox. The
driver writes the nonce back only after `check(candidate)` returned, and
`read_verdict` recomputes it, so no state is kept between `check_spec` and
`score` (threads may check many agents at once).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from importlib import resources

from cambrian.evaluators.humaneval.check_driver import (
    CHECK_FILE,
    MAX_CASE_CHARS,
    NONCE_FILE,
    RESULT_FILE,
    SOLUTION_FILE,
    SOLUTION_PROCESS_FILE,
)
from cambrian.evaluators.humaneval.data import Problem
from cambrian.sandbox.base import RunResult, RunSpec


def assemble_program(prompt: str, entry_point: str, completion: str) -> str:
    """The solution.py text for an agent's answer.

    A completion that defines `entry_point` at top level is a full definition: it follows the
    prompt (whose imports and helper functions it may use; the later definition wins). Anything
    else is a body, appended to the prompt as HumanEval's own completions are.
    """
    defines_entry = re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", completion, re.MULTILINE)
    if defines_entry:
        return f"{prompt.rstrip()}\n\n\n{completion.strip()}\n"
    return prompt + completion.rstrip() + "\n"


def driver_files() -> dict[str, str]:
    """The module the check driver imports, at its package path in the check run (SOLUTION_PROCESS_FILE)."""
    name = SOLUTION_PROCESS_FILE.rpartition("/")[2]
    return {SOLUTION_PROCESS_FILE: resources.files("cambrian.evaluators.humaneval").joinpath(name).read_text("utf-8")}


def expected_nonce(key: bytes, task_id: str, salt: str) -> str:
    """The nonce a genuine pass of `task_id` in the check run salted `salt` reports."""
    return hmac.new(key, f"{task_id}:{salt}".encode(), hashlib.sha256).hexdigest()


def check_run_spec(
    problem: Problem,
    program: str,
    *,
    key: bytes,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    report_cases: bool = False,
) -> RunSpec:
    """The check run: solution.py, the driver with the problem's tests, and a fresh nonce.

    timeout_s: wall clock of the whole check, seconds. memory_mb: MiB.
    report_cases: the driver describes a failing test (statement, input, expected and actual value)
    in the verdict; only for the search split, whose feedback may show test cases.
    """
    salt = secrets.token_hex(16)
    driver = resources.files("cambrian.evaluators.humaneval").joinpath("check_driver.py").read_text(encoding="utf-8")
    driver += (
        f"\n\nTEST_SOURCE = {problem.test!r}\nENTRY_POINT = {problem.entry_point!r}\n"
        f"PROMPT_SOURCE = {problem.prompt!r}\nREPORT_CASES = {bool(report_cases)!r}\n"
        "if __name__ == '__main__':\n    sys.exit(main(TEST_SOURCE, ENTRY_POINT, PROMPT_SOURCE, REPORT_CASES))\n"
    )
    nonce = {"salt": salt, "nonce": expected_nonce(key, problem.task_id, salt)}
    return RunSpec(
        files={SOLUTION_FILE: program, CHECK_FILE: driver, NONCE_FILE: json.dumps(nonce), **driver_files()},
        command=("{python}", CHECK_FILE),
        collect=(RESULT_FILE,),
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_output_bytes=200_000,
    )


@dataclass(frozen=True)
class CheckVerdict:
    """What one check run established. Only `passed` is trusted; the rest describes a failure."""

    passed: bool
    reason: str  # "passed", "forged", "no_verdict", "timed_out", "oom", "output", "import", "solution", "tests"
    error_type: str = ""
    error: str = ""  # only for the solution's own errors
    traceback: str = ""  # only the solution's own frames
    #: The failing test as plain text the check driver made (statement, last call, expected and actual
    #: values; at most MAX_CASE_CHARS); only when the check run was asked for cases (search split).
    case: str = ""


def read_verdict(check: RunResult, *, key: bytes, task_id: str) -> CheckVerdict:
    """The verdict of a check run; a pass needs a result.json whose nonce matches this task and salt."""
    if check.timed_out:
        return CheckVerdict(passed=False, reason="timed_out")
    if check.oom_killed:
        return CheckVerdict(passed=False, reason="oom")
    if check.output_truncated:
        return CheckVerdict(passed=False, reason="output")
    try:
        data = json.loads(check.files.get(RESULT_FILE, ""))
    except ValueError:
        return CheckVerdict(passed=False, reason="no_verdict")
    if not isinstance(data, dict):
        return CheckVerdict(passed=False, reason="no_verdict")
    if data.get("passed") is True:
        nonce, salt = data.get("nonce"), data.get("salt")
        genuine = (
            isinstance(nonce, str)
            and isinstance(salt, str)
            and hmac.compare_digest(nonce, expected_nonce(key, task_id, salt))
        )
        return CheckVerdict(passed=True, reason="passed") if genuine else CheckVerdict(passed=False, reason="forged")
    phase = data.get("phase")
    if phase not in ("import", "solution", "tests"):
        return CheckVerdict(passed=False, reason="no_verdict")
    return CheckVerdict(
        passed=False,
        reason=str(phase),
        error_type=str(data.get("error_type", "Error"))[:100],
        error="" if phase == "tests" else str(data.get("error", "")),
        traceback="" if phase == "tests" else str(data.get("traceback", "")),
        case=str(data.get("case", ""))[:MAX_CASE_CHARS],
    )
