"""Turning an FM's reply into new file text: SEARCH/REPLACE blocks, fenced code, EVOLVE-BLOCKs.

Pure functions, no I/O. Every refusal is an `EditError` whose message is PUBLIC:
it is stored on the invalid agent and shown to the next prompt, so it names the
block, the file and the line, and says what to do differently.

Whole-file replies (`extract_code`) are handled here; SEARCH/REPLACE blocks live in
`meta_agent.search_replace`, EVOLVE-BLOCK regions in `meta_agent.evolve_blocks` and the
shared `EditError` / `EditBlock` in `meta_agent.edit_base`. This module re-exports them all,
so `from meta_agent.edits import ...` is the one import callers need.

The block format (aider / OpenEvolve style), 5-9 marker characters allowed:

    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE
"""

from __future__ import annotations

import ast

from meta_agent.edit_base import _FENCE_RE, EditBlock, EditError, _join_lines
from meta_agent.evolve_blocks import check_outside_unchanged, evolve_regions, splice_into_region
from meta_agent.search_replace import FORMAT_HINT, apply_blocks, parse_search_replace

__all__ = [
    "FORMAT_HINT", "EditBlock", "EditError", "apply_blocks", "check_outside_unchanged", "evolve_regions",
    "extract_code", "parse_search_replace", "splice_into_region",
]  # fmt: skip

_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string lower-cased, body) of every fenced block; an unclosed last fence runs to the end."""
    lines = text.splitlines()
    found: list[tuple[str, str]] = []
    i = 0
    while i < len(lines):
        opening = _FENCE_RE.match(lines[i])
        if opening is None:
            i += 1
            continue
        fence, info = opening.group(1), opening.group(2).lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            stripped = lines[j].strip()
            if stripped.startswith(fence) and stripped.strip(fence[0]) == "":
                break
            body.append(lines[j])
            j += 1
        found.append((info, _join_lines(body)))
        i = j + 1
    return found


def extract_code(text: str, *, language: str = "python") -> str:
    """The program in a whole-file reply.

    Candidates are fenced blocks whose info string is the language (python, py,
    python3 for Python) or empty. The choice is the LAST candidate at least half
    as long (in lines) as the longest one: models often end with the final program,
    but sometimes follow it with a short usage snippet that must not win. With no
    fence at all, Python text that parses (ast.parse) is used whole. Otherwise
    raises EditError. The result ends with exactly one newline.
    """
    tags = _PYTHON_TAGS if language == "python" else frozenset({language.lower()})
    blocks = _fenced_blocks(text)
    candidates = [body for info, body in blocks if info in tags or info == ""]
    candidates = [body for body in candidates if body.strip()]
    if candidates:
        longest = max(body.count("\n") for body in candidates)
        chosen = [body for body in candidates if 2 * body.count("\n") >= longest][-1]
        return chosen.rstrip() + "\n"
    fix = f"put the whole program in one ```{language} block"
    if blocks:
        kinds = ", ".join(sorted({info or "untagged" for info, _ in blocks}))
        raise EditError(
            f"the reply had no ```{language} block with code (found blocks tagged: {kinds}); {fix}",
            fix=fix,
        )
    if language == "python" and text.strip():
        try:
            ast.parse(text)
        except SyntaxError:
            pass
        else:
            return text.strip("\n").rstrip() + "\n"
    raise EditError(f"the reply had no ```{language} block; {fix}", fix=fix)
