"""A second parent for crossover in bench/fm_efficacy.py: a HumanEval agent unlike the seed.

It asks for the function body only, then, when the reply does not compile as
part of the function, asks once more showing the error.
"""

import re
from collections.abc import Callable
from typing import Any

FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.DOTALL | re.IGNORECASE)


def solve(task: dict[str, Any], llm: Callable[..., str]) -> str:
    """The prompt completed with a body the FM wrote; one retry when it does not compile."""
    prompt = task["prompt"]
    request = (
        "Write only the body of this Python function (indented, no signature, no tests):\n"
        "```python\n" + prompt.rstrip() + "\n```"
    )
    code = prompt + _body(llm(request, max_tokens=384, temperature=0.0))
    try:
        compile(code, "<solution>", "exec")
    except SyntaxError as error:
        retry = request + f"\nYour last body did not compile ({error.msg}). Write it again."
        code = prompt + _body(llm(retry, max_tokens=384, temperature=0.0))
    return code


def _body(reply: str) -> str:
    blocks = [block for block in FENCE.findall(reply) if block.strip()]
    text = (blocks[0] if blocks else reply).strip("\n")
    lines = text.splitlines()
    if lines and lines[0].lstrip().startswith("def "):
        lines = lines[1:]
    if lines and not lines[0].startswith((" ", "\t")):
        lines = ["    " + line if line.strip() else line for line in lines]
    return "\n".join(lines) + "\n"
