"""A hand-written HumanEval agent's `solve`: the seed's answer, plus one repair round.

It runs the examples the task's docstring shows (`>>> f(x)` over its output, or `f(x) == y`, `=> y`,
`-> y`, `➞ y`) against its first answer in a child process; when one fails, it asks the FM again in
the same conversation with the failing example, what was expected and what it got, and keeps the
second answer only if it fails fewer examples.

bench/humaneval_ceiling.py assembles the agent: the seed agent's module with this `solve` in place of its
own, beside the seed's doc_examples.py. The imports below are for reading and linting.
"""

from collections.abc import Callable
from typing import Any

from doc_examples import docstring_examples, failing_examples

from cambrian.evaluators.humaneval.seed.agent import MAX_TOKENS, SYSTEM, extract_code


def solve(task: dict[str, Any], llm: Callable[..., str]) -> str:
    """The completed function's source for one HumanEval problem."""
    prompt = task["prompt"]
    request = "Complete this Python function:\n```python\n" + prompt.rstrip() + "\n```"
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": request}]
    reply = llm(messages, max_tokens=MAX_TOKENS, temperature=0.0)
    code = extract_code(reply, prompt, task["entry_point"])
    examples = docstring_examples(prompt, task["entry_point"])
    failures = failing_examples(code, examples)
    if not failures:
        return code
    call, expected, got = failures[0]
    messages += [
        {"role": "assistant", "content": reply},
        {
            "role": "user",
            "content": f"Your function is wrong for this example from the docstring:\n{call}\n"
            f"expected: {expected}\ngot: {got}\nFix it. Reply with the whole corrected function.",
        },
    ]
    second = extract_code(llm(messages, max_tokens=MAX_TOKENS, temperature=0.0), prompt, task["entry_point"])
    return second if len(failing_examples(second, examples)) < len(failures) else code
