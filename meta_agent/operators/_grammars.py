"""Grammars for constrained decoding: the reply formats, as GBNF (llama.cpp; vLLM reads GBNF too).

A small model asked for SEARCH/REPLACE blocks often writes no block, a broken
marker, or a SEARCH section that is not in the file. The SEARCH/REPLACE grammar
makes all three impossible: every block has its three markers, and a SEARCH
section can only be a contiguous run of lines that exist, as they are, inside
the file's editable (EVOLVE-BLOCK) regions. The code grammar makes a whole-file
or region reply one fenced block with no fence inside; for a region's code or new
lines it also leaves out EVOLVE-BLOCK marker comments, so the reply is placed
between the parent's markers and cannot change a line outside them.

Pure functions of the parent's text; `fm.constrained` decides whether a request
carries them (meta_agent/llm/_client.py sends them to the server).
"""

from __future__ import annotations

from collections.abc import Sequence

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import evolve_regions

#: Blocks one constrained SEARCH/REPLACE reply may hold, and lines one SEARCH may copy (REPLACE may be any
#: length). Measured with qwen2.5-coder-0.5b on the circle-packing seed, 6 replies each
#: (docs/results/small-models.md): 3 blocks of any length 2/6 usable (the rest repeated the function
#: unchanged or ran past max_tokens), 1 block of any length 2/6, 2 blocks of <= 6 lines 3/6, 1 block of
#: <= 4 lines 6/6. A small anchor makes the model write the change, not copy the function.
MAX_BLOCKS = 1
MAX_SEARCH_LINES = 4


def gbnf_literal(text: str) -> str:
    """`text` as a GBNF string literal (quotes, backslashes, control and non-ASCII characters escaped)."""
    out = []
    for char in text:
        code = ord(char)
        if char == '"':
            out.append('\\"')
        elif char == "\\":
            out.append("\\\\")
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif char == "\r":
            out.append("\\r")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02X}")
        elif code > 0x7E:
            out.append(f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def _line_rule(name: str, reserved: str) -> str:
    """A rule for one line of new code: any line except one opening with 7 of a reserved character (a
    SEARCH/REPLACE marker) or 3 backticks (a fence). Doctest (>>>) and `name` lines stay possible."""
    alternatives = [f'[^{reserved}\\n] [^\\n]* "\\n"', '"\\n"']
    for char in reserved:
        limit = 3 if char == "`" else 7
        for count in range(1, limit):
            alternatives.append(f'{gbnf_literal(char * count)} [^{char}\\n] [^\\n]* "\\n"')
            alternatives.append(f'{gbnf_literal(char * count)} "\\n"')
    return f"{name} ::= " + " | ".join(alternatives)


_NEW_LINE = _line_rule("newline", "<=>`")
_CODE_LINE = _line_rule("newline", "`")


def _editable_runs(text: str) -> list[list[str]]:
    """The editable stretches of a file: its EVOLVE-BLOCK regions, or the whole file when it has none."""
    lines = text.splitlines()
    regions = evolve_regions(text) or [(0, len(lines))]
    return [lines[start:end] for start, end in regions if end > start]


def _search_rules(prefix: str, runs: Sequence[Sequence[str]], max_lines: int) -> tuple[list[str], list[str]]:
    """(rules, start symbols): rule `<prefix>-<r>-<i>-<k>` is line i of run r followed by at most k - 1 more
    lines of the run, so every derivation from a start symbol is a contiguous run of existing lines, at most
    `max_lines` long. Starts skip blank lines."""
    rules: list[str] = []
    starts: list[str] = []
    for r, run in enumerate(runs):
        for i, line in enumerate(run):
            for k in range(1, max_lines + 1):
                rest = f" {prefix}-{r}-{i + 1}-{k - 1}?" if k > 1 and i + 1 < len(run) else ""
                rules.append(f"{prefix}-{r}-{i}-{k} ::= {gbnf_literal(line + chr(10))}{rest}")
            if line.strip():
                starts.append(f"{prefix}-{r}-{i}-{max_lines}")
    return rules, starts


def search_replace_grammar(
    genome: Genome, *, max_blocks: int = MAX_BLOCKS, max_search_lines: int = MAX_SEARCH_LINES
) -> str | None:
    """GBNF for 1..max_blocks SEARCH/REPLACE blocks whose SEARCH copies 1..max_search_lines contiguous lines
    of `genome`'s editable regions (REPLACE may be any length).

    Blocks for the entry file carry no path line; blocks for another file start with its path on a line of
    its own. None when no file has an editable non-blank line (nothing a block could match).
    """
    rules: list[str] = []
    alternatives: list[str] = []
    paths = [genome.entry] + sorted(p for p in genome.files if p != genome.entry)
    for number, path in enumerate(paths):
        file_rules, starts = _search_rules(f"f{number}", _editable_runs(genome.files[path]), max(1, max_search_lines))
        if not starts:
            continue
        rules += file_rules
        rules.append(f"search{number} ::= " + " | ".join(starts))
        head = "" if path == genome.entry else f"{gbnf_literal(path + chr(10))} "
        alternatives.append(f'{head}"<<<<<<< SEARCH\\n" search{number} "=======\\n" newline* ">>>>>>> REPLACE\\n"')
    if not alternatives:
        return None
    optional = " ".join(["block?"] * (max(1, max_blocks) - 1))
    return (
        "\n".join([f"root ::= block {optional}".rstrip(), "block ::= " + " | ".join(alternatives), _NEW_LINE, *rules])
        + "\n"
    )


def _unmarked_line_rules() -> list[str]:
    """Rules for one line of Python that is no EVOLVE-BLOCK marker comment (`# EVOLVE-BLOCK-START`, any
    indentation, any number of `#`) and opens no fence: the indentation, then a first character that is
    neither blank nor `#` nor a backtick, or a comment whose text does not open with `EVOLVE-BLOCK-`."""
    marker = "EVOLVE-BLOCK-"
    comment = ['"\\n"', f'[^# \\t{marker[0]}\\n] [^\\n]* "\\n"']
    for count in range(1, len(marker)):
        excluded = marker[count] if marker[count].isalnum() else f"\\x{ord(marker[count]):02X}"
        comment.append(f'{gbnf_literal(marker[:count])} [^{excluded}\\n] [^\\n]* "\\n"')
        comment.append(f'{gbnf_literal(marker[:count])} "\\n"')
    lead = ['"\\n"', '[^ \\t#`\\n] [^\\n]* "\\n"', '"#" [# \\t]* comment']
    for count in (1, 2):
        lead.append(f'{gbnf_literal("`" * count)} [^`\\n] [^\\n]* "\\n"')
        lead.append(f'{gbnf_literal("`" * count)} "\\n"')
    return ["newline ::= [ \\t]* lead", "lead ::= " + " | ".join(lead), "comment ::= " + " | ".join(comment)]


def code_grammar(language: str = "python", *, markers: bool = True) -> str:
    """GBNF for one fenced code block (```python ... ```) with at least one line and no fence inside.

    `markers=False` (Python only) also makes EVOLVE-BLOCK marker comments impossible: for a reply that is
    the code of one region, or new lines, which the operator places between the markers itself, so no
    reply can move a marker or change a line outside the region.
    """
    if not markers and language != "python":
        raise ValueError(f"code_grammar(markers=False) knows Python's comments only, not {language!r}")
    lines = [_CODE_LINE] if markers else _unmarked_line_rules()
    root = f'root ::= {gbnf_literal(f"```{language}" + chr(10))} code "```"'
    return "\n".join([root, "code ::= newline+", *lines]) + "\n"
