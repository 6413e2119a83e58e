"""Grammars for constrained decoding: the reply formats, as GBNF (llama.cpp; vLLM reads GBNF too).

A small model asked for SEARCH/REPLACE blocks often writes no block, a broken
marker, or a SEARCH section that is not in the file. The SEARCH/REPLACE grammar
makes all three impossible: every block has its three markers, and a SEARCH
section can only be a contiguous run of lines that exist, as they are, inside
the file's editable (EVOLVE-BLOCK) regions. The code grammar makes a whole-file
or region reply one fenced block with no fence inside.

Pure functions of the parent's text; `fm.constrained` decides whether a request
carries them (meta_agent/llm/client.py sends them to the server).
"""

from __future__ import annotations

from typing import Sequence

from evaluators.base import Genome
from meta_agent.edits import evolve_regions

#: Blocks one SEARCH/REPLACE reply may hold: enough for a real change, few enough that a model cannot loop.
MAX_BLOCKS = 3

# A line of new code: anything but a line starting with a marker character or a fence (never Python).
_NEW_LINE = 'newline ::= [^<=>`\\n] [^\\n]* "\\n" | "\\n"'


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


def _editable_runs(text: str) -> list[list[str]]:
    """The editable stretches of a file: its EVOLVE-BLOCK regions, or the whole file when it has none."""
    lines = text.splitlines()
    regions = evolve_regions(text) or [(0, len(lines))]
    return [lines[start:end] for start, end in regions if end > start]


def _search_rules(prefix: str, runs: Sequence[Sequence[str]]) -> tuple[list[str], list[str]]:
    """(rules, start symbols): rule `<prefix>-<r>-<i>` is line i of run r, optionally followed by line i+1,
    so every derivation from a start symbol is a contiguous run of existing lines. Starts skip blank lines."""
    rules: list[str] = []
    starts: list[str] = []
    for r, run in enumerate(runs):
        for i, line in enumerate(run):
            name = f"{prefix}-{r}-{i}"
            rest = f" {prefix}-{r}-{i + 1}?" if i + 1 < len(run) else ""
            rules.append(f"{name} ::= {gbnf_literal(line + chr(10))}{rest}")
            if line.strip():
                starts.append(name)
    return rules, starts


def search_replace_grammar(genome: Genome, *, max_blocks: int = MAX_BLOCKS) -> str | None:
    """GBNF for 1..max_blocks SEARCH/REPLACE blocks whose SEARCH copies lines of `genome`'s editable regions.

    Blocks for the entry file carry no path line; blocks for another file start with its path on a line of
    its own. None when no file has an editable non-blank line (nothing a block could match).
    """
    rules: list[str] = []
    alternatives: list[str] = []
    paths = [genome.entry] + sorted(p for p in genome.files if p != genome.entry)
    for number, path in enumerate(paths):
        file_rules, starts = _search_rules(f"f{number}", _editable_runs(genome.files[path]))
        if not starts:
            continue
        rules += file_rules
        rules.append(f"search{number} ::= " + " | ".join(starts))
        head = "" if path == genome.entry else f"{gbnf_literal(path + chr(10))} "
        alternatives.append(
            f'{head}"<<<<<<< SEARCH\\n" search{number} "=======\\n" newline* ">>>>>>> REPLACE\\n"'
        )
    if not alternatives:
        return None
    optional = " ".join(["block?"] * (max(1, max_blocks) - 1))
    return "\n".join(
        [f"root ::= block {optional}".rstrip(), "block ::= " + " | ".join(alternatives), _NEW_LINE, *rules]
    ) + "\n"


def code_grammar(language: str = "python") -> str:
    """GBNF for one fenced code block (```python ... ```) with at least one line and no fence inside."""
    return "\n".join(
        [f'root ::= {gbnf_literal(f"```{language}" + chr(10))} code "```"', "code ::= newline+", _NEW_LINE]
    ) + "\n"
