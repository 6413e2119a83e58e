"""A hand-written HumanEval agent (bench/humaneval_ceiling.py): up to four answers, the best kept.

The first answer at temperature 0 (the seed's), then up to three at 0.8, stopping at the first that
passes every example the task's docstring shows (`>>> f(x)` over its output, or `f(x) == y`, `=> y`,
`-> y`, `➞ y`; run in a child process); else the answer that failed the fewest.
"""

import ast
import json
import re
import subprocess
import sys
from collections.abc import Callable
from typing import Any

SYSTEM = (
    "You are an expert Python programmer. Complete the function the user gives you. "
    "Reply with the whole function, including its signature, in one ```python code block, "
    "using only the standard library. Do not write tests, examples or explanations."
)
FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
MAX_TOKENS = 512
# Top-level lines worth keeping: imports, definitions, decorators, assignments of names.
TOP_LEVEL = re.compile(r"(?:import |from \S+ import |def |async def |class |@|[A-Za-z_]\w*\s*(?::[^=]+)?=[^=])")


def solve(task: dict[str, Any], llm: Callable[..., str]) -> str:
    """The completed function's source for one HumanEval problem."""
    prompt = task["prompt"]
    request = "Complete this Python function:\n```python\n" + prompt.rstrip() + "\n```"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": request}]
    examples = docstring_examples(prompt, task["entry_point"])
    best, best_failures = "", None
    for attempt in range(4):
        reply = llm(messages, max_tokens=MAX_TOKENS, temperature=0.0 if attempt == 0 else 0.8)
        code = extract_code(reply, prompt, task["entry_point"])
        failures = len(failing_examples(code, examples))
        if best_failures is None or failures < best_failures:
            best, best_failures = code, failures
        if failures == 0:
            break
    return best


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


def extract_code(reply: str, prompt: str, entry_point: str) -> str:
    """Code for entry_point from an FM reply: a fenced block (or the raw reply) defining it, trimmed to
    its imports, definitions and decorators; else the prompt with the reply appended as the body."""
    blocks = [block for block in FENCE.findall(reply) if block.strip()] or [reply]
    definition = re.compile(r"^def\s+" + re.escape(entry_point) + r"\s*\(", re.MULTILINE)
    for block in blocks:
        if definition.search(block):
            return _top_level_code(block)
    return prompt + _as_body(blocks[0])


def _top_level_code(code: str) -> str:
    """Keep imports, constants, decorators, definitions and their indented lines; drop prose, prints and
    example calls at top level, which would run (or fail to parse) when the tests import the code."""
    kept = []
    keeping = False
    for line in code.splitlines():
        if not line.strip():
            kept.append(line)
        elif line[0] in " \t":
            if keeping:
                kept.append(line)
        else:
            keeping = bool(TOP_LEVEL.match(line))
            if keeping:
                kept.append(line)
    return "\n".join(kept).strip() + "\n"


def _as_body(text: str) -> str:
    """The reply as a function body: every line indented by four spaces unless it already is."""
    lines = text.strip("\n").splitlines()
    if lines and all(not line.strip() or line[0] in " \t" for line in lines):
        return "\n".join(lines) + "\n"
    return "\n".join("    " + line if line.strip() else line for line in lines) + "\n"
