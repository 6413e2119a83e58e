"""Seed HumanEval agent: one direct FM call, then careful extraction of the function's code.

Uses only the standard library (numpy and scipy are importable too) and doc_examples.py beside it.
`solve(task, llm)` returns the complete source of
task["entry_point"] (with the imports and helpers the reply wrote), or, when the
reply holds no such definition, the prompt followed by the reply as its body.
"""

import re
from collections.abc import Callable
from typing import Any

from doc_examples import docstring_examples, failing_examples

SYSTEM = (
    "You are an expert Python programmer. Complete the function the user gives you. "
    "Reply with the whole function, including its signature, in one ```python code block, "
    "using only the standard library. Do not write tests, examples or explanations."
)
FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)
MAX_TOKENS = 512
# Answers drawn per problem: the first at temperature 0, the rest at TEMPERATURE; the first answer that
# passes every example of the docstring is kept, else the one that fails fewest.
SAMPLES = 1
TEMPERATURE = 0.8
# Top-level lines worth keeping: imports, definitions, decorators, assignments of names.
TOP_LEVEL = re.compile(r"(?:import |from \S+ import |def |async def |class |@|[A-Za-z_]\w*\s*(?::[^=]+)?=[^=])")


def solve(task: dict[str, Any], llm: Callable[..., str]) -> str:
    """The completed function's source for one HumanEval problem."""
    prompt = task["prompt"]
    request = "Complete this Python function:\n```python\n" + prompt.rstrip() + "\n```"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": request}]
    examples = docstring_examples(prompt, task["entry_point"]) if SAMPLES > 1 else []
    best, fewest = "", -1
    for attempt in range(SAMPLES):
        temperature = 0.0 if attempt == 0 else TEMPERATURE
        reply = llm(messages, max_tokens=MAX_TOKENS, temperature=temperature, seed=attempt)
        code = extract_code(reply, prompt, task["entry_point"])
        failures = len(failing_examples(code, examples))
        if fewest < 0 or failures < fewest:
            best, fewest = code, failures
        if failures == 0:
            break
    return best


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
