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

import io
import tokenize
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


def _lead_alternatives(first: str = "", *, comment: bool = True) -> list[str]:
    """What may follow a line's indentation, blank lines aside (`_unmarked_line_rules`): a first character that
    is neither blank nor `#` nor a backtick (nor one of `first`), a comment (`comment`: no marker; left out
    with `comment=False`), or one or two backticks and more (no fence)."""
    lead = [f'[^ \\t#`\\n{"".join(_class_char(char) for char in first)}] [^\\n]* "\\n"']
    if comment:
        lead.append('"#" [# \\t]* comment')
    for count in (1, 2):
        lead.append(f'{gbnf_literal("`" * count)} [^`\\n] [^\\n]* "\\n"')
        lead.append(f'{gbnf_literal("`" * count)} "\\n"')
    return lead


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
    lead = ['"\\n"', *_lead_alternatives()]
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


def _class_char(char: str) -> str:
    """`char` as it may stand inside a GBNF character class: letters and digits as they are, others escaped."""
    if char.isascii() and char.isalnum():
        return char
    return (
        f"\\x{ord(char):02X}"
        if ord(char) <= 0xFF
        else f"\\u{ord(char):04X}"
        if ord(char) <= 0xFFFF
        else f"\\U{ord(char):08X}"
    )


def _code_part(line: str) -> str:
    """A line of Python without its indentation and its trailing comment (the whole stripped line when it does
    not tokenize on its own, as a line of a string spread over lines)."""
    text = line.strip()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, SyntaxError):
        return text
    comments = [token.start[1] for token in tokens if token.type == tokenize.COMMENT]
    return text[: comments[0]].rstrip() if comments else text


def changed_lines_grammar(old: str) -> str:
    """GBNF for new lines of Python in one fenced block (as `code_grammar(markers=False)`) that are not the
    `old` lines again. Indentation, blank lines, comment lines and trailing comments aside, the reply must
    differ from the old lines: in a character, or by a line less or more.

    Why: asked to rewrite named lines, qwen2.5-coder-1.5b wrote them again unchanged in 21 of 269 `lines` and
    `knob` draws of the suite's seed-0 rows at c997abb (strip packing: 14 draws, 15% of its FM time), and the
    redraw of such a copy copied them again in 8 of 13 (docs/results/generality.md, "Line edits that must
    change the lines, and ideas for whole programs only").

    Line j of the old code is matched by `same-j` (its indentation, then `same-j-0`); `same-j-i` has matched
    its first i characters and may go on with the next one or leave the line there, after which the reply is
    free (`newline*`). Old lines that open with `#` or a backtick: `code_grammar(markers=False)`."""
    lines = [code for code in (_code_part(line) for line in old.splitlines()) if code]
    if not lines or any(line[0] in "#`" for line in lines):
        return code_grammar(markers=False)
    free = '"\\n" newline*'
    # Not a comment: a comment line, like a blank one, leaves the state as it was (it changes no code).
    code_leads = [f"{lead} newline*" for lead in _lead_alternatives(comment=False)]
    rules = [f'root ::= {gbnf_literal("```python" + chr(10))} same-0 "```"', *_unmarked_line_rules()]
    for j, line in enumerate(lines + [""]):
        # The reply may stop before an old line (one line less), never after the last (the same again).
        rules.append(f"same-{j} ::= same-{j}-line?" if 0 < j < len(lines) else f"same-{j} ::= same-{j}-line")
        rules.append(f"same-{j}-line ::= [ \\t]* same-{j}-0")
        kept = [f'"\\n" same-{j}', f'"#" [# \\t]* comment same-{j}']
        if not line:  # every old line matched: a line of code more is the change
            rules.append(f"same-{j}-0 ::= " + " | ".join(kept + code_leads))
            break
        other = [f"{lead} newline*" for lead in _lead_alternatives(first=line[0], comment=False)]
        rules.append(f"same-{j}-0 ::= " + " | ".join([f"{gbnf_literal(line[0])} same-{j}-1", *kept, *other]))
        for i in range(1, len(line)):
            rules.append(
                f"same-{j}-{i} ::= {gbnf_literal(line[i])} same-{j}-{i + 1} | [^{_class_char(line[i])}\\n] "
                f"[^\\n]* {free} | {free}"
            )
        # The whole line matched: trailing blanks or a comment keep it the same; anything else changes it.
        rules.append(
            f'same-{j}-{len(line)} ::= [ \\t]* "\\n" same-{j + 1} | [ \\t]* "#" [^\\n]* "\\n" same-{j + 1} '
            f"| [ \\t]* [^ \\t#\\n] [^\\n]* {free}"
        )
    return "\n".join(rules) + "\n"
