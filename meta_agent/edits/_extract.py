"""Whole-file replies: the code of a fenced block, with prose and stray fences trimmed (`extract_code`)."""

from __future__ import annotations

import ast
import functools
import re

from cambrian.meta_agent.edits._base import _FENCE_ONLY_RE, _FENCE_RE, EditError, _join_lines

_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(info string lower-cased, body) of every fenced block; an unclosed last fence runs to the end.

    Inside a block, a fence line with an info string (```python) is a stray re-opening, not code: dropped.
    """
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
            if not _FENCE_ONLY_RE.match(lines[j]):
                body.append(lines[j])
            j += 1
        found.append((info, _join_lines(body)))
        i = j + 1
    return found


# A line of prose around code: a sentence, a markdown bullet or emphasis (a `# heading` is a Python comment).
_PROSE_RE = re.compile(
    r"^(?:\*\*|[-*]\s+[A-Z`]|\d+\.\s+[A-Z`]|(?:Here|This|The|Note|In this|Explanation|I |We |It |"
    r"These|Now|Finally|Changes|Improvements?)\b)"
)


def _is_prose(line: str) -> bool:
    stripped = line.strip()
    if not stripped or line[0] in " \t":
        return False
    if _PROSE_RE.match(stripped):
        return True
    # A sentence: three or more words, no code punctuation, and not a Python statement or header.
    if len(stripped.split()) < 3 or not stripped[0].isalpha() or re.search(r"[=(\[{]", stripped):
        return False
    return not (_parses(stripped) or _parses(stripped + "\n    pass"))


@functools.lru_cache(maxsize=32)  # extract_code asks about the same text up to three times
def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return True


def trim_prose(code: str) -> str:
    """`code` without the lines of prose a reply put before or after it, when that makes it parse.

    Only prose-like lines (sentences, markdown) and blank lines at either end are dropped, never code,
    so a program with a real syntax error is returned unchanged and refused by the syntax check.
    """
    if _parses(code):
        return code
    lines = code.splitlines()
    first, last = 0, len(lines)
    while first < last and (not lines[first].strip() or _is_prose(lines[first])):
        first += 1
    while last > first and (not lines[last - 1].strip() or _is_prose(lines[last - 1])):
        last -= 1
    trimmed = "\n".join(lines[first:last]) + "\n"
    return trimmed if (first or last < len(lines)) and _parses(trimmed) else code


def extract_code(text: str, *, language: str = "python") -> str:
    """The program in a whole-file reply.

    Candidates are fenced blocks whose info string is the language (python, py,
    python3 for Python) or empty. The choice is the LAST candidate at least half
    as long (in lines) as the longest one: models often end with the final program,
    but sometimes follow it with a short usage snippet that must not win. Fence
    lines never reach the code (a stray ```python inside a block is dropped), nor
    do lines of prose before or after Python code that then parses (`trim_prose`).
    With no fence at all, Python text that parses (after `trim_prose`) is used.
    Otherwise raises EditError. The result ends with exactly one newline.
    """
    tags = _PYTHON_TAGS if language == "python" else frozenset({language.lower()})
    blocks = _fenced_blocks(text)
    candidates = [body for info, body in blocks if info in tags or info == ""]
    candidates = [body for body in candidates if body.strip()]
    # Stray fences can cut a program in pieces (a closing ``` in the middle, an empty block first):
    # the reply with every fence line dropped and prose trimmed is the fallback when it parses.
    merged = ""
    if all(info in tags or info == "" for info, _ in blocks):  # a block in another language is not the program
        merged = trim_prose(
            _join_lines([line for line in text.strip("\n").splitlines() if not _FENCE_ONLY_RE.match(line)])
        )
    if candidates:
        longest = max(body.count("\n") for body in candidates)
        chosen = [body for body in candidates if 2 * body.count("\n") >= longest][-1]
        if language != "python":
            return chosen.rstrip() + "\n"
        code = trim_prose(chosen)
        return (code if _parses(code) or not merged or not _parses(merged) else merged).rstrip() + "\n"
    fix = f"put the whole program in one ```{language} block"
    if language == "python" and merged.strip() and _parses(merged):
        return merged.rstrip() + "\n"
    if blocks:
        kinds = ", ".join(sorted({info or "untagged" for info, _ in blocks}))
        raise EditError(
            f"the reply had no ```{language} block with code (found blocks tagged: {kinds}); {fix}",
            fix=fix,
        )
    raise EditError(f"the reply had no ```{language} block; {fix}", fix=fix)
