"""Mutation operators: prompt contents, reply -> child genome round trips, operator choice.

The FM replies are scripted strings: these tests check prompt building and
reply parsing, not a model.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError, evolve_regions
from cambrian.meta_agent.operators import (
    OPERATORS,
    DiffOperator,
    FMOperator,
    Operator,
    OperatorWeightsError,
    ParentInfo,
    PromptContext,
    PromptLimits,
    PromptTemplateError,
    RewriteOperator,
    SelfModifyOperator,
    UnknownOperatorError,
    choose_operator,
    make_operator,
    render,
    template_names,
)

SEED = """\
\"\"\"Pack 26 circles into the unit square.\"\"\"
import numpy as np

# EVOLVE-BLOCK-START
def construct_packing():
    n = 26
    xs = np.linspace(0.1, 0.9, 6)
    centers = np.array([(x, y) for x in xs for y in xs])[:n]
    radii = np.full(n, 0.05)
    return centers, radii
# EVOLVE-BLOCK-END


def run_packing():
    centers, radii = construct_packing()
    return centers, radii, float(radii.sum())
"""
CONTRACT = "Define run_packing() -> (centers, radii, sum_of_radii) for 26 circles in [0, 1]^2."
GENOME = Genome(files={"packing.py": SEED}, entry="packing.py")


def context(**overrides: object) -> PromptContext:
    values: dict[str, object] = {
        "contract": CONTRACT,
        "benchmark": "circle_packing",
        "parent": ParentInfo(agent_id=7, genome=GENOME, score=1.3, feedback="valid packing; sum of radii 1.3"),
        "failed_attempts": ("SEARCH block 1 did not match packing.py", "the reply had no ```python block"),
    }
    values.update(overrides)
    return PromptContext(**values)  # type: ignore[arg-type]


# `lines` and `knob` show less on purpose (contract, program, score, the lines): test_operators_more.py.
@pytest.mark.parametrize("name", [n for n in OPERATORS if make_operator(n).uses_fm and n not in ("lines", "knob")])
def test_messages_show_contract_code_score_feedback_and_failures(name: str) -> None:
    other = ParentInfo(agent_id=8, genome=GENOME, score=1.1, feedback="valid packing; sum of radii 1.1")
    operator = make_operator(name)
    assert isinstance(operator, FMOperator)
    messages = operator.messages(context(second_parent=other, plan="1. Grow the radii."))
    # diagnose asks on in its plan's conversation: system, user, the plan, user.
    roles = ["system", "user", "assistant", "user"] if name == "diagnose" else ["system", "user"]
    assert [m["role"] for m in messages] == roles
    assert "circle_packing" in messages[0]["content"]
    user = "\n".join(m["content"] for m in messages if m["role"] == "user")
    assert CONTRACT in user
    assert "### packing.py\n```python\n" + SEED.rstrip() in user
    assert "score: 1.3" in user
    assert "valid packing; sum of radii 1.3" in user
    assert "1. SEARCH block 1 did not match packing.py" in user
    assert "2. the reply had no ```python block" in user
    assert "EVOLVE-BLOCK-START and EVOLVE-BLOCK-END" in user


def test_diff_messages_end_with_the_block_example() -> None:
    user = DiffOperator().messages(context())[1]["content"]
    assert user.rstrip().endswith(">>>>>>> REPLACE")
    assert user.index("<<<<<<< SEARCH") > user.index(SEED.splitlines()[-1])
    assert "to edit another file" not in user  # a one-file program needs no file names


def test_rewrite_messages_end_with_the_fence_format() -> None:
    user = RewriteOperator().messages(context())[1]["content"]
    assert user.rstrip().endswith("```")
    # One EVOLVE-BLOCK: only its code is asked for (the outside cannot change anyway).
    assert "complete new code for the EVOLVE-BLOCK of packing.py" in user and "```python block" in user
    plain = Genome(files={"main.py": "print(1)\n"}, entry="main.py")
    whole = RewriteOperator().messages(context(parent=ParentInfo(agent_id=1, genome=plain, score=None, feedback=None)))
    assert "complete new main.py in one ```python block" in whole[1]["content"]


def test_messages_without_feedback_failures_or_markers() -> None:
    plain = Genome(files={"main.py": "print(1)\n", "lib.py": "X = 1\n"}, entry="main.py")
    ctx = context(parent=ParentInfo(agent_id=1, genome=plain, score=None, feedback=None), failed_attempts=())
    user = DiffOperator().messages(ctx)[1]["content"]
    assert "not evaluated yet" in user and "(none)" in user
    assert "failed" not in user and "EVOLVE-BLOCK" not in user
    assert user.index("### main.py") < user.index("### lib.py")
    assert "to edit another file, write its name on the line before <<<<<<< SEARCH" in user


def test_messages_truncate_inspirations_and_keep_recent_failures() -> None:
    big = Genome(files={"packing.py": "".join(f"x{i} = {i}\n" for i in range(500))}, entry="packing.py")
    ctx = context(
        inspirations=[ParentInfo(agent_id=3, genome=big, score=2.5, feedback="hidden")],
        failed_attempts=[f"reason {i}" for i in range(10)],
    )
    user = RewriteOperator(limits=PromptLimits(max_inspiration_chars=200, max_failed_attempts=2)).messages(ctx)[1][
        "content"
    ]
    assert "## Another program, for ideas (score: 2.5)" in user
    assert "x499" not in user and "more lines not shown" in user
    assert "hidden" not in user  # an inspiration's feedback is not shown
    assert "reason 9" in user and "reason 8" in user and "reason 7" not in user
    assert user.index("Another program") < user.index("Current program")


def test_diff_round_trip_on_the_seed() -> None:
    reply = (
        "I will enlarge the circles.\n\n"
        "packing.py\n```python\n"
        "<<<<<<< SEARCH\n    radii = np.full(n, 0.05)\n=======\n    radii = np.full(n, 0.07)\n>>>>>>> REPLACE\n"
        "```\n"
    )
    child = DiffOperator().apply(GENOME, reply)
    assert child.entry == "packing.py"
    assert child.files["packing.py"] == SEED.replace("0.05", "0.07")
    assert GENOME.files["packing.py"] == SEED


def test_diff_refuses_edit_outside_the_block() -> None:
    reply = "<<<<<<< SEARCH\nimport numpy as np\n=======\nimport numpy\n>>>>>>> REPLACE\n"
    with pytest.raises(EditError, match=r"edits line 2 of packing.py, outside the EVOLVE-BLOCK markers"):
        DiffOperator().apply(GENOME, reply)


def test_diff_refuses_a_child_that_does_not_parse() -> None:
    reply = "<<<<<<< SEARCH\n    n = 26\n=======\n    n = (26\n>>>>>>> REPLACE\n"
    with pytest.raises(EditError, match=r"the edited packing.py is not valid Python"):
        DiffOperator().apply(GENOME, reply)


def test_rewrite_round_trip_on_the_seed() -> None:
    new = SEED.replace("radii = np.full(n, 0.05)", "radii = np.full(n, 0.06)\n    radii[0] = 0.1")
    reply = f"Here is the improved program:\n```python\n{new}```\nIt uses larger circles."
    child = RewriteOperator().apply(GENOME, reply)
    assert child.files["packing.py"] == new
    assert evolve_regions(child.files["packing.py"]) == [(4, 11)]


def test_rewrite_reply_without_a_fence() -> None:
    new = SEED.replace("0.05", "0.055")
    assert RewriteOperator().apply(GENOME, new).files["packing.py"] == new
    with pytest.raises(EditError, match=r"the reply had no ```python block"):
        RewriteOperator().apply(GENOME, "Use a hexagonal lattice and grow the radii.")


def test_rewrite_of_a_one_region_file_keeps_the_outside_as_it_was() -> None:
    # The reply's region is spliced in; what it changed outside the markers cannot reach the child.
    new = SEED.replace("import numpy as np", "import numpy as np\nimport math").replace("0.05", "0.06")
    child = RewriteOperator().apply(GENOME, f"```python\n{new}```").files["packing.py"]
    assert child == SEED.replace("0.05", "0.06")


def test_rewrite_of_a_two_region_file_refuses_changed_imports() -> None:
    two = SEED.replace("def run_packing():", "# EVOLVE-BLOCK-START\ndef run_packing():") + "# EVOLVE-BLOCK-END\n"
    genome = Genome(files={"packing.py": two}, entry="packing.py")
    new = two.replace("import numpy as np", "import numpy as np\nimport math").replace("0.05", "0.06")
    with pytest.raises(EditError, match=r"changed line 3 of packing.py, outside the EVOLVE-BLOCK markers"):
        RewriteOperator().apply(genome, f"```python\n{new}```")


@pytest.mark.parametrize("name", [name for name in OPERATORS if name != "ast_mutate"])
def test_unchanged_child_is_refused(name: str) -> None:
    whole = f"```python\n{SEED}```"
    blocks = "<<<<<<< SEARCH\n    n = 26\n=======\n    n = 26  \n>>>>>>> REPLACE\n"
    replies = {
        "rewrite": [whole],
        "crossover": [whole],
        "diff": [blocks],
        "diagnose": [blocks, whole],
        "self_modify": [SEED, blocks],
        "lines": ["```python\n    n = 26  \n```"],
        "knob": ["```python\n    n = 26  \n```"],
    }[name]
    operator = make_operator(name)
    assert isinstance(operator, (FMOperator, SelfModifyOperator))
    for reply in replies:
        with pytest.raises(EditError, match=r"unchanged"):
            if name in ("lines", "knob"):  # the lines it asked for come with the reply
                operator.apply(GENOME, reply, focus="    n = 26")  # type: ignore[call-arg]
            else:
                operator.apply(GENOME, reply)


def test_make_operator_builds_every_name_and_refuses_others() -> None:
    with pytest.raises(UnknownOperatorError, match=r"'crossbreed'.*rewrite, diff") as info:
        make_operator("crossbreed")
    assert isinstance(info.value, ValueError) and "diff" in info.value.fix
    for name in OPERATORS:
        operator = make_operator(name)
        assert isinstance(operator, Operator) and operator.name == name
    # What each declares, for the search to check the run and pick its arms.
    assert {name for name in OPERATORS if make_operator(name).uses_fm} == {
        "rewrite",
        "diff",
        "lines",
        "crossover",
        "diagnose",
        "knob",
    }
    assert [name for name in OPERATORS if make_operator(name).runs_agent] == ["self_modify"]
    assert [name for name in OPERATORS if make_operator(name).needs_second_parent] == ["crossover"]


def test_choose_operator_follows_the_weights_with_a_seeded_rng() -> None:
    weights = {"diff": 3.0, "rewrite": 1.0}
    draws = [choose_operator(weights, np.random.default_rng(0)) for _ in range(3)]
    assert len(set(draws)) == 1  # same seed, same choice
    rng = np.random.default_rng(123)
    counts = Counter(choose_operator(weights, rng) for _ in range(4000))
    assert 0.70 < counts["diff"] / 4000 < 0.80
    assert choose_operator({"diff": 0.0, "rewrite": 2.0}, np.random.default_rng(1)) == "rewrite"


def test_choose_operator_refuses_bad_weights() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(UnknownOperatorError, match=r"'mutate'"):
        choose_operator({"mutate": 1.0}, rng)
    for weights in ({"diff": 0.0}, {"diff": -1.0, "rewrite": 2.0}, {"diff": float("nan")}):
        with pytest.raises(OperatorWeightsError):
            choose_operator(weights, rng)


def test_every_template_renders_and_missing_values_are_errors() -> None:
    assert {"system", "rewrite", "diff", "parent"} <= set(template_names())
    with pytest.raises(PromptTemplateError, match=r"needs a value for \$benchmark"):
        render("system", {})
    with pytest.raises(PromptTemplateError, match=r"no prompt template named 'nope'"):
        render("nope", {})


def test_rewrite_without_markers_is_spliced_into_the_region() -> None:
    # Small models often drop the marker comments (and keep or drop the code around them).
    region = SEED.split("# EVOLVE-BLOCK-START\n")[1].split("# EVOLVE-BLOCK-END\n")[0]
    improved = region.replace("0.05", "0.06")
    whole_without_markers = (
        SEED.replace(region, improved).replace("# EVOLVE-BLOCK-START\n", "").replace("# EVOLVE-BLOCK-END\n", "")
    )
    expected = SEED.replace(region, improved)
    for reply in (improved, whole_without_markers):
        child = RewriteOperator().apply(GENOME, f"```python\n{reply}```")
        assert child.files["packing.py"] == expected


def test_rewrite_with_one_stray_marker_is_spliced_into_the_single_region() -> None:
    # Small models often keep one marker comment and drop the other.
    region = SEED.split("# EVOLVE-BLOCK-START\n")[1].split("# EVOLVE-BLOCK-END\n")[0]
    improved = region.replace("0.05", "0.06")
    broken = SEED.replace(region, improved).replace("# EVOLVE-BLOCK-START\n", "")
    child = RewriteOperator().apply(GENOME, f"```python\n{broken}```")
    assert child.files["packing.py"] == SEED.replace(region, improved)


def test_rewrite_drops_the_comments_that_name_the_region_copied_from_the_prompt_fake_fm() -> None:
    # qwen2.5-coder-1.5b wrapped its code in `# EVOLVE-BLOCK` lines, or kept the task's placeholder comment:
    # spliced in, they stayed in the child and every descendant (39 of 44 programs of one fast-primes run).
    region = SEED.split("# EVOLVE-BLOCK-START\n")[1].split("# EVOLVE-BLOCK-END\n")[0]
    improved = region.replace("0.05", "0.06")
    prompt = RewriteOperator().messages(context())[-1]["content"]
    copied = prompt.split("```python\n")[-1].splitlines()[0]
    assert copied.startswith("# ") and "EVOLVE-BLOCK" in copied  # the prompt's placeholder, as a model copies it
    expected = SEED.replace(region, improved)
    for reply in (
        f"# EVOLVE-BLOCK\n{improved}\n# EVOLVE-BLOCK\n",
        f"{copied}\n{improved}",
        f"# EVOLVE-BLOCK-START\n# EVOLVE-BLOCK\n{improved}# EVOLVE-BLOCK-END\n",
    ):
        child = RewriteOperator().apply(GENOME, f"```python\n{reply}```")
        assert child.files["packing.py"] == expected
    # A comment of the program's own stays, and so does code that mentions the block in a string.
    own = improved.replace("    n = 26\n", "    n = 26  # EVOLVE-BLOCK sized\n    note = '# EVOLVE-BLOCK'\n")
    child = RewriteOperator().apply(GENOME, f"```python\n{own}```")
    assert child.files["packing.py"] == SEED.replace(region, own)


def test_rewrite_with_broken_markers_of_a_two_region_file_names_the_rewrite() -> None:
    two = SEED + "\n# EVOLVE-BLOCK-START\nEXTRA = 1\n# EVOLVE-BLOCK-END\n"
    genome = Genome(files={"packing.py": two}, entry="packing.py")
    broken = two.replace("# EVOLVE-BLOCK-START\n", "", 1)
    with pytest.raises(EditError, match=r"the rewritten packing.py has an EVOLVE-BLOCK-END at line 10"):
        RewriteOperator().apply(genome, f"```python\n{broken}```")
