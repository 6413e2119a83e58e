"""The HumanEval check run inside the sandbox: the solution runs in a child process; the tests, the secret
and the verdict stay in this one.

Standard library only. The host copies this file into a FRESH sandbox run, after
the agent's own run has ended, as `_check.py`, followed by lines that set
TEST_SOURCE (the problem's `test`, defining `check(candidate)`), ENTRY_POINT,
PROMPT_SOURCE (the problem's prompt: the helpers some tests call, e.g. `poly`),
REPORT_CASES and call `sys.exit(main(...))`. Next to it: `solution.py` (the
program the agent returned, assembled on the host), `_nonce.json`
({"salt", "nonce"}, fresh for every check run) and the one module this driver
imports, `solution_process.py`, at its package path
(`cambrian/evaluators/humaneval/solution_process.py`), so the same import line
finds it there as on the host; it is removed once imported.

Untrusted code never shares a process with the check or the secret. Order matters:
1. make this process non-dumpable (prctl PR_SET_DUMPABLE 0), so no other process of
   the sandbox user can read its memory, descriptors or environment through /proc or ptrace;
2. read `_nonce.json` and delete it, and delete `_check.py` (this file, which holds the
   tests) and the shipped `cambrian/` folder: the solution finds none of them on disk;
3. compile the prompt and the tests (instrumented, see below), and drop the work dir from
   sys.path: nothing the solution writes there can be imported here later;
4. start the child (`solution_process.py`): `python -S -c <CODEC_SOURCE + CHILD_SOURCE> ENTRY_POINT`
   in the work dir. It imports `solution` (its import-time code runs THERE) and then answers calls:
   one JSON line per call each way, over pipes, with the values in the plain-data encoding;
5. run the prompt and then the tests here, in a namespace of their own; the entry point's name
   there is a proxy that sends each call's arguments to the child and builds the returned value
   here from plain data: a value whose `__eq__` always answers True cannot cross, and anything
   that is not plain data (None, bool, int, float, complex, str, bytes, and lists, tuples, sets,
   frozensets and dicts of them) fails the check;
6. kill the child, then write result.json {"passed": true, "salt", "nonce"} (on a failure: "passed":
   false, "phase", "error_type", for the solution's own errors "error" and its "traceback" lines, and
   with REPORT_CASES a "case": plain text naming the failing check).

Phases of a failure: "import" (solution.py did not import, or has no such function), "solution"
(a call raised, exited, hung up or returned something that is not plain data), "tests" (the tests'
own assertion or operation failed on what the solution returned).

The failing case: every `candidate(...)` call of the tests goes through a
recorder that notes the call's arguments (as text, before the call) and what it
returned or raised; in `assert <call> == <expected>` (or `is`) the expected
side is noted too. Nothing the tests compute changes, nor its order. On a
failure the driver writes, as truncated plain text it makes itself, the failing
statement of the tests, the last call with its arguments and result, the
expected value and any non-assertion error. The host asks for cases only on
the search split.

The host accepts a pass only with the right nonce, which only this process ever held; the child
can exit early, print "PASS", write its own result.json or kill this process: none of it is a pass.
"""

from __future__ import annotations

import ast
import builtins
import itertools
import json
import os
import shutil
import signal
import sys
import traceback
from typing import Any

from cambrian.evaluators.humaneval.solution_process import CandidateProcess, SolutionError

NONCE_FILE = "_nonce.json"
RESULT_FILE = "result.json"
CHECK_FILE = "_check.py"  # this driver's name inside the check run
SOLUTION_MODULE = "solution"
SOLUTION_FILE = "solution.py"
#: The one module this driver imports, shipped into the check run at its package path (the work dir is on
#: sys.path, so the import below finds it there as on the host), and removed with its folder once imported.
SOLUTION_PROCESS_FILE = "cambrian/evaluators/humaneval/solution_process.py"
TESTS_FILENAME = "<hidden tests>"  # a name with no file behind it: tracebacks cannot show test lines
PROMPT_FILENAME = "<prompt>"
MAX_CASE_CHARS = 600  # the whole failing-case text
MAX_VALUE_CHARS = 150  # one value's text within it
MAX_STATEMENT_CHARS = 200  # the failing statement's source within it
CANDIDATE = "candidate"  # the parameter name of HumanEval's check(candidate)
CALL_HOOK = "_cambrian_call"  # names the instrumented tests use for the recorder
EXPECT_HOOK = "_cambrian_expect"
BEGIN_HOOK = "_cambrian_begin"
_NOTHING = object()
_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def _read_nonce(workdir: str) -> dict[str, str]:
    path = os.path.join(workdir, NONCE_FILE)
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    finally:
        if os.path.exists(path):
            os.remove(path)
    return {"salt": str(data["salt"]), "nonce": str(data["nonce"])}


def make_undumpable() -> bool:
    """PR_SET_DUMPABLE 0 for this process: /proc/<pid>/mem, fd, environ and ptrace need CAP_SYS_PTRACE,
    which the sandbox user lacks. False where it cannot be set (not Linux, no ctypes)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


def become_subreaper() -> bool:
    """PR_SET_CHILD_SUBREAPER for this process: a process the solution starts and orphans (a double fork, a
    setsid) is re-parented to this one instead of init, so `kill_descendants` still finds it. False where it
    cannot be set (not Linux, no ctypes)."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (ImportError, OSError, AttributeError):
        return False


def _descendants(root: int) -> list[int]:
    """Every live process below `root`, from /proc (a process's parent is field 4 of its stat)."""
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", encoding="latin-1") as handle:
                stat = handle.read()
        except OSError:
            continue  # it ended meanwhile
        fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) ": state, ppid, ...
        if len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(name))
    found, pending = [], list(children.get(root, []))
    while pending:
        pid = pending.pop()
        found.append(pid)
        pending.extend(children.get(pid, []))
    return found


def kill_descendants(rounds: int = 50) -> None:
    """SIGKILL every process below this one and reap them, until none is left (orphans come back to this
    subreaper and are killed in the next round): nothing the solution started can outlive the check and
    rewrite the verdict or its failure details after they are written."""
    for _ in range(rounds):
        below = _descendants(os.getpid())
        if not below:
            return
        for pid in below:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break  # every child of this process reaped: the next round looks for re-parented orphans


def _failure(phase: str, exc: BaseException, case: str = "") -> dict[str, Any]:
    """The failure's details for result.json; case: the failing-case text (empty unless asked for)."""
    if isinstance(exc, SolutionError):
        failure = {"phase": phase, "error_type": exc.error_type, "error": exc.message, "traceback": exc.traceback_text}
    else:  # the tests' own failure: its message may hold expected values, so only its type is kept
        failure = {"phase": phase, "error_type": type(exc).__name__, "error": "", "traceback": ""}
    if case:
        failure["case"] = case[:MAX_CASE_CHARS]
    return failure


def plain_text(value: Any, limit: int = MAX_VALUE_CHARS, depth: int = 0) -> str:
    """`value` as text, at most `limit` characters, made without running any of the value's own code.

    Exact built-in types only (their C repr); any other object, a subclass included, is shown as its
    type's name: a solution's __repr__ never runs here.
    """
    kind = type(value)
    if value is None or kind in (bool, float, complex):
        text = repr(value)
    elif kind is int:
        text = repr(value) if value.bit_length() <= 512 else f"<int of {value.bit_length()} bits>"
    elif kind in (str, bytes):
        text = repr(value[:limit]) + ("..." if len(value) > limit else "")
    elif kind in (list, tuple, set, frozenset, dict) and depth < 4:
        parts: list[str] = []
        for item in itertools.islice(value.items() if kind is dict else value, 12):
            if sum(len(part) + 2 for part in parts) > limit:
                break  # the text is cut at `limit` anyway: the rest would never be shown
            if kind is dict:
                parts.append(f"{plain_text(item[0], limit, depth + 1)}: {plain_text(item[1], limit, depth + 1)}")
            else:
                parts.append(plain_text(item, limit, depth + 1))
        if len(value) > len(parts):
            parts.append("...")
        if kind is tuple and len(parts) == 1:
            parts[0] += ","
        brackets: dict[type, tuple[str, str]] = {list: ("[", "]"), tuple: ("(", ")"), dict: ("{", "}")}
        open_, close = brackets.get(kind, ("{", "}"))  # set, frozenset
        text = open_ + ", ".join(parts) + close
        if kind is frozenset or (kind is set and not parts):
            text = f"{kind.__name__}({text if parts else ''})"
    else:
        text = f"<{kind.__module__}.{kind.__qualname__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CaseRecorder:
    """Notes what the tests' `candidate(...)` calls got and returned, and the expected side of an assert.

    Built before the solution is imported; the instrumented tests reach it through the hook names.
    """

    def __init__(self) -> None:
        self.call = ""  # "candidate(1, [2])": the last call's arguments, made before the call
        self.returned: Any = _NOTHING
        self.raised = ""  # the exception type the last call raised
        self.expected: Any = _NOTHING  # the expected side of the assert being evaluated
        self.expected_line = 0

    def begin(self, line: int) -> None:
        """An assert at `line` starts: forget the previous assert's expected value."""
        self.expected, self.expected_line = _NOTHING, line

    def record_call(self, function: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            shown = [plain_text(a) for a in args] + [f"{k}={plain_text(v)}" for k, v in kwargs.items()]
            self.call = f"{CANDIDATE}({', '.join(shown)})"
        except Exception:  # noqa: BLE001 - the note must never change what the tests do
            self.call = f"{CANDIDATE}(...)"
        self.returned, self.raised = _NOTHING, ""
        try:
            value = function(*args, **kwargs)
        except BaseException as exc:
            self.raised = exc.error_type if isinstance(exc, SolutionError) else type(exc).__name__
            raise
        self.returned = value
        return value

    def expect(self, value: Any) -> Any:
        self.expected = value
        return value

    def hooks(self) -> dict[str, Any]:
        return {CALL_HOOK: self.record_call, EXPECT_HOOK: self.expect, BEGIN_HOOK: self.begin}


class _Instrument(ast.NodeTransformer):
    """Route the tests' `candidate(...)` calls and the expected side of `assert <call> == <expected>`
    through the recorder; every expression is still evaluated once, in its original order."""

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == CANDIDATE:
            hook = ast.Name(id=CALL_HOOK, ctx=ast.Load())
            return ast.copy_location(ast.Call(func=hook, args=[node.func, *node.args], keywords=node.keywords), node)
        return node

    def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
        self.generic_visit(node)
        test = node.test
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
            left_calls, right_calls = _calls_candidate(test.left), _calls_candidate(test.comparators[0])
            if left_calls and not right_calls:
                test.comparators = [_hooked(EXPECT_HOOK, test.comparators[0])]
            elif right_calls and not left_calls:
                test.left = _hooked(EXPECT_HOOK, test.left)
        begin = ast.Expr(
            value=ast.Call(func=ast.Name(id=BEGIN_HOOK, ctx=ast.Load()), args=[ast.Constant(node.lineno)], keywords=[])
        )
        return [ast.copy_location(begin, node), node]


def _hooked(hook: str, expression: ast.expr) -> ast.expr:
    call = ast.Call(func=ast.Name(id=hook, ctx=ast.Load()), args=[expression], keywords=[])
    return ast.copy_location(call, expression)


def _calls_candidate(expression: ast.expr) -> bool:
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == CALL_HOOK
        for node in ast.walk(expression)
    )


def compile_tests(test_source: str) -> Any:
    """The tests' code object, instrumented for the recorder (line numbers kept)."""
    tree = _Instrument().visit(ast.parse(test_source, TESTS_FILENAME))
    return compile(ast.fix_missing_locations(tree), TESTS_FILENAME, "exec")


def _failing_statement(test_source: str, line: int) -> str:
    """The source of the innermost statement of the tests at `line`, on one line and truncated."""
    statements = [
        node
        for node in ast.walk(ast.parse(test_source))
        if isinstance(node, ast.stmt) and node.lineno <= line <= (node.end_lineno or node.lineno)
    ]
    if not statements:
        return ""
    node = max(statements, key=lambda s: (s.lineno, -(s.end_lineno or s.lineno)))
    if hasattr(node, "body"):  # a compound statement (for, if, with): its header line only
        text = test_source.splitlines()[line - 1]
    else:
        text = ast.get_source_segment(test_source, node) or ""
    text = " ".join(text.split())
    return text if len(text) <= MAX_STATEMENT_CHARS else text[: MAX_STATEMENT_CHARS - 3] + "..."


def describe_case(test_source: str, recorder: CaseRecorder, exc: BaseException, phase: str) -> str:
    """The failing case as plain text: the failing statement, the last call, expected and actual values."""
    lines = []
    test_lines = [f.lineno for f in traceback.extract_tb(exc.__traceback__) if f.filename == TESTS_FILENAME]
    line = test_lines[-1] if test_lines else 0
    statement = _failing_statement(test_source, line) if line else ""
    if statement:
        lines.append(f"failing check: {statement}")
    if recorder.call:
        if recorder.raised:
            outcome = f" raised {recorder.raised}"
        elif recorder.returned is not _NOTHING:
            outcome = f" returned {plain_text(recorder.returned)}"
        else:
            outcome = ""
        lines.append(f"last call: {recorder.call}{outcome}")
    if recorder.expected is not _NOTHING and recorder.expected_line == line:
        lines.append(f"expected: {plain_text(recorder.expected)}")
    if phase == "tests" and not isinstance(exc, AssertionError):
        message = " ".join(str(exc).split())[:MAX_VALUE_CHARS]
        lines.append(f"error: {type(exc).__name__}" + (f": {message}" if message else ""))
    return "\n".join(lines)[:MAX_CASE_CHARS]


def run_check(
    test_source: str, entry_point: str, prompt_source: str = "", report_cases: bool = False, *, workdir: str = "."
) -> tuple[bool, dict[str, Any]]:
    """Start the solution in a child and run the tests on it here: (passed, details of a failure).

    `passed` comes from this function's own control flow alone; the solution's code never runs in
    this process. prompt_source: run before the tests in their namespace (HumanEval's tests call its
    helpers). report_cases: describe a failing test (the "case" of the failure), for the search split.
    """
    prompt_code = compile(prompt_source, PROMPT_FILENAME, "exec")
    tests_code = compile_tests(test_source)
    recorder = CaseRecorder()
    candidate = CandidateProcess(workdir, entry_point)
    try:
        try:
            candidate.start()
        except SolutionError as exc:
            return False, _failure("import", exc)
        namespace: dict[str, Any] = {"__name__": "_hidden_tests", "__builtins__": builtins}
        try:
            exec(prompt_code, namespace)  # exec: the benchmark's own prompt: helpers such as poly()
            namespace[entry_point] = candidate  # a test that names the function means the candidate, as in HumanEval
            namespace.update(recorder.hooks())
            exec(tests_code, namespace)  # exec: the benchmark's own tests
            namespace["check"](candidate)
        except Exception as exc:  # noqa: BLE001 - any failure of the tests is a failed check
            phase = "solution" if isinstance(exc, SolutionError) else "tests"
            case = ""
            if report_cases:
                try:
                    case = describe_case(test_source, recorder, exc, phase)
                except Exception:  # noqa: BLE001 - a failure stays a failure even when it cannot be described
                    case = ""
            return False, _failure(phase, exc, case)
        return True, {}
    finally:
        candidate.stop()


def main(test_source: str, entry_point: str, prompt_source: str = "", report_cases: bool = False) -> int:
    """Check entry point inside the sandbox; returns the exit code (0 unless the driver itself breaks)."""
    make_undumpable()  # first: before the secret is in this process's memory
    become_subreaper()  # before the solution starts: whatever it orphans stays below this process
    workdir = os.getcwd()
    secret = _read_nonce(workdir)
    script = os.path.abspath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    if os.path.basename(script) == CHECK_FILE and os.path.exists(script):
        os.remove(script)  # it holds the tests
        # Imported already: the solution finds nothing of the check's next to it.
        shutil.rmtree(os.path.join(workdir, SOLUTION_PROCESS_FILE.partition("/")[0]), ignore_errors=True)
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != workdir]
    passed, details = run_check(test_source, entry_point, prompt_source, report_cases, workdir=workdir)
    kill_descendants()  # before the verdict is written: nothing of the solution's is left to rewrite it
    payload = {**details, "passed": passed, "salt": secret["salt"], "nonce": secret["nonce"] if passed else ""}
    tmp = os.path.join(workdir, f"{RESULT_FILE}.tmp{os.getpid()}")
    if os.path.lexists(tmp):
        os.remove(tmp)
    with open(tmp, "x", encoding="utf-8") as handle:  # "x": never through a link the solution planted
        handle.write(json.dumps(payload))
    os.replace(tmp, os.path.join(workdir, RESULT_FILE))
    return 0
