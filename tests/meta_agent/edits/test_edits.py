"""SEARCH/REPLACE parsing and applying, EVOLVE-BLOCK checks, whole-file code extraction.

These are parsing tests: the FM replies are scripted strings.
"""

from __future__ import annotations

import pytest

from cambrian.meta_agent.edits import (
    EditBlock,
    EditError,
    apply_blocks,
    check_outside_unchanged,
    evolve_regions,
    extract_code,
    parse_search_replace,
    splice_into_region,
)

SEED = """\
import numpy as np

# EVOLVE-BLOCK-START
def construct_packing():
    n = 26
    centers = np.zeros((n, 2))
    radii = np.full(n, 0.05)
    return centers, radii
# EVOLVE-BLOCK-END


def run_packing():
    centers, radii = construct_packing()
    return centers, radii, float(radii.sum())
"""


def block(search: str, replace: str, *, path: str | None = None, index: int = 1) -> EditBlock:
    return EditBlock(path=path, search=search, replace=replace, index=index)


# ---------------------------------------------------------------- parsing


def test_parse_single_block() -> None:
    reply = "<<<<<<< SEARCH\n    n = 26\n=======\n    n = 27\n>>>>>>> REPLACE\n"
    assert parse_search_replace(reply) == [block("    n = 26\n", "    n = 27\n")]


def test_parse_multiple_blocks_with_prose_between() -> None:
    reply = (
        "First I change n.\n"
        "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n"
        "Then the radii.\n\n"
        "<<<<<<< SEARCH\nc\nd\n=======\n>>>>>>> REPLACE\n"
    )
    blocks = parse_search_replace(reply)
    assert [(b.index, b.search, b.replace) for b in blocks] == [(1, "a\n", "b\n"), (2, "c\nd\n", "")]


def test_parse_tolerates_fences_marker_lengths_and_trailing_spaces() -> None:
    reply = "```python\n<<<<<<<<< SEARCH   \nx = 1\n=====  \nx = 2\n>>>>>> REPLACE\t\n```\n"
    assert parse_search_replace(reply) == [block("x = 1\n", "x = 2\n")]


@pytest.mark.parametrize(
    "path_line",
    ["packing.py", "### packing.py", "`packing.py`", "**packing.py**", "File: packing.py", "./packing.py:"],
)
def test_parse_file_path_line(path_line: str) -> None:
    reply = f"{path_line}\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n"
    assert parse_search_replace(reply)[0].path == "packing.py"


def test_parse_file_path_line_before_fence() -> None:
    reply = "src/util.py\n```python\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n```\n"
    assert parse_search_replace(reply)[0].path == "src/util.py"


def test_parse_prose_line_before_block_is_not_a_path() -> None:
    reply = "Here is my change to the radii:\n<<<<<<< SEARCH\nx = 1\n=======\nx = 2\n>>>>>>> REPLACE\n"
    assert parse_search_replace(reply)[0].path is None


def test_parse_missing_separator_names_the_block() -> None:
    reply = "<<<<<<< SEARCH\na\n=======\nb\n>>>>>>> REPLACE\n<<<<<<< SEARCH\nc\nd\n>>>>>>> REPLACE\n"
    with pytest.raises(EditError, match=r"block 2 has no ======= line"):
        parse_search_replace(reply)


def test_parse_missing_replace_marker_names_the_block() -> None:
    with pytest.raises(EditError, match=r"block 1 is missing its >>>>>>> REPLACE line"):
        parse_search_replace("<<<<<<< SEARCH\na\n=======\nb\n")


def test_parse_search_followed_by_search_names_the_block() -> None:
    reply = "<<<<<<< SEARCH\na\n<<<<<<< SEARCH\nb\n=======\nc\n>>>>>>> REPLACE\n"
    with pytest.raises(EditError, match=r"block 1 is missing its ======= line"):
        parse_search_replace(reply)


def test_parse_no_blocks_explains_the_format() -> None:
    with pytest.raises(EditError, match=r"no SEARCH/REPLACE block; use the format <<<<<<< SEARCH") as info:
        parse_search_replace("I would increase the radii.")
    assert info.value.fix


def test_parse_replace_without_search() -> None:
    with pytest.raises(EditError, match=r"no <<<<<<< SEARCH before it"):
        parse_search_replace("a\n=======\nb\n>>>>>>> REPLACE\n")


# ---------------------------------------------------------------- applying


def test_apply_exact() -> None:
    out = apply_blocks({"packing.py": SEED}, [block("    n = 26\n", "    n = 27\n")], default_path="packing.py")
    assert "    n = 27\n" in out["packing.py"]
    assert out["packing.py"] == SEED.replace("n = 26", "n = 27")


def test_apply_ignores_trailing_whitespace() -> None:
    out = apply_blocks({"packing.py": SEED}, [block("    n = 26   \n", "    n = 27\n")], default_path="packing.py")
    assert out["packing.py"] == SEED.replace("n = 26", "n = 27")


def test_apply_reindents_replacement_when_search_is_dedented() -> None:
    search = "n = 26\ncenters = np.zeros((n, 2))\n"
    replace = "n = 26\ncenters = np.random.rand(n, 2)\nif True:\n    centers *= 0.9\n"
    out = apply_blocks({"packing.py": SEED}, [block(search, replace)], default_path="packing.py")
    assert "    centers = np.random.rand(n, 2)\n    if True:\n        centers *= 0.9\n" in out["packing.py"]


def test_apply_reindents_replacement_when_search_is_overindented() -> None:
    search = "        radii = np.full(n, 0.05)\n"
    replace = "        radii = np.full(n, 0.06)\n"
    out = apply_blocks({"packing.py": SEED}, [block(search, replace)], default_path="packing.py")
    assert "\n    radii = np.full(n, 0.06)\n" in out["packing.py"]


def test_apply_blocks_in_order_on_several_files() -> None:
    files = {"packing.py": SEED, "util.py": "SCALE = 1\n"}
    blocks = [
        block("    n = 26\n", "    n = 27\n"),
        block("SCALE = 1\n", "SCALE = 2\n", path="util.py", index=2),
        block("    n = 27\n", "    n = 28\n", index=3),
    ]
    out = apply_blocks(files, blocks, default_path="packing.py")
    assert "n = 28" in out["packing.py"] and out["util.py"] == "SCALE = 2\n"
    assert files["util.py"] == "SCALE = 1\n"  # the input mapping is not modified


def test_apply_no_match_shows_closest_lines() -> None:
    with pytest.raises(EditError) as info:
        apply_blocks(
            {"packing.py": SEED},
            [block("    radii = np.full(n, 0.5)\n", "    radii = 1\n", index=2)],
            default_path="packing.py",
        )
    message = str(info.value)
    assert message.startswith("SEARCH block 2 did not match packing.py. The closest lines were (similarity 0.")
    assert "   7 |     radii = np.full(n, 0.05)" in message


def test_apply_ambiguous_match_is_refused() -> None:
    text = "x = 1\ny = 2\nx = 1\n"
    with pytest.raises(EditError, match=r"SEARCH block 1 matches 2 places in a.py \(lines 1, 3\); include more"):
        apply_blocks({"a.py": text}, [block("x = 1\n", "x = 3\n")], default_path="a.py")


def test_apply_unknown_file_lists_the_files() -> None:
    with pytest.raises(EditError, match=r"names 'other.py', which is not a file.*packing.py, util.py"):
        apply_blocks(
            {"packing.py": SEED, "util.py": ""}, [block("x\n", "y\n", path="other.py")], default_path="packing.py"
        )


def test_apply_matches_a_path_by_its_file_name() -> None:
    out = apply_blocks(
        {"packing.py": SEED}, [block("    n = 26\n", "    n = 27\n", path="seed/packing.py")], default_path="packing.py"
    )
    assert set(out) == {"packing.py"}


def test_apply_empty_search_is_refused() -> None:
    with pytest.raises(EditError, match=r"block 1 has an empty SEARCH section"):
        apply_blocks({"new.py": ""}, [block("", "print(1)\n", path="new.py")], default_path="new.py")


def test_apply_identical_search_and_replace_is_refused() -> None:
    with pytest.raises(EditError, match=r"changes nothing"):
        apply_blocks({"packing.py": SEED}, [block("    n = 26\n", "    n = 26\n")], default_path="packing.py")


def test_apply_tolerates_blank_lines_around_search() -> None:
    out = apply_blocks({"packing.py": SEED}, [block("\n    n = 26\n\n", "\n    n = 27\n\n")], default_path="packing.py")
    assert out["packing.py"] == SEED.replace("n = 26", "n = 27")


# ---------------------------------------------------------------- EVOLVE-BLOCK


def test_evolve_regions_spans_lines_between_markers() -> None:
    assert evolve_regions(SEED) == [(3, 8)]
    assert evolve_regions("a = 1\n") == []
    two = "// EVOLVE-BLOCK-START\nx\n// EVOLVE-BLOCK-END\ny\n/* EVOLVE-BLOCK-START */\nz\n/* EVOLVE-BLOCK-END */\n"
    assert evolve_regions(two) == [(1, 2), (5, 6)]


def test_evolve_regions_ignores_markers_in_strings_and_refuses_unbalanced() -> None:
    assert evolve_regions('s = "# EVOLVE-BLOCK-START"\n') == []
    with pytest.raises(EditError, match=r"EVOLVE-BLOCK-START at line 1 with no EVOLVE-BLOCK-END"):
        evolve_regions("# EVOLVE-BLOCK-START\nx = 1\n")


def test_apply_edit_above_the_start_marker_is_refused() -> None:
    with pytest.raises(EditError) as info:
        apply_blocks({"packing.py": SEED}, [block("import numpy as np\n", "import math\n")], default_path="packing.py")
    assert str(info.value) == (
        "SEARCH/REPLACE block 1 edits line 1 of packing.py, outside the EVOLVE-BLOCK markers; "
        "only code between # EVOLVE-BLOCK-START and # EVOLVE-BLOCK-END may change"
    )


def test_apply_edit_spanning_a_marker_is_refused() -> None:
    search = "    return centers, radii\n# EVOLVE-BLOCK-END\n"
    with pytest.raises(EditError, match=r"edits line 9 of packing.py \(an EVOLVE-BLOCK marker\)"):
        apply_blocks(
            {"packing.py": SEED},
            [block(search, "    return radii, centers\n# EVOLVE-BLOCK-END\n")],
            default_path="packing.py",
        )


def test_apply_replacement_adding_a_marker_is_refused() -> None:
    with pytest.raises(EditError, match=r"writes an EVOLVE-BLOCK marker"):
        apply_blocks(
            {"packing.py": SEED}, [block("    n = 26\n", "    n = 26\n# EVOLVE-BLOCK-END\n")], default_path="packing.py"
        )


def test_apply_edit_fully_inside_the_region_is_allowed() -> None:
    search = "def construct_packing():\n    n = 26\n"
    out = apply_blocks(
        {"packing.py": SEED}, [block(search, "def construct_packing():\n    n = 30\n")], default_path="packing.py"
    )
    assert "n = 30" in out["packing.py"]
    assert evolve_regions(out["packing.py"]) == [(3, 8)]


def test_apply_anywhere_in_a_file_without_markers() -> None:
    out = apply_blocks({"a.py": "import os\nx = 1\n"}, [block("import os\n", "import sys\n")], default_path="a.py")
    assert out["a.py"] == "import sys\nx = 1\n"


def test_check_outside_unchanged_accepts_region_edits_and_trailing_space() -> None:
    new = SEED.replace("n = 26", "n = 26  # more\n    n += 0").replace("def run_packing():", "def run_packing():   ")
    check_outside_unchanged(SEED, new.rstrip("\n"), path="packing.py")


def test_check_outside_unchanged_refuses_changed_imports() -> None:
    new = SEED.replace("import numpy as np", "import numpy as np\nimport math")
    with pytest.raises(EditError, match=r"changed line 2 of packing.py, outside the EVOLVE-BLOCK markers"):
        check_outside_unchanged(SEED, new, path="packing.py")


def test_check_outside_unchanged_refuses_dropped_markers_and_tail() -> None:
    no_markers = "\n".join(line for line in SEED.splitlines() if "EVOLVE" not in line)
    with pytest.raises(EditError, match=r"0 EVOLVE-BLOCK region\(s\) where the original has 1"):
        check_outside_unchanged(SEED, no_markers, path="packing.py")
    without_tail = SEED[: SEED.index("def run_packing")]
    with pytest.raises(EditError, match=r"removed line 12 \('def run_packing\(\):'\)"):
        check_outside_unchanged(SEED, without_tail, path="packing.py")


# ---------------------------------------------------------------- whole-file replies


def test_extract_code_takes_the_last_python_block() -> None:
    reply = "Old:\n```python\nx = 1\ny = 1\n```\nNew:\n```py\nx = 2\ny = 2\n```\n"
    assert extract_code(reply) == "x = 2\ny = 2\n"


def test_extract_code_skips_a_short_trailing_snippet_and_other_languages() -> None:
    program = "\n".join(f"v{i} = {i}" for i in range(10))
    reply = f"```python\n{program}\n```\nRun it with:\n```\nrun()\n```\n```json\n{{}}\n```\n"
    assert extract_code(reply) == program + "\n"


def test_extract_code_unclosed_fence_runs_to_the_end() -> None:
    assert extract_code("```python\nx = 1\n") == "x = 1\n"


def test_extract_code_without_fence_parses_as_python() -> None:
    assert extract_code("\nimport math\nprint(math.pi)\n\n") == "import math\nprint(math.pi)\n"


def test_extract_code_refuses_prose_and_wrong_languages() -> None:
    with pytest.raises(EditError, match=r"the reply had no ```python block"):
        extract_code("I think we should use a hexagonal lattice.")
    with pytest.raises(EditError, match=r"found blocks tagged: json"):
        extract_code('```json\n{"a": 1}\n```')


def test_splice_into_region_keeps_the_outside_and_refuses_empty_code() -> None:
    spliced = splice_into_region(SEED, "import numpy as np\n\ndef construct_packing():\n    return 1, 2\n")
    assert spliced == SEED.replace(
        SEED[SEED.index("def construct") : SEED.index("# EVOLVE-BLOCK-END")],
        "def construct_packing():\n    return 1, 2\n",
    )
    check_outside_unchanged(SEED, spliced)
    with pytest.raises(EditError, match=r"no code for the EVOLVE-BLOCK region"):
        splice_into_region(SEED, "import numpy as np\n")
    with pytest.raises(EditError, match=r"the original has 0 regions"):
        splice_into_region("x = 1\n", "x = 2\n")
