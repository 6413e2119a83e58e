"""The examples a HumanEval task's docstring shows, and which of them a candidate answer gets wrong (run in a
child process, so an answer that loops or exits cannot take the agent with it). Part of the seed agent: its
`solve` keeps the first of its SAMPLES answers that passes them."""

import ast
import json
import subprocess
import sys

SEPARATORS = ("==>", "==", "➞", "=>", "->", "# returns", "should return", "returns", "=")


def docstring_examples(prompt: str, entry_point: str) -> list[tuple[str, str]]:
    """(call, expected) pairs the docstring shows: `>>> call` over its output line, or `call ==|=>|->|➞ value`
    on one line; only calls with literal arguments and literal expected values."""
    lines = prompt.splitlines()
    pairs = []
    for i, line in enumerate(lines):
        text = line.strip().lstrip(">*- ").strip()
        if not text.startswith(entry_point + "("):
            continue
        depth, end = 0, -1
        for j, ch in enumerate(text):
            depth += ch in "([{"
            depth -= ch in ")]}"
            if depth == 0 and ch == ")":
                end = j
                break
        if end < 0:
            continue
        call, rest = text[: end + 1], text[end + 1 :].strip()
        for separator in SEPARATORS:
            if rest.startswith(separator):
                rest = rest[len(separator) :].strip()
                break
        else:
            if rest or i + 1 >= len(lines):
                continue
            rest = lines[i + 1].strip()
        rest = rest.rstrip(".").replace("true", "True").replace("false", "False")
        try:
            ast.literal_eval(
                "(" + call[len(entry_point) + 1 : -1] + ",)" if call[len(entry_point) + 1 : -1].strip() else "()"
            )
            ast.literal_eval(rest)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            continue
        pairs.append((call, rest))
    return pairs


CHECK = """
import sys, json
ns = {}
exec(sys.argv[1], ns)
out = []
for call, expected in json.loads(sys.argv[2]):
    try:
        got = eval(call, ns)
        ok = got == eval(expected, ns)
        out.append([ok, repr(got)])
    except Exception as exc:
        out.append([False, type(exc).__name__ + ": " + str(exc)[:200]])
print(json.dumps(out))
"""


def failing_examples(code: str, examples: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """The examples the code gets wrong, as (call, expected, what it gave), run in a child process."""
    if not examples:
        return []

    try:
        done = subprocess.run(
            [sys.executable, "-c", CHECK, code, json.dumps(examples)], capture_output=True, text=True, timeout=5
        )
        results = json.loads(done.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, OSError, ValueError, IndexError) as exc:  # a crash, a timeout, no output
        return [(examples[0][0], examples[0][1], f"the code did not run: {type(exc).__name__}")]
    return [(call, expected, got) for (call, expected), (ok, got) in zip(examples, results) if not ok]
