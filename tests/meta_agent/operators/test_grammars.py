"""Reply grammars for constrained decoding, checked as grammars: what they derive and what they cannot.

A small GBNF matcher below (tests only) decides whether a grammar derives a text, so the rules are tested
for meaning, not for spelling; tests/e2e/test_e2e_constrained.py sends them to the real llama.cpp server.
"""

from __future__ import annotations

import functools
import re

import pytest

from cambrian.evaluators.base import Genome
from cambrian.evaluators.circle_packing.benchmark import CirclePacking
from cambrian.evaluators.humaneval import HumanEval
from cambrian.meta_agent.operators import (
    DiffOperator,
    Focus,
    LinesOperator,
    ParentInfo,
    PromptContext,
    RewriteOperator,
    changed_lines_grammar,
    code_grammar,
    gbnf_literal,
    search_replace_grammar,
)

SEED = CirclePacking(start="grid").seed()
TEXT = SEED.files["packing.py"]


# ----- a tiny GBNF recogniser for the subset the grammars use --------------------------------------------

_TOKEN = re.compile(r'\s*("(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[\w-]+|[()|?*+])')


def _unescape(body: str) -> str:
    return re.sub(
        r"\\(x..|u....|U........|.)",
        lambda m: {"n": "\n", "t": "\t", "r": "\r"}.get(
            m.group(1), chr(int(m.group(1)[1:], 16)) if len(m.group(1)) > 1 else m.group(1)
        ),
        body,
    )


def parse_gbnf(text: str) -> dict[str, list]:
    rules: dict[str, list] = {}
    for line in text.strip().splitlines():
        name, _, body = line.partition("::=")
        tokens = [t for t in _TOKEN.findall(body)]
        rules[name.strip()] = tokens
    return rules


class Matcher:
    def __init__(self, grammar: str) -> None:
        self.rules = {name: self._alternatives(tokens) for name, tokens in parse_gbnf(grammar).items()}

    def _alternatives(self, tokens: list[str]) -> list[list[tuple[str, str]]]:
        alts: list[list[tuple[str, str]]] = [[]]
        for token in tokens:
            if token == "|":
                alts.append([])
            elif token in "?*+":
                item = alts[-1].pop()
                alts[-1].append((token, item))  # type: ignore[arg-type]
            else:
                alts[-1].append(("atom", token))
        return alts

    def ends(self, symbol: str, text: str, start: int) -> set[int]:
        return self._ends(symbol, text, start)

    @functools.cache  # noqa: B019 - per-matcher cache in a test helper
    def _ends(self, symbol: str, text: str, start: int) -> frozenset[int]:
        out: set[int] = set()
        for alt in self.rules[symbol]:
            out |= self._seq(alt, 0, text, start)
        return frozenset(out)

    def _seq(self, seq: list, i: int, text: str, pos: int) -> set[int]:
        if i == len(seq):
            return {pos}
        kind, item = seq[i]
        if kind == "atom":
            return {end for mid in self._atom(item, text, pos) for end in self._seq(seq, i + 1, text, mid)}
        inner = item[1]
        positions = {pos} if kind in "?*" else set()
        frontier = self._atom(inner, text, pos)
        positions |= frontier
        if kind in "*+":
            seen = set(frontier)
            while frontier:
                frontier = {e for p in frontier for e in self._atom(inner, text, p)} - seen
                seen |= frontier
            positions |= seen
        return {end for mid in positions for end in self._seq(seq, i + 1, text, mid)}

    def _atom(self, token: str, text: str, pos: int) -> set[int]:
        if token.startswith('"'):
            literal = _unescape(token[1:-1])
            return {pos + len(literal)} if text.startswith(literal, pos) else set()
        if token.startswith("["):
            if pos >= len(text):
                return set()
            return {pos + 1} if re.match(token.replace("\\n", "\n"), text[pos]) else set()
        return set(self.ends(token, text, pos))

    def derives(self, text: str) -> bool:
        return len(text) in self.ends("root", text, 0)


# ----- the tests ------------------------------------------------------------------------------------------

BLOCK = (
    "<<<<<<< SEARCH\n    radius = 0.5 / max(columns, rows)\n=======\n"
    "    radius = 0.49 / max(columns, rows)\n>>>>>>> REPLACE\n"
)


def test_search_replace_grammar_derives_a_real_edit_and_it_applies() -> None:
    grammar = search_replace_grammar(SEED)
    assert grammar is not None and Matcher(grammar).derives(BLOCK)
    assert "0.49" in DiffOperator().apply(SEED, BLOCK).files["packing.py"]
    doctest = BLOCK.replace("    radius = 0.49", '    """`radius`:\n    >>> 1 + 1\n    2\n    """\n    radius = 0.49')
    assert Matcher(grammar).derives(doctest)  # doctest and backtick lines are code, not markers
    assert not Matcher(grammar).derives(BLOCK + BLOCK)  # one block by default
    two = BLOCK + BLOCK.replace("radius = 0.5", "rows = math.ceil(n / columns)\n    radius = 0.5").replace(
        "    radius = 0.49 / max(columns, rows)\n",
        "    rows = math.ceil(n / columns)\n    radius = 0.48 / max(columns, rows)\n",
    )
    assert Matcher(search_replace_grammar(SEED, max_blocks=2)).derives(two)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "reply",
    [
        "Here is the change:\n" + BLOCK,  # prose
        BLOCK.replace(">>>>>>> REPLACE\n", ""),  # truncated
        BLOCK.replace("    radius = 0.5 / max", "    radius = 0.5/max"),  # SEARCH not copied exactly
        BLOCK.replace(
            "    radius = 0.5 / max(columns, rows)\n=", "    radius = 0.5 / max(columns, rows)\n    return circles\n="
        ),
        "<<<<<<< SEARCH\n# EVOLVE-BLOCK-START\nimport math\n=======\nimport math\n>>>>>>> REPLACE\n",  # a marker
        '<<<<<<< SEARCH\n"""Seed program for circle packing: n circles in the unit square, maximise the sum of radii.\n'
        "=======\nx\n>>>>>>> REPLACE\n",  # outside the block
        BLOCK.replace("    radius = 0.49", "```python\n    radius = 0.49"),  # a fence in REPLACE
        BLOCK * 2,  # more blocks than allowed
        "<<<<<<< SEARCH\n\n=======\nx = 1\n>>>>>>> REPLACE\n",  # a SEARCH of blank lines only
    ],
)
def test_search_replace_grammar_cannot_derive_what_fails_to_apply(reply: str) -> None:
    assert not Matcher(search_replace_grammar(SEED)).derives(reply)  # type: ignore[arg-type]


def test_search_lines_come_only_from_contiguous_runs_of_the_editable_region() -> None:
    matcher = Matcher(search_replace_grammar(SEED))  # type: ignore[arg-type]
    lines = TEXT.splitlines()
    first = lines.index("import math")
    last = lines.index("# EVOLVE-BLOCK-END") - 1
    whole = "\n".join(lines[first : last + 1]) + "\n"
    assert not matcher.derives(f"<<<<<<< SEARCH\n{whole}=======\n>>>>>>> REPLACE\n")  # more than 4 lines
    four = "\n".join(lines[first : first + 4]) + "\n"
    assert matcher.derives(f"<<<<<<< SEARCH\n{four}=======\n>>>>>>> REPLACE\n")
    long = Matcher(search_replace_grammar(SEED, max_search_lines=60))  # type: ignore[arg-type]
    assert long.derives(f"<<<<<<< SEARCH\n{whole}=======\n>>>>>>> REPLACE\n")
    gap = "    columns = math.ceil(math.sqrt(n))\n    radius = 0.5 / max(columns, rows)\n"  # skips a line
    assert not matcher.derives(f"<<<<<<< SEARCH\n{gap}=======\nx = 1\n>>>>>>> REPLACE\n")


def test_files_without_markers_and_other_files_are_editable_with_a_path_line() -> None:
    agent = HumanEval().seed()
    genome = Genome(files={**agent.files, "util.py": "def helper():\n    return 1\n"}, entry=agent.entry)
    matcher = Matcher(search_replace_grammar(genome))  # type: ignore[arg-type]
    assert matcher.derives("<<<<<<< SEARCH\nMAX_TOKENS = 512\n=======\nMAX_TOKENS = 700\n>>>>>>> REPLACE\n")
    util = "util.py\n<<<<<<< SEARCH\n    return 1\n=======\n    return 2\n>>>>>>> REPLACE\n"
    assert matcher.derives(util)
    assert not matcher.derives(util.replace("util.py\n", ""))  # that line is not in agent.py
    assert search_replace_grammar(Genome(files={"a.py": "\n\n"}, entry="a.py")) is None


def test_code_grammar_is_one_fenced_block_without_a_fence_inside() -> None:
    matcher = Matcher(code_grammar())
    region = TEXT[TEXT.index("import math") : TEXT.index("# EVOLVE-BLOCK-END")]
    assert matcher.derives(f"```python\n{region}```")
    assert (
        "import math"
        in RewriteOperator().apply(SEED, f"```python\n{region.replace('0.5', '0.49')}```").files["packing.py"]
    )
    assert not matcher.derives(f"Sure:\n```python\n{region}```")
    assert not matcher.derives(f"```python\n```python\n{region}```")
    assert not matcher.derives(f"```python\n{region}```\nDone.")
    assert matcher.derives('```python\n"""\n`pack_circles(n)` returns circles.\n>>> pack_circles(1)\n"""\n```')
    assert not matcher.derives("```python\n```")


def test_a_region_reply_cannot_write_a_marker_so_it_cannot_change_a_line_outside() -> None:
    matcher = Matcher(code_grammar(markers=False))
    region = TEXT[TEXT.index("import math") : TEXT.index("# EVOLVE-BLOCK-END")]
    assert matcher.derives(f"```python\n{region}```")
    for marker in ("# EVOLVE-BLOCK-END", "    ## EVOLVE-BLOCK-START", "#\tEVOLVE-BLOCK-END  # done"):
        assert not matcher.derives(f"```python\n{region}{marker}\n```"), marker
    for comment in ("# EVOLVE-BLOCKS are regions", "# EVOLVE", "# E", "#", "x = '# EVOLVE-BLOCK-END'", "  # note"):
        assert matcher.derives(f"```python\n{comment}\n```"), comment
    assert not matcher.derives("```python\n    ```python\nx = 1\n```")  # an indented fence opens none either
    whole = f"```python\n{TEXT.replace('0.5', '0.49')}```"
    assert not matcher.derives(whole)  # the whole file carries its markers: impossible, so never refused
    rewrite = RewriteOperator()
    assert not Matcher(rewrite.grammar(_ctx(SEED))).derives(whole)  # type: ignore[arg-type]
    unmarked = Genome(files={"a.py": "def f():\n    return 1\n"}, entry="a.py")
    assert Matcher(rewrite.grammar(_ctx(unmarked))).derives("```python\n# EVOLVE-BLOCK-START\nx = 1\n```")  # type: ignore[arg-type]
    lines = LinesOperator().grammar(_ctx(SEED, focus=Focus.find(SEED, "    radius = 0.5 / max(columns, rows)")))
    assert not Matcher(lines).derives("```python\n# EVOLVE-BLOCK-END\n```")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="Python"):
        code_grammar("rust", markers=False)


OLD_LINES = "    for i in range(n):\n        x = 0.5 * i  # spacing\n"


@pytest.mark.parametrize(
    "reply",
    [
        OLD_LINES,
        "for i in range(n):\n    x = 0.5 * i  # spacing\n",  # the indentation lost
        "    for i in range(n):\n        x = 0.5 * i\n",  # the comment dropped
        "    for i in range(n):   \n\n        # tuned\n        x = 0.5 * i  # tuned\n\n",  # blanks, comments
    ],
)
def test_a_line_edit_cannot_copy_the_old_lines(reply: str) -> None:
    grammar = changed_lines_grammar(OLD_LINES)
    assert not Matcher(grammar).derives(f"```python\n{reply}```")
    assert Matcher(code_grammar(markers=False)).derives(f"```python\n{reply}```")  # the plain block could


@pytest.mark.parametrize(
    "reply",
    [
        "    for i in range(n):\n        x = 0.25 * i  # spacing\n",  # a number
        "    for i in range(n):\n        x = 0.5 * i + 1\n",  # more on a line
        "    for i in range(n):\n        x = 0.5\n",  # less on a line
        "    for i in range(n):\n",  # a line less
        "    for i in range(n):\n        x = 0.5 * i\n        y = x\n",  # a line more
        "    for i in range(n):\n        y = 0.5 * i\n",  # the first character
        "x = [0.5 * i for i in range(n)]\n",  # all of it
        "    for i in range(n):\n        x = 0.5 * i\n`` a tick\n",
    ],
)
def test_a_line_edit_may_change_the_old_lines_anywhere(reply: str) -> None:
    assert Matcher(changed_lines_grammar(OLD_LINES)).derives(f"```python\n{reply}```")


def test_a_changed_line_edit_still_writes_no_marker_and_no_fence() -> None:
    matcher = Matcher(changed_lines_grammar("x = 1\n"))
    assert matcher.derives("```python\nx = 2\n```")
    for reply in ("# EVOLVE-BLOCK-END\nx = 2\n", "x = 2\n# EVOLVE-BLOCK-START\n", "x = 2\n```python\n"):
        assert not matcher.derives(f"```python\n{reply}```"), reply
    assert not matcher.derives("```python\n```")  # no empty reply either
    # Characters GBNF escapes in a class, and a line that does not tokenize alone, are matched as they are.
    tricky = 'a[i] = s[-1] ^ "#]\\\\" + "é"\n'
    assert not Matcher(changed_lines_grammar(tricky)).derives(f"```python\n{tricky}```")
    assert Matcher(changed_lines_grammar(tricky)).derives(f"```python\n{tricky.replace('-1', '-2')}```")
    unclosed = "    total = sum(values,\n"
    assert not Matcher(changed_lines_grammar(unclosed)).derives(f"```python\n{unclosed}```")
    assert changed_lines_grammar("# a comment\n") == code_grammar(markers=False)  # nothing to tell apart


def _ctx(parent: Genome, focus: Focus | None = None) -> PromptContext:
    info = ParentInfo(agent_id=1, genome=parent, score=1.0, feedback=None)
    return PromptContext(contract="c", benchmark="b", parent=info, focus=focus)


def test_literals_escape_quotes_backslashes_and_unicode() -> None:
    assert gbnf_literal('a "b" \\ c\n\té') == '"a \\"b\\" \\\\ c\\n\\t\\u00E9"'
    genome = Genome(files={"m.py": 's = "caf\\u00e9 \\\\ \\"q\\""  # é\n'}, entry="m.py")
    line = genome.files["m.py"]
    assert Matcher(search_replace_grammar(genome)).derives(f"<<<<<<< SEARCH\n{line}=======\nx = 1\n>>>>>>> REPLACE\n")  # type: ignore[arg-type]
