"""The static check before any sandbox time: compiles, no undefined names, the entry function kept; known
imports repaired and the repair recorded."""

from __future__ import annotations

import pytest

from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.evaluators.humaneval import HumanEval
from cambrian.meta_agent.edits import EditError, behaviour_key, check_child

# The grid seed (start = "grid"): a fixed parent, so these line-precise checks do not move with the default seed.
SEED = CirclePacking(start="grid").seed()
TEXT = SEED.files["packing.py"]


def child(text: str) -> Genome:
    return Genome(files={"packing.py": text}, entry="packing.py")


def test_a_dropped_import_inside_the_evolve_block_is_added_back_and_recorded() -> None:
    # What qwen 0.5B did in 8 of 10 rewrites: the function kept, `import math` (inside the block) dropped.
    checked = check_child(child(TEXT.replace("import math\n", "")), SEED, entry_function="pack_circles")
    text = checked.genome.files["packing.py"]
    assert text.count("import math") == 1
    assert text.index("# EVOLVE-BLOCK-START") < text.index("import math") < text.index("def pack_circles")
    assert checked.repairs == ("added `import math` at line 16 of packing.py (used but never imported)",)
    assert checked.repair_note == checked.repairs[0]


@pytest.mark.parametrize(
    ("used", "line"),
    [
        ("np.zeros(3)", "import numpy as np"),
        ("defaultdict(list)", "from collections import defaultdict"),
        ("minimize(lambda x: x[0] ** 2, [1.0])", "from scipy.optimize import minimize"),
        ("sqrt(2)", "from math import sqrt"),
        ("random.random()", "import random"),
    ],
)
def test_known_names_get_their_import(used: str, line: str) -> None:
    text = TEXT.replace("    circles = []\n", f"    _ = {used}\n    circles = []\n")
    checked = check_child(child(text), SEED, entry_function="pack_circles")
    assert line in checked.genome.files["packing.py"] and f"`{line}`" in checked.repair_note


def test_unknown_undefined_names_are_refused_with_the_line() -> None:
    text = TEXT.replace("radius = 0.5 / max(columns, rows)", "radius = 0.5 / max(columns, rows) * shrink")
    with pytest.raises(
        EditError,
        match=r"static check of packing.py: undefined name 'shrink' at line 23: "
        r"'radius = 0.5 / max\(columns, rows\) \* shrink'",
    ) as info:
        check_child(child(text), SEED, entry_function="pack_circles")
    assert "shrink" in info.value.fix


def test_code_that_does_not_compile_is_refused_with_the_line() -> None:
    with pytest.raises(EditError, match=r"not valid Python: .* at line 21"):
        check_child(child(TEXT.replace("columns = math.ceil", "columns = = math.ceil")), SEED)
    with pytest.raises(EditError, match=r"'return' outside function"):
        check_child(child(TEXT.replace("# EVOLVE-BLOCK-END", "return 1\n# EVOLVE-BLOCK-END")), SEED)


def test_the_entry_function_must_stay_callable_as_the_harness_calls_it() -> None:
    with pytest.raises(EditError, match=r"no longer defines `pack_circles`.*pack_circles\(n: int\)"):
        check_child(
            child(TEXT.replace("def pack_circles(n: int)", "def pack(n: int)")), SEED, entry_function="pack_circles"
        )
    renamed = TEXT.replace("def pack_circles(n: int)", "def pack_circles(count: int, n: int = 26)")
    renamed = renamed.replace("(n)", "(count)").replace("n /", "count /")
    with pytest.raises(EditError, match=r"requires 'count', which the benchmark never passes"):
        check_child(child(renamed), SEED, entry_function="pack_circles")
    # Extra parameters with defaults, or **kwargs, still take the harness's call.
    ok = TEXT.replace("def pack_circles(n: int)", "def pack_circles(n: int, seed: int = 0, **options)")
    assert check_child(child(ok), SEED, entry_function="pack_circles").repairs == ()


def test_unchanged_files_and_other_entries_are_not_checked() -> None:
    agent = HumanEval().seed()
    helper = Genome(files={**agent.files, "notes.txt": "not python ("}, entry=agent.entry)
    assert check_child(helper, agent, entry_function="solve").genome.files == helper.files
    changed = {**agent.files, agent.entry: agent.files[agent.entry].replace("MAX_TOKENS = 512", "MAX_TOKENS = 600")}
    assert check_child(Genome(files=changed, entry=agent.entry), agent, entry_function="solve").repairs == ()


def test_imports_go_after_the_docstring_in_a_file_without_markers() -> None:
    agent = HumanEval().seed()
    text = agent.files[agent.entry].replace("import re\n", "").replace("MAX_TOKENS = 512", "MAX_TOKENS = 600")
    checked = check_child(
        Genome(files={**agent.files, agent.entry: text}, entry=agent.entry), agent, entry_function="solve"
    )
    fixed = checked.genome.files[agent.entry]
    assert fixed.index('"""', 3) < fixed.index("import re") < fixed.index("from typing import")
    assert "added `import re`" in checked.repair_note


def test_an_edit_that_changes_nothing_the_program_does_is_refused() -> None:
    neutral = {
        "blank lines": TEXT.replace("\n\ndef pack_circles", "\n\n\ndef pack_circles"),
        "an unused import": TEXT.replace("import math\n", "import math\nimport numpy as np\n"),
        "code after the return": TEXT.replace("    return circles\n", "    return circles\n    circles = []\n"),
        "a docstring": TEXT.replace("far from the best packing", "a start"),
        "a comment": TEXT.replace("    circles = []\n", "    circles = []  # the answer\n"),
    }
    for what, text in neutral.items():
        assert text != TEXT, what
        with pytest.raises(EditError, match="changes nothing the program does") as refused:
            check_child(child(text), SEED, entry_function="pack_circles")
        assert refused.value.fix, what
    # One changed constant, or an import that is used, is a real change.
    assert check_child(child(TEXT.replace("0.5 / max", "0.49 / max")), SEED).genome
    used = TEXT.replace("import math\n", "import math\nfrom math import ceil\n").replace("math.ceil(n /", "ceil(n /")
    assert check_child(child(used), SEED).genome
    assert behaviour_key(TEXT) == behaviour_key(neutral["code after the return"]) != behaviour_key(used)


def test_a_copy_of_a_definition_that_the_original_replaces_changes_nothing() -> None:
    # What qwen2.5-coder-0.5B's `lines` edits of the HumanEval seed agent did (bench/humaneval_holdout.py): a new
    # `solve` (or the whole module's imports and `solve`) put above the original, which replaces it at import.
    agent = HumanEval().seed()
    text = agent.files[agent.entry]
    original = text[text.index("def solve(") : text.index("\n\n\ndef extract_code")]
    copy = original.replace("task: dict[str, Any], llm: Callable[..., str]) -> str:", "task, llm):")
    anchor = "\n\n\ndef solve("
    shadowed = {
        "a copy of solve": text.replace(anchor, "\n" + copy + anchor, 1),
        "copied imports and solve": text.replace(
            anchor, "\nimport re\nfrom typing import Any\n\n\n" + copy.replace("llm):", "llm: Any):") + anchor, 1
        ),
    }
    for what, shadow in shadowed.items():
        assert shadow != text, what
        with pytest.raises(EditError, match="changes nothing the program does"):
            check_child(
                Genome(files={**agent.files, agent.entry: shadow}, entry=agent.entry), agent, entry_function="solve"
            )
    # The copy placed after the original replaces it: a real change (its body may differ), kept.
    later = text + "\n\n" + copy.replace("max_tokens=MAX_TOKENS", "max_tokens=256") + "\n"
    assert "max_tokens=256" in later
    assert check_child(
        Genome(files={**agent.files, agent.entry: later}, entry=agent.entry), agent, entry_function="solve"
    ).genome
    # A decorated copy is kept: its decorator runs at import and may do anything.
    decorated = text.replace(anchor, "\n@staticmethod\n" + copy + anchor, 1)
    assert check_child(
        Genome(files={**agent.files, agent.entry: decorated}, entry=agent.entry), agent, entry_function="solve"
    ).genome


def test_new_definitions_that_nothing_uses_change_nothing() -> None:
    # What qwen2.5-coder-1.5b's `rewrite` of the rings seed did in 3 of its 4 "valid" children
    # (bench/results/fm_efficacy-rewrite-1.5b-rings.json): a helper (and a constant it reads) that nothing calls.
    anchor = "# EVOLVE-BLOCK-END"
    helper = (
        'N_CIRCLES = 26\n\n\ndef grow(circles):\n    """Grow each circle."""\n'
        "    return [(x, y, r * 1.01) for x, y, r in circles[:N_CIRCLES]]\n\n\n"
    )
    dead = TEXT.replace(anchor, helper + anchor)
    with pytest.raises(EditError, match="changes nothing the program does") as refused:
        check_child(child(dead), SEED, entry_function="pack_circles")
    assert "`N_CIRCLES`" in str(refused.value) and "`grow`" in str(refused.value)
    assert "call new code" in refused.value.fix
    # An import that only the unused helper reads is unused too.
    importing = dead.replace("import math\n", "import math\nimport random\n").replace("r * 1.01", "r * random.random()")
    with pytest.raises(EditError, match="changes nothing the program does"):
        check_child(child(importing), SEED, entry_function="pack_circles")
    # Scopes count: a new constant `n` is not read by functions whose own parameter or local is `n`, and a
    # docstring that names a module reads nothing; a function that reads the global, or declares it, does.
    shadowed = TEXT.replace(anchor, "n = 26\n" + anchor)
    named_in_docstring = TEXT.replace("import math\n", "import math\nimport scipy\n").replace(
        '"""Equal circles', '"""With scipy: equal circles'
    )
    for text in (shadowed, named_in_docstring):
        with pytest.raises(EditError, match="changes nothing the program does"):
            check_child(child(text), SEED, entry_function="pack_circles")
    reads = TEXT.replace(anchor, "SCALE = 1.0\n" + anchor).replace(
        "    return circles\n", "    return circles * int(SCALE)\n"
    )
    declares = TEXT.replace(anchor, "SCALE = 1.0\n" + anchor).replace(
        "    circles = []\n", "    global SCALE\n    circles = []\n"
    )
    for text in (reads, declares):
        assert check_child(child(text), SEED, entry_function="pack_circles").genome
    # Called from the entry function, the same helper is a real change.
    called = dead.replace("    return circles\n", "    return grow(circles)\n")
    assert check_child(child(called), SEED, entry_function="pack_circles").genome
    # Named in a string (getattr, __all__), reached from another file, or the function the harness calls: kept.
    named = dead.replace(anchor, "__all__ = ['grow']\n" + anchor)
    assert check_child(child(named), SEED, entry_function="pack_circles").genome
    other = Genome(files={"packing.py": dead, "main.py": "from packing import grow\n"}, entry="packing.py")
    parent = Genome(files={"packing.py": TEXT, "main.py": "from packing import grow\n"}, entry="packing.py")
    assert check_child(other, parent, entry_function="pack_circles").genome
    broken = {"packing.py": TEXT, "notes.py": "not python ("}  # an unchanged file that does not parse
    unparsed = Genome(files={**broken, "packing.py": dead}, entry="packing.py")
    assert check_child(unparsed, Genome(files=broken, entry="packing.py"), entry_function="pack_circles").genome
    assert check_child(child(dead), SEED, entry_function="grow").genome
    # A new definition that runs code when made (a decorator, a computed value) is not counted as nothing.
    decorated = TEXT.replace(anchor, "@print\ndef grow(circles):\n    return circles\n\n\n" + anchor)
    computed = TEXT.replace(anchor, "SIZE = len(str(print))\n\n\n" + anchor)
    for text in (decorated, computed):
        assert check_child(child(text), SEED, entry_function="pack_circles").genome
