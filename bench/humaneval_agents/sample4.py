"""A hand-written HumanEval agent's `solve`: up to four answers, the best kept.

The first answer at temperature 0 (the seed's), then up to three at 0.8, stopping at the first that
passes every example the task's docstring shows (`>>> f(x)` over its output, or `f(x) == y`, `=> y`,
`-> y`, `➞ y`; run in a child process); else the answer that failed the fewest.

bench/humaneval_ceiling.py assembles the agent: the seed agent's module with this `solve` in place of its
own, beside the seed's doc_examples.py. The imports below are for reading and linting.
"""

from collections.abc import Callable
from typing import Any

from doc_examples import docstring_examples, failing_examples

from evaluators.humaneval.seed.agent import MAX_TOKENS, SYSTEM, extract_code


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
