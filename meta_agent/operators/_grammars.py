"""Grammars for constrained decoding: the reply formats, as GBNF (llama.cpp; vLLM reads GBNF too).

A small model asked for SEARCH/REPLACE blocks often writes no block, a broken
marker, or a SEARCH section that is not in the file. The SEARCH/REPLACE grammar
makes all three impossible: every block has its three markers, and a SEARCH
section can only be a contiguous run of lines that exist, as they are, inside
the file's editable (EVOLVE-BLOCK) regions. The code grammar makes a whole-file
or region reply one fenced block with no fence inside.

Pure functions of the parent's text; `fm.constrained` decides whether a request
carries them (meta_agent/llm/_client.py sends them to the server).
"""

from __future__ import annotations

from collections.abc import Sequence

from evaluators.base import Genome
from meta_agent.edits import evolve_regions

#: Blocks one constrained SEARCH/REPLACE reply may hold, and lines one SEARCH may copy (REPLACE may be any
#: length). Measured with qwen2.5-coder-0.5b on the circle-packing seed, 6 replies each (README, "Making
#: small models' replies count"): 3 blocks of any length 2/6 usable (the rest repeated the function
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


def _class_char(char: str) -> str:
    """`char` as an escape usable inside a GBNF character class (and a Python regex one)."""
    code = ord(char)
    return f"\\x{code:02X}" if code <= 0xFF else f"\\u{code:04X}" if code <= 0xFFFF else f"\\U{code:08X}"


#: A line with something on it, not opening with a reserved character (a marker or a fence).
_SOMETHING = 'something ::= [^<=>`\\n \\t] [^\\n]* "\\n" | [ \\t]+ [^ \\t\\n] [^\\n]* "\\n"'


def _differ_rules(name: str, line: str) -> list[str]:
    """Rules `<name>-0`..: any one line of new code except `line` itself. Read character by character: a line
    that leaves `line` at character p (another character, an earlier end, or more after its end)."""
    if not line:
        return [f"{name}-0 ::= something"]
    rules = []
    for p, char in enumerate(line):
        other = f"[^{_class_char(char)}<=>`\\n]" if p == 0 else f"[^{_class_char(char)}\\n]"
        rules.append(f'{name}-{p} ::= "\\n" | {other} [^\\n]* "\\n" | {gbnf_literal(char)} {name}-{p + 1}')
    rules.append(f'{name}-{len(line)} ::= [^\\n]+ "\\n"')
    return rules


def _block_rules(
    prefix: str, runs: Sequence[Sequence[str]], max_lines: int, differ: dict[str, str]
) -> tuple[list[str], list[str]]:
    """(rules, starts): from start symbol `<prefix>-s<r>-<i>-<i>`, SEARCH lines i.. of run r (1 to `max_lines`,
    contiguous), the `=======` marker, then a REPLACE that is not the SEARCH again (it may be empty, shorter,
    longer or differ in any line). Starts skip blank lines. `differ`: line -> its `_differ_rules` name, shared
    by every file (rules for a line not seen before are added here)."""
    rules: list[str] = []
    starts: list[str] = []
    for r, run in enumerate(runs):
        for line in run:
            if line not in differ:
                differ[line] = f"d{len(differ)}"
                rules += _differ_rules(differ[line], line)
        for i, line in enumerate(run):
            last = min(i + max_lines, len(run)) - 1
            for end in range(i, last + 1):
                # SEARCH copies lines i..end of the run, then ends (the REPLACE follows) or copies one more line.
                more = f" | {prefix}-s{r}-{i}-{end + 1}" if end < last else ""
                rules.append(f"{prefix}-s{r}-{i}-{end} ::= {gbnf_literal(run[end] + chr(10))} {prefix}-t{r}-{i}-{end}")
                rules.append(f'{prefix}-t{r}-{i}-{end} ::= "=======\\n" {prefix}-r{r}-{i}-{end + 1}?{more}')
            if line.strip():
                starts.append(f"{prefix}-s{r}-{i}-{i}")
        for end in range(1, len(run) + 1):
            for a in range(max(0, end - max_lines), end):
                # REPLACE has copied SEARCH lines up to a-1 exactly (SEARCH ends before `end`): copy line a too,
                # leave it for another line (then anything), or stop (unless the copy would be whole).
                copy = f"{prefix}-r{r}-{a + 1}-{end}" + ("?" if a + 1 < end else "")
                rules.append(
                    f"{prefix}-r{r}-{a}-{end} ::= {gbnf_literal(run[a] + chr(10))} {copy} | {differ[run[a]]}-0 newline*"
                )
            # The whole SEARCH copied: only more lines, one with something on it, make a change.
            rules.append(f"{prefix}-r{r}-{end}-{end} ::= newline* something newline*")
    return rules, starts


def search_replace_grammar(
    genome: Genome, *, max_blocks: int = MAX_BLOCKS, max_search_lines: int = MAX_SEARCH_LINES
) -> str | None:
    """GBNF for 1..max_blocks SEARCH/REPLACE blocks whose SEARCH copies 1..max_search_lines contiguous lines
    of `genome`'s editable regions, and whose REPLACE is anything but that SEARCH again (a block that would
    change nothing, the commonest reply of a small model asked for an edit).

    Blocks for the entry file carry no path line; blocks for another file start with its path on a line of
    its own. None when no file has an editable non-blank line (nothing a block could match).
    """
    rules: list[str] = []
    alternatives: list[str] = []
    differ: dict[str, str] = {}
    paths = [genome.entry] + sorted(p for p in genome.files if p != genome.entry)
    for number, path in enumerate(paths):
        runs = _editable_runs(genome.files[path])
        file_rules, starts = _block_rules(f"f{number}", runs, max(1, max_search_lines), differ)
        rules += file_rules  # with the rules of lines first seen here, which later files may use
        if not starts:
            continue
        rules.append(f"edit{number} ::= " + " | ".join(starts))
        head = "" if path == genome.entry else f"{gbnf_literal(path + chr(10))} "
        alternatives.append(f'{head}"<<<<<<< SEARCH\\n" edit{number} ">>>>>>> REPLACE\\n"')
    if not alternatives:
        return None
    optional = " ".join(["block?"] * (max(1, max_blocks) - 1))
    head = [f"root ::= block {optional}".rstrip(), "block ::= " + " | ".join(alternatives), _NEW_LINE, _SOMETHING]
    return "\n".join([*head, *rules]) + "\n"


def code_grammar(language: str = "python") -> str:
    """GBNF for one fenced code block (```python ... ```) with at least one line and no fence inside."""
    return (
        "\n".join([f'root ::= {gbnf_literal(f"```{language}" + chr(10))} code "```"', "code ::= newline+", _CODE_LINE])
        + "\n"
    )
