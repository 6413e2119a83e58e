"""What a `lines`/`knob` prompt shows of a long program (`_outline`): an outline of signatures and docstring
summaries, the same for any lines asked for, then the function holding the asked-for lines in full; the reply
still edits the parent's own text."""

from __future__ import annotations

import ast

from cambrian.evaluators.base import Genome
from cambrian.evaluators.programs import StripPacking
from cambrian.meta_agent.operators import Focus, KnobOperator, LinesOperator, ParentInfo, PromptContext
from cambrian.meta_agent.operators._outline import ELIDED, assigned_names, code_around, in_full, outline, outline_genome
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


def test_in_full_is_what_the_outline_leaves_out_of_the_kept_functions() -> None:
    focus = lines_of(PROGRAM, "        return side * side")
    (method,) = in_full(PROGRAM, keep=focus)
    assert method == "    def area(self):\n        side = self.size\n        return side * side"
    readers = in_full(PROGRAM, keep=lines_of(PROGRAM, "STEP = 0.5"), names={"STEP"})
    assert readers == [
        "def uses_step(n):\n    total = 0\n    for i in range(n):\n        total += STEP * i\n    return total"
    ]
    assert in_full(PROGRAM) == [] and in_full("def broken(:\n", keep=(0, 1)) == []
    short = "def f(x):\n    return x\n"
    assert in_full(short, keep=(1, 2)) == []  # the outline shows it whole already


def test_every_python_file_is_outlined_the_same_for_any_lines_and_other_files_stay_whole() -> None:
    genome = Genome(files={"main.py": PROGRAM, "util.py": PROGRAM, "notes.txt": "x = 1\n" * 3}, entry="main.py")
    shown = outline_genome(genome)
    assert shown.files["main.py"] == shown.files["util.py"] == outline(PROGRAM)
    assert "best = max(best, helper(v))" not in shown.files["main.py"] and ELIDED in shown.files["main.py"]
    assert shown.files["notes.txt"] == genome.files["notes.txt"]
    focus = Focus.find(genome, "        best = max(best, helper(v))")
    around = code_around(genome, focus)
    assert around is not None and list(around.files) == ["main.py"] and around.entry == "main.py"
    assert around.files["main.py"].startswith("def target(values):") and "helper(v)" in around.files["main.py"]
    # A setting's readers come from every Python file, the focus file first.
    setting = Focus.find(genome, "STEP = 0.5")
    readers = code_around(genome, setting, names={"STEP"})
    assert readers is not None and sorted(readers.files) == ["main.py", "util.py"] and readers.entry == "main.py"


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


def test_prompts_from_one_parent_differ_only_in_the_task_so_a_server_caches_the_rest() -> None:
    seed = StripPacking().seed()
    operator = LinesOperator()
    prompts = [prompt(operator, seed, focus) for focus in operator.windows(seed)[::7]]
    assert len(prompts) > 5
    program = prompts[0][: prompts[0].index("## Task")]
    assert all(shown.startswith(program) for shown in prompts)  # the outline and the score
    assert program.index("Its score: 0.5") > program.index("# EVOLVE-BLOCK-END")  # after the program
    # The lines asked for come after the code around them, the last thing before the instruction.
    task = prompts[0][len(program) :]
    assert task.index("In full") < task.index("Rewrite only these lines") < task.index("Reply with")


def test_a_childs_prompt_shares_its_parents_up_to_the_edited_line() -> None:
    genome = Genome(files={"p.py": PROGRAM}, entry="p.py")
    child = Genome(files={"p.py": PROGRAM.replace("return math.sqrt(best)", "return best")}, entry="p.py")
    focus = Focus.find(genome, "    y = x * 2")
    ctx = PromptContext(contract="c", benchmark="b", parent=ParentInfo(1, genome, 0.5, None), focus=focus)
    child_ctx = PromptContext(
        contract="c", benchmark="b", parent=ParentInfo(2, child, 0.7, None), focus=Focus.find(child, "    y = x * 2")
    )
    parent_prompt = LinesOperator().messages(ctx)[-1]["content"]
    child_prompt = LinesOperator().messages(child_ctx)[-1]["content"]
    shared = next(i for i, (a, b) in enumerate(zip(parent_prompt, child_prompt)) if a != b)
    assert parent_prompt[:shared].endswith("    return ") and "math.sqrt" in parent_prompt[shared:]


def test_a_short_program_is_shown_whole() -> None:
    genome = Genome(files={"p.py": PROGRAM}, entry="p.py")
    focus = Focus.find(genome, "        best = max(best, helper(v))")
    assert ELIDED not in prompt(LinesOperator(), genome, focus) and "y = x * 2" in prompt(
        LinesOperator(), genome, focus
    )
