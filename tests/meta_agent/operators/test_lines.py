"""The `lines` and `knob` operators: which lines they ask for, on seeds of every shape, and how the reply
is applied; `cannot_edit`, the check every operator answers before a proposal spends an FM call.

Tests named `_fake_fm` apply scripted replies (exact texts are needed to check the splice).
"""

from __future__ import annotations

import asyncio
import contextlib

import numpy as np
import pytest

from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing.benchmark import CirclePacking
from cambrian.evaluators.humaneval import HumanEval
from cambrian.evaluators.programs import Knapsack
from cambrian.evaluators.runner import evaluate_agent
from cambrian.meta_agent.edits import EditError
from cambrian.meta_agent.operators import (
    Focus,
    KnobOperator,
    LinesOperator,
    ParentInfo,
    PromptContext,
    changed_lines_grammar,
    make_operator,
    operator_names,
)
from cambrian.meta_agent.testing import ContractEnv
from cambrian.sandbox.local import LocalSandbox

ONE_RETURN = '''\
"""How early an item goes in."""


# EVOLVE-BLOCK-START
def priority(value: float, weight: float) -> float:
    """Higher goes first."""
    return value


# EVOLVE-BLOCK-END
'''

KINDS = """\
import math

# EVOLVE-BLOCK-START
def score(items, limit):
    total = 0
    for item in items:
        if item > limit:
            continue
        total += item
    while total > limit:
        total -= 1
    assert total >= 0
    return math.sqrt(total)
# EVOLVE-BLOCK-END
"""


def genome(text: str, entry: str = "p.py", **more: str) -> Genome:
    return Genome(files={entry: text, **more}, entry=entry)


def texts(found: list[Focus]) -> list[str]:
    return [focus.text.strip() for focus in found]


def test_a_one_return_seed_offers_its_return_line() -> None:
    found = LinesOperator().windows(genome(ONE_RETURN))
    assert texts(found) == ["return value"]
    assert LinesOperator().cannot_edit(genome(ONE_RETURN)) is None
    assert KnobOperator().windows(genome(ONE_RETURN)) == found  # no knob: lines' windows


def test_every_statement_kind_is_drawn_headers_whole_compounds_and_returns() -> None:
    shown = texts(LinesOperator().windows(genome(KINDS)))
    for expected in (
        "return math.sqrt(total)",  # a return
        "if item > limit:",  # a condition's header, its body kept
        "for item in items:",  # a loop's header
        "while total > limit:",
        "assert total >= 0",
        "total += item",
        "total = 0",
    ):
        assert expected in shown, expected
    whole_if = "if item > limit:\n            continue"
    assert any(text.replace(" ", "") == whole_if.replace(" ", "") for text in shown)  # a short compound, whole
    assert not any(text.startswith(("def ", "import ")) for text in shown)
    # The import outside the block is never a window; nothing spans the markers.
    lines = KINDS.splitlines()
    for focus in LinesOperator().windows(genome(KINDS)):
        assert 3 <= focus.start < focus.end <= len(lines) - 1
        assert "\n".join(lines[focus.start : focus.end]).rstrip() == focus.text


def test_the_draw_is_seeded_and_covers_the_circle_packing_seed() -> None:
    operator = make_operator("lines")
    parent = CirclePacking().seed()
    picks = [operator.pick(parent, np.random.default_rng(k)) for k in range(60)]
    assert picks[:5] == [operator.pick(parent, np.random.default_rng(k)) for k in range(5)]
    assert len({pick for pick in picks}) > 10
    region = parent.files["packing.py"].split("# EVOLVE-BLOCK-START\n")[1].split("# EVOLVE-BLOCK-END")[0]
    for focus in picks:
        assert focus is not None and focus.path == "packing.py" and focus.text in region


def test_a_header_rewrite_keeps_the_body_fake_fm() -> None:
    parent = genome(KINDS)
    header = next(f for f in LinesOperator().windows(parent) if f.text.strip() == "if item > limit:")
    child = LinesOperator().apply(parent, "```python\nif item >= limit:\n```", focus=header)
    assert "        if item >= limit:\n            continue\n" in child.files["p.py"]


def test_a_two_file_genome_offers_lines_of_both_marked_files_fake_fm() -> None:
    order = "# EVOLVE-BLOCK-START\ndef vertex_order(n):\n    return list(range(n))\n# EVOLVE-BLOCK-END\n"
    main = "from order import vertex_order\n\n# EVOLVE-BLOCK-START\ndef colour(n):\n    return vertex_order(n)\n"
    parent = genome(main + "# EVOLVE-BLOCK-END\n", entry="main.py", **{"order.py": order, "notes.py": "X = 1\n"})
    found = LinesOperator().windows(parent)
    assert {focus.path for focus in found} == {"main.py", "order.py"}  # notes.py has no markers: not editable
    other = next(f for f in found if f.path == "order.py")
    child = LinesOperator().apply(parent, "```python\nreturn sorted(range(n), reverse=True)\n```", focus=other)
    assert "    return sorted(range(n), reverse=True)\n" in child.files["order.py"]
    assert child.files["main.py"] == parent.files["main.py"] and child.entry == "main.py"
    prompt = LinesOperator().messages(context(parent, focus=other))[-1]["content"]
    assert "Rewrite only these lines of order.py" in prompt


def test_the_knapsack_seed_improves_through_its_return_line_fake_fm() -> None:
    benchmark = Knapsack()
    parent = benchmark.seed()
    (focus,) = LinesOperator().windows(parent)
    child = LinesOperator().apply(parent, "```python\nreturn value / weight\n```", focus=focus)
    sandbox = LocalSandbox()
    try:
        assert evaluate_agent(benchmark, child, sandbox).score > evaluate_agent(benchmark, parent, sandbox).score
    finally:
        sandbox.close()


def test_lines_operator_asks_for_the_named_lines_and_applies_the_code_fake_fm() -> None:
    operator = LinesOperator()
    parent = CirclePacking().seed()
    focus = Focus.find(parent, "        distance = 0.35 * ring")
    ctx = context(parent, focus=focus, idea="tune the numbers", contract="pack circles")
    prompt = operator.messages(ctx)[-1]["content"]
    asked = "Rewrite only these lines of packing.py so that the program scores higher:"
    assert f"{asked}\n```python\n{focus.text}\n```" in prompt
    assert "pack circles" in prompt and "ring_centres" in prompt
    assert "tune the numbers" not in prompt  # an idea is a move of the whole program, not of a few lines
    assert operator.grammar(ctx) == changed_lines_grammar(focus.text)  # one block, not the old lines again
    improved = parent.files["packing.py"].replace("0.35 * ring", "0.25 * ring")
    for reply in ("```python\n        distance = 0.25 * ring\n```", "```python\ndistance = 0.25 * ring\n```"):
        child = operator.apply(parent, reply, focus=focus)  # the lost indentation comes back
        assert child.files["packing.py"] == improved
    assert operator.apply(parent, "```python\ndistance = 0.25 * ring\n```", focus=focus.text) == child  # by text
    with pytest.raises(EditError, match="no new lines"):
        operator.apply(parent, "```python\n```", focus=focus)
    with pytest.raises(EditError, match="unchanged"):
        operator.apply(parent, f"```python\n{focus.text}\n```", focus=focus)
    with pytest.raises(EditError, match="not valid Python"):
        operator.apply(parent, "```python\n        distance = = 1\n```", focus=focus)
    # New lines may not move the editable region: a marker copied into them is dropped, never written.
    moved = operator.apply(parent, "```python\n# EVOLVE-BLOCK-END\n        distance = 0.25 * ring\n```", focus=focus)
    assert moved.files["packing.py"] == improved
    with pytest.raises(EditError, match="only EVOLVE-BLOCK markers"):
        operator.apply(parent, "```python\n# EVOLVE-BLOCK-END\n```", focus=focus)
    # Nor does a comment about the block copied from the prompt reach the program.
    wrapped = "```python\n# EVOLVE-BLOCK\n        distance = 0.25 * ring\n# EVOLVE-BLOCK\n```"
    assert operator.apply(parent, wrapped, focus=focus).files["packing.py"] == improved
    # A focus of another parent is refused by name, not spliced somewhere else.
    stale = Focus(path="packing.py", start=focus.start + 1, end=focus.end + 1, text=focus.text)
    with pytest.raises(EditError, match="not lines"):
        operator.apply(parent, "```python\ndistance = 0.25 * ring\n```", focus=stale)


def test_knob_operator_picks_one_module_level_number_assignment_else_the_lines_draw() -> None:
    operator = make_operator("knob")
    assert isinstance(operator, KnobOperator) and isinstance(operator, LinesOperator) and operator.uses_fm
    agent = HumanEval().seed()
    picks = {operator.pick(agent, np.random.default_rng(k)).text for k in range(60)}  # type: ignore[union-attr]
    assert picks == {"MAX_TOKENS = 512", "SAMPLES = 1", "TEMPERATURE = 0.8"}  # not SYSTEM, FENCE, TOP_LEVEL
    text = (
        "LIMIT = 3\n# EVOLVE-BLOCK-START\nSTEP: float = -0.05\nVERBOSE = True\nNAME = 'x'\nA, B = 1, 2\n"
        "def f():\n    best = 0\n    return best\n# EVOLVE-BLOCK-END\n"
    )
    assert set(texts(operator.windows(genome(text)))) == {"STEP: float = -0.05", "VERBOSE = True"}
    rings = CirclePacking().seed()  # sets its numbers inside functions: no knob, the lines operator's draw
    for k in range(5):
        assert operator.pick(rings, np.random.default_rng(k)) == LinesOperator().pick(rings, np.random.default_rng(k))


@pytest.mark.parametrize(
    ("text", "able"),
    [
        (ONE_RETURN, {"lines", "knob", "diff", "rewrite", "crossover", "diagnose"}),  # ast_mutate: no number
        ("# EVOLVE-BLOCK-START\n\n# EVOLVE-BLOCK-END\ndef f():\n    return 1\n", {"rewrite", "crossover", "diagnose"}),
        (KINDS, {"lines", "knob", "diff", "rewrite", "crossover", "diagnose", "ast_mutate"}),
    ],
)
def test_cannot_edit_says_which_operators_can_try_a_program(text: str, able: set[str]) -> None:
    parent = genome(text)
    names = [name for name in operator_names() if name != "self_modify"]
    answers = {name: make_operator(name).cannot_edit(parent) for name in names}
    assert {name for name, reason in answers.items() if reason is None} == able
    for name, reason in answers.items():
        if reason is not None:
            assert reason.startswith(name) and "needs" in reason  # the cause, in the operator's own name
    bare = context(parent)
    if "lines" not in able:
        with pytest.raises(EditError, match="lines needs a statement"):
            LinesOperator().messages(bare)


class IdeaEnv(ContractEnv):
    """A ContractEnv whose benchmark has an idea to give, counting the proposals that draw it."""

    IDEA = "place circles one at a time, each where the largest possible circle fits"
    drawn = 0

    def idea(self) -> str | None:
        self.drawn += 1
        return self.IDEA


@pytest.mark.parametrize("name", ["lines", "knob", "diff", "rewrite"])
def test_only_whole_program_operators_are_given_an_idea_fake_fm(name: str) -> None:
    """An idea is a move of the whole program: a line edit asked to make one broke the program (the lines
    it was given no longer defined the names the rest read), so `lines` and `knob` draw none."""
    parent = CirclePacking().seed()
    env = IdeaEnv(parent, reply=lambda messages, genome: "no usable reply", repair_rounds=0)
    with contextlib.suppress(EditError):  # the reply is beside the point: the prompt is what the test reads
        asyncio.run(make_operator(name).propose(context(parent), env))
    (_, messages), *_ = env.calls
    whole_program = name in ("diff", "rewrite")
    assert env.drawn == int(whole_program)
    assert (IdeaEnv.IDEA in messages[-1]["content"]) == whole_program


def context(parent: Genome, **values: object) -> PromptContext:
    contract = str(values.pop("contract", "c"))
    info = ParentInfo(agent_id=1, genome=parent, score=1.0, feedback=None)
    return PromptContext(contract=contract, benchmark="b", parent=info, **values)  # type: ignore[arg-type]


def test_whole_region_operators_cannot_edit_a_region_longer_than_a_reply() -> None:
    from cambrian.evaluators.programs import StripPacking
    from cambrian.meta_agent.operators import PromptLimits

    long_seed = StripPacking().seed()  # about 300 lines in its EVOLVE-BLOCK
    for name in ("rewrite", "crossover"):
        reason = make_operator(name).cannot_edit(long_seed)
        assert reason is not None and "fm.max_tokens = 1024" in reason and "packer.py" in reason
        assert make_operator(name, limits=PromptLimits(max_reply_tokens=8192)).cannot_edit(long_seed) is None
    assert make_operator("rewrite").cannot_edit(genome(ONE_RETURN)) is None
    assert make_operator("lines").cannot_edit(long_seed) is None
    assert make_operator("diff").cannot_edit(long_seed) is None


def test_new_lines_are_placed_at_the_old_lines_indentation_fake_fm() -> None:
    # Measured: replies 4 spaces too deep or too shallow, their own relative indentation right, were refused.
    parent = genome(KINDS)
    focus = next(f for f in LinesOperator().windows(parent) if f.text == "        total += item")
    for reply in ("            total += 2 * item", "    total += 2 * item", "total += 2 * item"):
        child = LinesOperator().apply(parent, f"```python\n{reply}\n```", focus=focus)
        assert "\n        total += 2 * item\n" in child.files["p.py"], reply
    nested = "if item > 1:\n    total += item\nelse:\n    total -= 1"  # a block, at no indentation
    child = LinesOperator().apply(parent, f"```python\n{nested}\n```", focus=focus)
    assert (
        "\n        if item > 1:\n            total += item\n        else:\n            total -= 1\n"
        in child.files["p.py"]
    )
    copied = "total += item\n        total += 1"  # the first line copied without its indentation
    child = LinesOperator().apply(parent, f"```python\n{copied}\n```", focus=focus)
    assert "\n        total += item\n        total += 1\n" in child.files["p.py"]


TOUR = '''\
"""The order of a tour."""


# EVOLVE-BLOCK-START
def tour(points: list[list[float]]) -> list[int]:
    """A permutation of range(len(points))."""
    return list(range(len(points)))


# EVOLVE-BLOCK-END
'''


def test_a_reply_that_defines_the_function_anew_replaces_it_fake_fm() -> None:
    # Measured (qwen2.5-coder-1.5b, the suite's TSP seed): asked for the `return` line, the model wrote the
    # whole function, imports first. Placed at the line, it nested a second `tour` in the first, which
    # returned None; it replaces the function now.
    parent = genome(TOUR)
    (focus,) = LinesOperator().windows(parent)
    whole = (
        "import random\n\n"
        "def tour(points: list[list[float]]) -> list[int]:\n"
        '    """Visit them at random."""\n'
        "    return random.sample(range(len(points)), len(points))"
    )
    child = LinesOperator().apply(parent, f"```python\n{whole}\n```", focus=focus)
    assert child.files["p.py"] == TOUR.replace(
        'def tour(points: list[list[float]]) -> list[int]:\n    """A permutation of range(len(points))."""\n'
        "    return list(range(len(points)))\n",
        whole + "\n",
    )
    indented = "\n".join("    " + line if line else "" for line in whole.splitlines())  # at the line's indentation
    assert LinesOperator().apply(parent, f"```python\n{indented}\n```", focus=focus) == child
    # A definition of another name is new code at the lines, as before.
    helper = "def order(points):\n    return list(range(len(points)))\nreturn order(points)"
    child = LinesOperator().apply(parent, f"```python\n{helper}\n```", focus=focus)
    assert (
        "\n    def order(points):\n        return list(range(len(points)))\n    return order(points)\n"
        in (child.files["p.py"])
    )


def test_a_method_defined_anew_keeps_its_class_and_a_function_outside_the_region_stays_fake_fm() -> None:
    text = (
        "# EVOLVE-BLOCK-START\nclass Balancer:\n    def pick(self, loads):\n        return 0\n\n"
        "    def other(self):\n        return 1\n# EVOLVE-BLOCK-END\n"
    )
    parent = genome(text)
    focus = Focus.find(parent, "        return 0")
    reply = "def pick(self, loads):\n    return loads.index(min(loads))"
    child = LinesOperator().apply(parent, f"```python\n{reply}\n```", focus=focus)
    assert child.files["p.py"] == text.replace("        return 0\n", "        return loads.index(min(loads))\n")
    # The function starts above the editable region: the reply is placed at the lines, as before (nested).
    outside = "def tour(points):\n    # EVOLVE-BLOCK-START\n    return []\n    # EVOLVE-BLOCK-END\n"
    parent = genome(outside)
    focus = Focus.find(parent, "    return []")
    child = LinesOperator().apply(parent, "```python\ndef tour(points):\n    return [0]\n```", focus=focus)
    assert "\n    def tour(points):\n        return [0]\n" in child.files["p.py"]


def test_a_reply_to_a_header_that_brings_a_body_replaces_the_statement_or_its_body_fake_fm() -> None:
    # Measured (fast primes, qwen2.5-coder-1.5b): asked for `while d * d <= k:`, the model wrote the loop, or
    # only its body; placed at the header, above the old body, neither parsed.
    parent = genome(KINDS)
    focus = Focus.find(parent, "    while total > limit:")
    loop = "while total > 2 * limit:\n    total //= 2"  # a header with its own body: the whole statement
    child = LinesOperator().apply(parent, f"```python\n{loop}\n```", focus=focus)
    assert "\n    while total > 2 * limit:\n        total //= 2\n    assert total >= 0\n" in child.files["p.py"]
    assert "total -= 1" not in child.files["p.py"]
    body = "total -= 2"  # a body: it goes under the old header
    child = LinesOperator().apply(parent, f"```python\n{body}\n```", focus=focus)
    assert "\n    while total > limit:\n        total -= 2\n    assert total >= 0\n" in child.files["p.py"]
    header = "while total >= limit:"  # what was asked: the header, its body kept
    child = LinesOperator().apply(parent, f"```python\n{header}\n```", focus=focus)
    assert "\n    while total >= limit:\n        total -= 1\n" in child.files["p.py"]


def test_a_loop_restated_without_an_else_keeps_the_old_else_fake_fm() -> None:
    # Fast primes' seed counts a prime in its `while` loop's `else`: a reply that rewrote only the loop keeps it.
    text = (
        "# EVOLVE-BLOCK-START\ndef f(k):\n    d = 3\n    while d * d <= k:\n        if k % d == 0:\n            break\n"
    )
    text += "        d += 2\n    else:\n        return 1\n    return 0\n# EVOLVE-BLOCK-END\n"
    parent = genome(text)
    focus = Focus.find(parent, "    while d * d <= k:")
    child = LinesOperator().apply(
        parent, "```python\nwhile d * d <= k:\n    if k % d == 0:\n        break\n    d += 1\n```", focus=focus
    )
    assert child.files["p.py"] == text.replace("        d += 2\n", "        d += 1\n")
    with_else = "while d <= k:\n    d += 1\nelse:\n    return 2"  # its own else replaces the old one
    child = LinesOperator().apply(parent, f"```python\n{with_else}\n```", focus=focus)
    assert "    while d <= k:\n        d += 1\n    else:\n        return 2\n    return 0\n" in child.files["p.py"]
