"""What a `lines`/`knob` prompt shows of a long program (`_outline`): the function holding the asked-for lines
in full, the others as signatures and docstring summaries; the reply still edits the parent's own text."""

from __future__ import annotations

import ast

from cambrian.evaluators.base import Genome
from cambrian.evaluators.programs import StripPacking
from cambrian.meta_agent.operators import Focus, KnobOperator, LinesOperator, ParentInfo, PromptContext
from cambrian.meta_agent.operators._outline import ELIDED, assigned_names, outline, outline_genome
from cambrian.meta_agent.operators._prompting import PromptLimits

PROGRAM = '''\
"""A module."""

import math

# EVOLVE-BLOCK-START
STEP = 0.5


def helper(x):
    """Doubles x.

    At length.
    """
    y = x * 2
    return y


def uses_step(n):
    total = 0
    for i in range(n):
        total += STEP * i
    return total


class Shape:
    """A shape."""

    size = 3

    def area(self):
        side = self.size
        return side * side

    def perimeter(self):
        side = self.size
        return 4 * side


def target(values):
    best = 0
    for v in values:
        best = max(best, helper(v))
    return math.sqrt(best)
# EVOLVE-BLOCK-END
'''


def lines_of(text: str, needle: str) -> tuple[int, int]:
    index = text.splitlines().index(needle)
    return index, index + 1


def test_only_the_function_holding_the_lines_is_shown_whole() -> None:
    shown = outline(PROGRAM, keep=lines_of(PROGRAM, "        best = max(best, helper(v))"))
    ast.parse(shown)  # still Python: a model reads a program, not a fragment
    assert "        best = max(best, helper(v))" in shown and "    return math.sqrt(best)" in shown
    assert "y = x * 2" not in shown and "total += STEP * i" not in shown and "return side * side" not in shown
    assert 'def helper(x):\n    """Doubles x."""\n    ' + ELIDED in shown  # the docstring's summary line stays
    assert "class Shape:" in shown and "    size = 3" in shown and "    def area(self):" in shown
    assert shown.startswith('"""A module."""\n\nimport math\n') and "STEP = 0.5" in shown
    assert shown.count("EVOLVE-BLOCK-") == 2


def test_a_method_keeps_its_class_and_the_other_methods_become_signatures() -> None:
    shown = outline(PROGRAM, keep=lines_of(PROGRAM, "        return side * side"))
    assert "        return side * side" in shown and "        return 4 * side" not in shown
    assert "    def perimeter(self):\n        " + ELIDED in shown


def test_a_setting_keeps_the_functions_that_read_it() -> None:
    focus = lines_of(PROGRAM, "STEP = 0.5")
    assert assigned_names("STEP = 0.5") == {"STEP"}
    shown = outline(PROGRAM, keep=focus, names={"STEP"})
    assert "total += STEP * i" in shown and "y = x * 2" not in shown


def test_what_cannot_be_outlined_is_shown_whole() -> None:
    assert outline("def broken(:\n    pass\n") == "def broken(:\n    pass\n"
    marked = "def f():\n    # EVOLVE-BLOCK-START\n    x = 1\n    return x\n    # EVOLVE-BLOCK-END\n"
    assert outline(marked) == marked  # a body holding a marker keeps it
    short = "def f(x):\n    return x\n"
    assert outline(short) == short  # a one-line body: nothing to save


def test_other_python_files_show_signatures_and_other_files_stay_whole() -> None:
    genome = Genome(files={"main.py": PROGRAM, "util.py": PROGRAM, "notes.txt": "x = 1\n" * 3}, entry="main.py")
    focus = Focus.find(genome, "        best = max(best, helper(v))")
    shown = outline_genome(genome, focus)
    assert "best = max(best, helper(v))" in shown.files["main.py"]
    assert "best = max(best, helper(v))" not in shown.files["util.py"] and ELIDED in shown.files["util.py"]
    assert shown.files["notes.txt"] == genome.files["notes.txt"]


def prompt(operator: LinesOperator, genome: Genome, focus: Focus, limits: PromptLimits | None = None) -> str:
    if limits is not None:
        operator = type(operator)(limits=limits)
    ctx = PromptContext(contract="c", benchmark="b", parent=ParentInfo(1, genome, 0.5, None), focus=focus)
    return operator.messages(ctx)[-1]["content"]


def test_a_long_program_is_outlined_in_the_prompt_and_the_reply_edits_the_whole_parent_fake_fm() -> None:
    seed = StripPacking().seed()
    assert sum(len(text) for text in seed.files.values()) > PromptLimits().max_lines_program_chars
    operator = LinesOperator()
    focus = next(f for f in operator.windows(seed) if "placements.append(shelves[-1].put(rect))" in f.text)
    shown = prompt(operator, seed, focus)
    assert focus.text in shown and ELIDED in shown
    assert len(shown) < 0.8 * len(prompt(operator, seed, focus, PromptLimits(max_lines_program_chars=10**6)))
    new_lines = focus.text.replace("[-1]", "[0]")
    child = operator.apply(seed, f"```python\n{new_lines}\n```", focus=focus)
    assert child.files["packer.py"] == seed.files["packer.py"].replace(focus.text, new_lines)  # not the outline
    # A knob is shown with the function that reads it.
    knob = KnobOperator()
    setting = next(f for f in knob.windows(seed) if f.text.startswith("SHELF_SLACK"))
    shown = prompt(knob, seed, setting)
    assert "return place_next_fit(rects, width, SHELF_SLACK)" in shown and ELIDED in shown


def test_a_short_program_is_shown_whole() -> None:
    genome = Genome(files={"p.py": PROGRAM}, entry="p.py")
    focus = Focus.find(genome, "        best = max(best, helper(v))")
    assert ELIDED not in prompt(LinesOperator(), genome, focus) and "y = x * 2" in prompt(
        LinesOperator(), genome, focus
    )
