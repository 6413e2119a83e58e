"""The HumanEval check run inside the sandbox: import the solution, run the hidden tests, write a verdict.

Standard library only. The host copies this file into a FRESH sandbox run, after
the agent's own run has ended, as `_check.py`, followed by lines that set
TEST_SOURCE (the problem's `test`, defining `check(candidate)`), ENTRY_POINT,
PROMPT_SOURCE (the problem's prompt: the helpers some tests call, e.g. `poly`),
REPORT_CASES and call `sys.exit(main(...))`. Next to it: `solution.py` (the
program the agent returned, assembled on the host) and `_nonce.json`
({"salt", "nonce"}, fresh for every check run).

Order matters:
1. read `_nonce.json` and delete it, so the solution cannot find it on disk
   (a file rather than an environment variable: /proc/self/environ keeps a
   process's initial environment even after os.environ forgets it);
2. compile the prompt and the tests (instrumented, see below) BEFORE the
   solution's code runs, so the solution cannot tamper with the compiler;
3. import `solution` (its import-time code runs here);
4. run the prompt and then the tests in a namespace of their own, so the
   solution cannot have replaced `check` or the prompt's helpers; the entry
   point's name there is the candidate, as in HumanEval's own harness;
   call `check(candidate)`;
5. only then write result.json {"passed": true, "salt", "nonce"} (on a failure: "passed": false,
   "phase", "error_type", for the solution's own errors "error" and its "traceback" lines, and
   with REPORT_CASES a "case": plain text naming the failing check).

The failing case: every `candidate(...)` call of the tests goes through a
recorder that notes the call's arguments (as text, before the call) and what it
returned or raised; in `assert <call> == <expected>` (or `is`) the expected
side is noted too. Nothing the tests compute changes, nor its order. On a
failure the driver writes, as truncated plain text it makes itself, the failing
statement of the tests, the last call with its arguments and result, the
expected value and any non-assertion error. Only exact built-in values (None,
bool, int, float, complex, str, bytes and lists, tuples, sets and dicts of
them) are written out; any other object appears as its type's name, so no
code of the solution runs to make this text. The host asks for cases only on
the search split.

The host accepts a pass only with the right nonce, so a solution that exits
early (sys.exit, os._exit), prints "PASS" or writes its own result.json does
not pass. Limits said plainly: the solution runs in this process, so code
written to dig through the interpreter's memory (frames, gc) could find the
nonce; the nonce stops the cheap cheats, the sandbox contains the rest.
"""

from __future__ import annotations

import ast
import builtins
import itertools
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
PROMPT_FILENAME = "<prompt>"
MAX_ERROR_CHARS = 1000
MAX_TRACEBACK_CHARS = 2000
MAX_CASE_CHARS = 600  # the whole failing-case text
MAX_VALUE_CHARS = 150  # one value's text within it
MAX_STATEMENT_CHARS = 200  # the failing statement's source within it
CANDIDATE = "candidate"  # the parameter name of HumanEval's check(candidate)
CALL_HOOK = "_cambrian_call"  # names the instrumented tests use for the recorder
EXPECT_HOOK = "_cambrian_expect"
BEGIN_HOOK = "_cambrian_begin"
_NOTHING = object()


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


def _failure(phase: str, exc: BaseException, case: str = "") -> dict[str, Any]:
    """phase: "import" (solution.py did not import), "solution" (the solution raised during the tests)
    or "tests" (the tests' own assertion or operation failed: its message may hold expected values).
    case: the failing-case text (empty unless the host asked for it)."""
    failure = {"phase": phase, "error_type": type(exc).__name__, "error": "", "traceback": ""}
    if phase != "tests":
        failure["error"] = str(exc)[:MAX_ERROR_CHARS]
        failure["traceback"] = _solution_traceback(exc)
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
        open_, close = {list: "[]", tuple: "()", set: "{}", frozenset: "{}", dict: "{}"}[kind]
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
            self.raised = type(exc).__name__
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
        begin = ast.Expr(value=ast.Call(
            func=ast.Name(id=BEGIN_HOOK, ctx=ast.Load()), args=[ast.Constant(node.lineno)], keywords=[]
        ))
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
        node for node in ast.walk(ast.parse(test_source))
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
    test_source: str, entry_point: str, prompt_source: str = "", report_cases: bool = False
) -> tuple[bool, dict[str, Any]]:
    """Import the solution and run the tests on it: (passed, details of a failure).

    `passed` comes from this function's own control flow alone, and everything the tests need is
    taken before the solution's import-time code runs: a solution that patches builtins, this
    module's helpers or the json module cannot turn a failure into a pass.
    prompt_source: run before the tests in their namespace (HumanEval's tests call its helpers).
    report_cases: describe a failing test (the "case" of the failure), for the search split.
    """
    clean_builtins = dict(builtins.__dict__)
    exec_, getattr_, callable_ = exec, getattr, callable
    describe, failure, raised_in_solution = describe_case, _failure, _raised_in_solution
    prompt_code = compile(prompt_source, PROMPT_FILENAME, "exec")
    tests_code = compile_tests(test_source)
    recorder = CaseRecorder()
    try:
        module = __import__(SOLUTION_MODULE)
    # The solution's code may raise anything at import, SystemExit included: all of it is a failure.
    except BaseException as exc:  # noqa: BLE001
        return False, failure("import", exc)
    candidate = getattr_(module, entry_point, None)
    if not callable_(candidate):
        return False, {"phase": "import", "error_type": "NameError",
                       "error": f"solution.py defines no function {entry_point!r}", "traceback": ""}
    # The tests see the builtins as they were before the solution ran.
    namespace: dict[str, Any] = {"__name__": "_hidden_tests", "__builtins__": clean_builtins}
    try:
        exec_(prompt_code, namespace)  # noqa: S102 - the benchmark's own prompt: helpers such as poly()
        namespace[entry_point] = candidate  # a test that names the function means the candidate, as in HumanEval
        namespace.update(recorder.hooks())
        exec_(tests_code, namespace)  # noqa: S102 - the benchmark's own tests
        namespace["check"](candidate)
    except BaseException as exc:  # noqa: BLE001
        phase = "solution" if raised_in_solution(exc) else "tests"
        case = ""
        if report_cases:
            try:
                case = describe(test_source, recorder, exc, phase)
            except Exception:  # noqa: BLE001 - a failure stays a failure even when it cannot be described
                case = ""
        return False, failure(phase, exc, case)
    return True, {}


def main(test_source: str, entry_point: str, prompt_source: str = "", report_cases: bool = False) -> int:
    """Check entry point inside the sandbox; returns the exit code (0 unless the driver itself breaks)."""
    workdir = os.getcwd()  # captured first: the solution may change directory
    secret = _read_nonce(workdir)
    dumps, replace, open_ = json.dumps, os.replace, open  # taken before the solution can patch them
    sys.path.insert(0, workdir)
    passed, details = run_check(test_source, entry_point, prompt_source, report_cases)
    payload = {**details, "passed": passed, "salt": secret["salt"], "nonce": secret["nonce"] if passed else ""}
    tmp = os.path.join(workdir, f"{RESULT_FILE}.tmp{os.getpid()}")
    with open_(tmp, "w", encoding="utf-8") as handle:
        handle.write(dumps(payload))
    replace(tmp, os.path.join(workdir, RESULT_FILE))
    return 0
