"""FM replies as small models write them: fences, prose and truncation never reach the program.

Each reply is turned into a child of the circle-packing seed by the operators' own `apply`; a reply
either yields a program that parses and holds no fence or prose line, or is refused with a reason.
"""

from __future__ import annotations

import ast
import random

import pytest

from cambrian.evaluators.circle_packing.benchmark import CirclePacking
from cambrian.meta_agent.edits import EditError, extract_code, trim_prose
from cambrian.meta_agent.operators import DiffOperator, RewriteOperator

SEED = CirclePacking(start="grid").seed()
TEXT = SEED.files["packing.py"]
SEARCH = "    radius = 0.5 / max(columns, rows)\n"
REPLACE = "    radius = 0.5 / max(columns, rows) * 0.999\n"
BLOCK = f"<<<<<<< SEARCH\n{SEARCH}=======\n{REPLACE}>>>>>>> REPLACE\n"
REGION = TEXT[TEXT.index("import math") : TEXT.index("# EVOLVE-BLOCK-END")].rstrip() + "\n"
NEW_REGION = REGION.replace("0.5 / max(columns, rows)", "0.49 / max(columns, rows)")
PROSE = [
    "Here is the improved program:",
    "This change makes the circles slightly smaller so that they never touch.",
    "**Explanation**",
    "- The radius is reduced.",
    "1. Compute the grid.",
    "Note: the rest of the file is unchanged.",
    "I hope this helps!",
]
FENCES = ["```", "```python", "```py", "~~~", "````python"]


def _clean(child_text: str) -> None:
    ast.parse(child_text)
    for line in child_text.splitlines():
        assert not line.strip().startswith(("```", "~~~")), f"a fence reached the program: {line!r}"
        assert line.strip() not in PROSE, f"prose reached the program: {line!r}"


@pytest.mark.parametrize(
    "reply",
    [
        BLOCK,
        f"```python\n{BLOCK}```\n",
        f"Here is the change:\n\n```\n{BLOCK}```\nThis makes the radius smaller.\n",
        f"<<<<<<< SEARCH\n```python\n{SEARCH}```\n=======\n```python\n{REPLACE}```\n>>>>>>> REPLACE\n",
        f"<<<<<<< SEARCH\n{SEARCH}=======\n```python\n{REPLACE}>>>>>>> REPLACE\n",  # fence opened, never closed
        f"<<<<<<< SEARCH\n{SEARCH}=======\n{REPLACE}```\n>>>>>>> REPLACE\n",  # closing fence alone
        f"packing.py\n```python\n{BLOCK}```",
        f"### packing.py\n{BLOCK}\nDone.",
    ],
)
def test_diff_replies_with_fences_and_prose_apply_cleanly(reply: str) -> None:
    child = DiffOperator().apply(SEED, reply)
    _clean(child.files["packing.py"])
    assert "* 0.999" in child.files["packing.py"]


@pytest.mark.parametrize(
    ("reply", "reason"),
    [
        (f"<<<<<<< SEARCH\n{SEARCH}=======\n{REPLACE}", "missing its >>>>>>> REPLACE"),  # truncated at the end
        (f"<<<<<<< SEARCH\n{SEARCH}", "missing its ======="),
        (f"{BLOCK}<<<<<<< SEARCH\n{SEARCH}=======\n", "block 2 is missing"),
        ("I would make the circles bigger.", "no SEARCH/REPLACE block"),
        (f"=======\n{REPLACE}>>>>>>> REPLACE\n", "no <<<<<<< SEARCH"),
    ],
)
def test_truncated_or_missing_blocks_are_refused_with_a_reason(reply: str, reason: str) -> None:
    with pytest.raises(EditError, match=reason):
        DiffOperator().apply(SEED, reply)


@pytest.mark.parametrize(
    "reply",
    [
        f"```python\n{NEW_REGION}```",
        f"Here is the improved program:\n```python\n{NEW_REGION}```\nThis change makes the circles smaller.",
        f"```python\n```python\n{NEW_REGION}```",  # opened twice
        f"```python\n{NEW_REGION}",  # never closed
        f"```python\n{NEW_REGION}\nThis change makes the circles slightly smaller so that they never touch.\n",
        f"Here is the improved program:\n\n{NEW_REGION}\nI hope this helps!",  # no fence at all
        f"```python\n{TEXT.replace('0.5 / max(columns, rows)', '0.49 / max(columns, rows)')}```",  # whole file
    ],
)
def test_rewrite_replies_with_fences_and_prose_apply_cleanly(reply: str) -> None:
    child = RewriteOperator().apply(SEED, reply)
    _clean(child.files["packing.py"])
    assert "0.49 / max(columns, rows)" in child.files["packing.py"]
    assert child.files["packing.py"].startswith(TEXT[: TEXT.index("# EVOLVE-BLOCK-START")])


def test_trim_prose_never_drops_code_or_comments() -> None:
    broken = "def f(:\n    return 1\nThis is prose.\n"
    assert trim_prose(broken) == broken  # a real syntax error stays, to be refused
    code = "# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\nThis code sets x to one.\n"
    assert trim_prose(code) == "# EVOLVE-BLOCK-START\nx = 1\n# EVOLVE-BLOCK-END\n"
    assert extract_code("Sure! Here you go:\nimport math\nx = math.pi\n") == "import math\nx = math.pi\n"


def _mangle(rng: random.Random, reply: str, junk: list[str]) -> str:
    """The reply with lines of `junk` put at random places between its lines."""
    lines = reply.splitlines()
    for _ in range(rng.randint(1, 4)):
        lines.insert(rng.randint(0, len(lines)), rng.choice(junk))
    return "\n".join(lines) + ("\n" if rng.random() < 0.5 else "")


@pytest.mark.parametrize("operator", [DiffOperator(), RewriteOperator()], ids=["diff", "rewrite"])
def test_fuzzed_replies_yield_clean_programs_or_reasons(operator: object) -> None:
    rng = random.Random(0)
    good = BLOCK if isinstance(operator, DiffOperator) else f"```python\n{NEW_REGION}```\n"
    for _ in range(300):  # fences anywhere: never code, always dropped, the edit always applies
        child = operator.apply(SEED, _mangle(rng, good, FENCES))  # type: ignore[attr-defined]
        _clean(child.files["packing.py"])
    refused = 0
    for _ in range(300):  # prose and fences anywhere: a clean program, or a refusal that says why
        reply = _mangle(rng, good, FENCES + PROSE)
        try:
            child = operator.apply(SEED, reply)  # type: ignore[attr-defined]
        except EditError as error:
            refused += 1
            assert str(error) and error.fix
            continue
        _clean(child.files["packing.py"])
    assert refused < 300
