"""The AST baseline operator: seeded, parseable, EVOLVE-BLOCK-bound edits of numbers and operators."""

from __future__ import annotations

import ast

import numpy as np
import pytest

from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing import CirclePacking
from cambrian.evaluators.deceptive import DeceptiveTrap, check_values, value_to_bit
from cambrian.meta_agent.edits import EditError
from cambrian.meta_agent.operators import AstMutation, collect_sites

GUARDED = """\
\"\"\"Constants outside the block must never change: 7, 2.5, a + b.\"\"\"
LIMIT = 7 + 2.5  # outside
# EVOLVE-BLOCK-START
def score(a, b):
    if a < b and b != 0:
        return a * 0.5 + b // 3  # inside
    return -a
# EVOLVE-BLOCK-END
TAIL = LIMIT * 2 - 1 > 0 or False
"""


def genome(text: str, *, entry: str = "main.py", **others: str) -> Genome:
    return Genome(files={entry: text, **others}, entry=entry)


def values_of(text: str) -> list[int | float]:
    """The VALUES list of a deceptive program, read without executing it."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "VALUES":
            return ast.literal_eval(node.value)
    raise AssertionError("no VALUES assignment")


def test_same_seed_same_child() -> None:
    operator = AstMutation()
    parent = genome(GUARDED)
    first = operator.mutate_with_note(parent, np.random.default_rng(42))
    again = operator.mutate_with_note(parent, np.random.default_rng(42))
    assert first == again
    children = {operator.mutate(parent, np.random.default_rng(seed)).files["main.py"] for seed in range(30)}
    assert len(children) > 10  # different seeds explore different edits


def test_edits_stay_inside_the_evolve_block() -> None:
    operator = AstMutation()
    lines = GUARDED.splitlines(keepends=True)
    start = next(i for i, line in enumerate(lines) if "EVOLVE-BLOCK-START" in line)
    end = next(i for i, line in enumerate(lines) if "EVOLVE-BLOCK-END" in line)
    kinds: set[str] = set()
    for seed in range(200):
        child, note = operator.mutate_with_note(genome(GUARDED), np.random.default_rng(seed))
        text = child.files["main.py"]
        ast.parse(text)
        assert text != GUARDED
        child_lines = text.splitlines(keepends=True)
        assert child_lines[: start + 1] == lines[: start + 1]
        assert child_lines[len(child_lines) - (len(lines) - end) :] == lines[end:]
        assert "# inside" in text  # comments survive: edits replace spans, not the file
        assert note.startswith("line ") and " -> " in note
        kinds.update(part.split(": ")[1].split(" -> ")[0] for part in note.split("; "))
    # Every kind of site inside the block was edited at least once: numbers, + * //, <, !=, and, unary minus.
    assert {"0.5", "3", "*", "+", "//", "<", "!=", "and", "-", "0"} <= kinds


def test_sites_of_every_kind_with_exact_spans() -> None:
    text = 's = "é"; x = -3 ** 2 + f(a, -b) * 2.5\nif a < b <= c and not d or e != 1.0:\n    y = t[1:-1] % 2 ** 3\n'
    sites = collect_sites(text)
    source = text.encode("utf-8")
    assert [(s.kind, s.text) for s in sites] == [
        ("negation", "-"),
        ("number", "3"),
        ("binop", "**"),
        ("number", "2"),
        ("binop", "+"),
        ("negation", "-"),
        ("binop", "*"),
        ("number", "2.5"),
        ("compare", "<"),
        ("compare", "<="),
        ("boolop", "and"),
        ("boolop", "or"),
        ("compare", "!="),
        ("number", "1.0"),
        ("number", "1"),
        ("number", "-1"),
        ("binop", "%"),
        ("number", "2"),
        ("binop", "**"),
        ("number", "3"),
    ]
    # Byte spans (the "é" before them is two bytes) hold exactly the site's text.
    assert all(source[s.start : s.end].decode() == s.text for s in sites)
    # A negative number written as the base of ** needs parentheses; elsewhere it does not.
    assert [s.wrap_negative for s in sites if s.kind == "number" and s.text == "2"] == [False, True]


def test_every_child_parses_and_changes_the_circle_packing_seed() -> None:
    operator = AstMutation()
    seed = CirclePacking().seed()
    texts = set()
    for rng_seed in range(100):
        child = operator.mutate(seed, np.random.default_rng(rng_seed))
        text = child.files[seed.entry]
        ast.parse(text)
        assert text != seed.files[seed.entry]
        assert text.split("# EVOLVE-BLOCK-START")[0] == seed.files[seed.entry].split("# EVOLVE-BLOCK-START")[0]
        texts.add(text)
    assert len(texts) > 30


def test_bit_flip_rates_on_the_deceptive_seed() -> None:
    """The docstring's numbers: how often one mutation flips one bit, or two bits of one block."""
    operator = AstMutation()
    bench = DeceptiveTrap()
    seed = bench.seed()
    parent_bits = [value_to_bit(v) for v in values_of(seed.files["bits.py"])]
    one_bit = two_in_block = completes_block = 0
    trials = 500
    for rng_seed in range(trials):
        child = operator.mutate(seed, np.random.default_rng(rng_seed))
        values = values_of(child.files["bits.py"])
        assert len(values) == 16
        flips = [a != value_to_bit(b) for a, b in zip(parent_bits, values)]
        per_block = [sum(flips[i : i + 4]) for i in range(0, 16, 4)]
        one_bit += sum(flips) == 1
        two_in_block += max(per_block) >= 2
        check = check_values(values, blocks=4, block_size=4)
        completes_block += 4 in check.ones
    print(
        f"\nover {trials} mutations of the deceptive seed: exactly one bit flipped {one_bit / trials:.3f}, "
        f">= 2 bits of one block {two_in_block / trials:.3f}, a block completed {completes_block / trials:.3f}"
    )
    assert 0.6 <= one_bit / trials <= 0.9
    assert 0.01 <= two_in_block / trials <= 0.15
    assert completes_block / trials <= 0.05


def test_all_zeros_attractor_is_never_escaped() -> None:
    """With max_edits = 3 < k = 4 no child of all zeros scores above the attractor's 0.75."""
    operator = AstMutation()
    parent = genome("# EVOLVE-BLOCK-START\nVALUES = [" + ", ".join(["0"] * 16) + "]\n# EVOLVE-BLOCK-END\n")
    children = [operator.mutate(parent, np.random.default_rng(s)).files["main.py"] for s in range(300)]
    scores = [check_values(values_of(text), blocks=4, block_size=4).score for text in children]
    assert max(scores) <= 0.75
    assert min(scores) < 0.75  # the mutations do flip bits; they just cannot climb


def test_only_the_entry_file_changes() -> None:
    parent = genome(GUARDED, **{"helper.py": "RATE = 0.25\n"})
    child = AstMutation().mutate(parent, np.random.default_rng(3))
    assert child.files["helper.py"] == "RATE = 0.25\n" and child.entry == "main.py"
    assert child.files["main.py"] != GUARDED


def test_float_edits_round_trip() -> None:
    operator = AstMutation(max_edits=1, float_sigma=0.2)
    parent = genome("x = 0.0\n")
    for s in range(50):
        child, note = operator.mutate_with_note(parent, np.random.default_rng(s))
        written = note.split(" -> ")[1]
        assert ast.literal_eval(written) == float(written) != 0.0
        assert child.files["main.py"] == f"x = {written}\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("def f(x):\n    return x\n", "no numeric constants or operators inside its EVOLVE-BLOCK"),
        ("A = 1 + 2\n# EVOLVE-BLOCK-START\nname = 'x'\n# EVOLVE-BLOCK-END\n", "no numeric constants or operators"),
        ("def f(:\n", "does not parse as Python"),
        ("# EVOLVE-BLOCK-START\nx = 1\n", "EVOLVE-BLOCK-START at line 1 with no EVOLVE-BLOCK-END"),
    ],
    ids=["nothing", "only-outside", "syntax-error", "unbalanced-markers"],
)
def test_nothing_to_mutate_raises_edit_error(text: str, reason: str) -> None:
    with pytest.raises(EditError) as info:
        AstMutation().mutate(genome(text), np.random.default_rng(0))
    assert reason in str(info.value)
    assert info.value.fix


@pytest.mark.parametrize("kwargs", [{"max_edits": 0}, {"float_sigma": 0.0}, {"float_sigma": float("nan")}])
def test_bad_settings_are_refused(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        AstMutation(**kwargs)  # type: ignore[arg-type]
