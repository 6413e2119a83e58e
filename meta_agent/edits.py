"""Turning an FM's reply into new file text: SEARCH/REPLACE blocks, fenced code, EVOLVE-BLOCKs.

Pure functions, no I/O. Every refusal is an `EditError` whose message is PUBLIC:
it is stored on the invalid agent and shown to the next prompt, so it names the
block, the file and the line, and says what to do differently.

The block format (aider / OpenEvolve style), 5-9 marker characters allowed:

    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

FORMAT_HINT = "<<<<<<< SEARCH / old lines / ======= / new lines / >>>>>>> REPLACE"

_SEARCH_RE = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER_RE = re.compile(r"^\s*={5,9}\s*$")
_REPLACE_RE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
_FENCE_RE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`]*)")
# A path line names one file: `packing.py`, ### packing.py, **src/util.py**:, File: packing.py
_PATH_LINE_RE = re.compile(
    r"^\s*(?:#+\s*|\*+\s*|//\s*)?(?:file(?:name)?\s*:\s*)?[`*'\"]*"
    r"(?P<path>[\w.\-/]*\w\.[A-Za-z0-9_]{1,10})[`*'\"]*\s*:?\s*$",
    re.IGNORECASE,
)
# Markers count only inside a comment, so a string literal mentioning them is ignored.
_MARKER_RE = re.compile(
    r"^\s*(?:#+|//+|--|;+|%+|/\*+|<!--|\*+|')\s*EVOLVE-BLOCK-(?P<kind>START|END)\b"
)
_PYTHON_TAGS = frozenset({"python", "py", "python3", "py3"})


class EditError(Exception):
    """An FM reply that could not be turned into a child genome (the candidate's fault).

    `str(error)` is the public reason, complete on its own; `fix` names the fix.
    """

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix or "follow the reply format shown in the prompt exactly"


@dataclass(frozen=True)
class EditBlock:
    """One SEARCH/REPLACE block of a reply.

    path: the file named on the line before `<<<<<<< SEARCH`, or None (the entry file).
    search, replace: the lines of each section, each ending in a newline ("" = no lines).
    index: the block's number in the reply, from 1.
    """

    path: str | None
    search: str
    replace: str
    index: int


# ---------------------------------------------------------------- parsing


def _join_lines(lines: Sequence[str]) -> str:
    return "".join(line + "\n" for line in lines)


def _strip_section_fence(lines: list[str]) -> list[str]:
    # Some models wrap a section's code in its own ``` fence; the fence is not code.
    if len(lines) >= 2 and _FENCE_RE.match(lines[0]) and lines[-1].strip().strip("`~") == "":
        return lines[1:-1]
    return lines


def _path_before(lines: Sequence[str], search_line: int) -> str | None:
    """The file path written right before a SEARCH marker (an opening fence may sit between)."""
    i = search_line - 1
    if i >= 0 and _FENCE_RE.match(lines[i]):
        i -= 1  # "packing.py", then "```python", then the marker
    if i < 0:
        return None
    match = _PATH_LINE_RE.match(lines[i])
    return match.group("path").removeprefix("./") if match else None


def parse_search_replace(text: str) -> list[EditBlock]:
    """Parse every SEARCH/REPLACE block of an FM reply, in order.

    Tolerates 5-9 marker characters, trailing spaces, blocks inside ``` fences and
    an optional file path line right before `<<<<<<< SEARCH`. Text outside blocks
    is ignored. Raises EditError naming the block for a malformed block, and when
    the reply holds no block at all.
    """
    lines = text.splitlines()
    blocks: list[EditBlock] = []
    i = 0
    while i < len(lines):
        if _REPLACE_RE.match(lines[i]):
            raise EditError(
                f"line {i + 1} of the reply is a >>>>>>> REPLACE marker with no <<<<<<< SEARCH "
                f"before it; every block needs all three markers: {FORMAT_HINT}",
                fix="start every block with a <<<<<<< SEARCH line",
            )
        if not _SEARCH_RE.match(lines[i]):
            i += 1
            continue
        index = len(blocks) + 1
        path = _path_before(lines, i)
        search: list[str] = []
        replace: list[str] = []
        section = search
        seen_divider = False
        j = i + 1
        while True:
            if j >= len(lines) or _SEARCH_RE.match(lines[j]):
                missing = ">>>>>>> REPLACE" if seen_divider else "======="
                raise EditError(
                    f"SEARCH/REPLACE block {index} is missing its {missing} line; "
                    f"use the format {FORMAT_HINT}",
                    fix="end the SEARCH section with ======= and the block with >>>>>>> REPLACE",
                )
            line = lines[j]
            if _DIVIDER_RE.match(line):
                if seen_divider:
                    raise EditError(
                        f"SEARCH/REPLACE block {index} has more than one ======= line; "
                        f"use the format {FORMAT_HINT}",
                        fix="write exactly one ======= line per block",
                    )
                seen_divider = True
                section = replace
            elif _REPLACE_RE.match(line):
                if not seen_divider:
                    raise EditError(
                        f"SEARCH/REPLACE block {index} has no ======= line between SEARCH and "
                        f"REPLACE; use the format {FORMAT_HINT}",
                        fix="separate the old lines from the new lines with a ======= line",
                    )
                break
            else:
                section.append(line)
            j += 1
        blocks.append(
            EditBlock(
                path=path,
                search=_join_lines(_strip_section_fence(search)),
                replace=_join_lines(_strip_section_fence(replace)),
                index=index,
            )
        )
        i = j + 1
    if not blocks:
        raise EditError(
            f"the reply had no SEARCH/REPLACE block; use the format {FORMAT_HINT}",
            fix="reply with one or more SEARCH/REPLACE blocks, nothing else",
        )
    return blocks


# ---------------------------------------------------------------- EVOLVE-BLOCK regions


def evolve_regions(text: str, *, path: str = "the file") -> list[tuple[int, int]]:
    """The editable line spans of a file: 0-based, half-open `(start, end)` line indices.

    A span holds the lines strictly between an `EVOLVE-BLOCK-START` and the next
    `EVOLVE-BLOCK-END` comment (any comment syntax: #, //, --, /* */, <!-- -->, ...);
    the marker lines are outside every span. An empty list means the file has no
    markers and every line may change. Unbalanced markers raise EditError.
    """
    regions: list[tuple[int, int]] = []
    open_at: int | None = None
    for number, line in enumerate(text.splitlines()):
        match = _MARKER_RE.match(line)
        if match is None:
            continue
        if match.group("kind") == "START":
            if open_at is not None:
                raise EditError(
                    f"{path} has a second EVOLVE-BLOCK-START at line {number + 1} before the "
                    f"EVOLVE-BLOCK-END of the one at line {open_at}",
                    fix="keep the EVOLVE-BLOCK markers exactly as they were",
                )
            open_at = number + 1
        else:
            if open_at is None:
                raise EditError(
                    f"{path} has an EVOLVE-BLOCK-END at line {number + 1} with no "
                    f"EVOLVE-BLOCK-START before it",
                    fix="keep the EVOLVE-BLOCK markers exactly as they were",
                )
            regions.append((open_at, number))
            open_at = None
    if open_at is not None:
        raise EditError(
            f"{path} has an EVOLVE-BLOCK-START at line {open_at} with no EVOLVE-BLOCK-END after it",
            fix="keep the EVOLVE-BLOCK markers exactly as they were",
        )
    return regions


def _outside_lines(lines: Sequence[str], regions: Sequence[tuple[int, int]]) -> list[tuple[int, str]]:
    """(line number from 1, text without trailing whitespace) of every line outside the regions."""
    inside = set()
    for start, end in regions:
        inside.update(range(start, end))
    kept = [(n + 1, line.rstrip()) for n, line in enumerate(lines) if n not in inside]
    while kept and kept[-1][1] == "":
        kept.pop()  # a fenced reply often drops the file's final blank lines
    return kept


def _first_non_blank(lines: Sequence[tuple[int, str]]) -> tuple[int, str]:
    return next((item for item in lines if item[1].strip()), lines[0])


def check_outside_unchanged(old: str, new: str, *, path: str = "the entry file") -> None:
    """Refuse a whole-file rewrite that changed text outside the EVOLVE-BLOCK regions of `old`.

    Lines compare with trailing whitespace removed. Files without markers may change
    everywhere. Raises EditError naming the first differing line.
    """
    old_regions = evolve_regions(old, path=path)
    if not old_regions:
        return
    rule = "only code between # EVOLVE-BLOCK-START and # EVOLVE-BLOCK-END may change"
    fix = "copy every line outside the EVOLVE-BLOCK markers unchanged, markers included"
    try:
        new_regions = evolve_regions(new, path=f"the rewritten {path}")
    except EditError as error:
        raise EditError(f"{error}; {rule}", fix=fix) from None
    if len(new_regions) != len(old_regions):
        raise EditError(
            f"the rewritten {path} has {len(new_regions)} EVOLVE-BLOCK region(s) where the "
            f"original has {len(old_regions)}; {rule}",
            fix=fix,
        )
    old_outside = _outside_lines(old.splitlines(), old_regions)
    new_outside = _outside_lines(new.splitlines(), new_regions)
    for (old_no, old_line), (new_no, new_line) in zip(old_outside, new_outside):
        if old_line != new_line:
            raise EditError(
                f"the rewrite changed line {new_no} of {path}, outside the EVOLVE-BLOCK markers "
                f"(line {old_no} was {old_line!r}, now {new_line!r}); {rule}",
                fix=fix,
            )
    if len(old_outside) > len(new_outside):
        number, line = _first_non_blank(old_outside[len(new_outside) :])
        raise EditError(
            f"the rewrite removed line {number} ({line!r}) of {path}, outside the EVOLVE-BLOCK "
            f"markers; {rule}",
            fix=fix,
        )
    if len(new_outside) > len(old_outside):
        number, line = _first_non_blank(new_outside[len(old_outside) :])
        raise EditError(
            f"the rewrite added line {number} ({line!r}) to {path}, outside the EVOLVE-BLOCK "
            f"markers; {rule}",
            fix=fix,
        )


def splice_into_region(old: str, code: str, *, path: str = "the entry file") -> str:
    """`old` with its single EVOLVE-BLOCK region replaced by `code`, a reply written without markers.

    Small models often return the file without its marker comments. The reply's
    leading lines that also occur before the region in `old` (imports, docstring)
    and its trailing lines that also occur after it are dropped (compared without
    trailing whitespace; blank lines too); the rest becomes the region's content.
    The text outside the region is therefore unchanged by construction. Raises
    EditError when `old` has no region or several, or nothing is left to splice.
    """
    regions = evolve_regions(old, path=path)
    if len(regions) != 1:
        raise EditError(
            f"the rewritten {path} has no EVOLVE-BLOCK markers, and the original has "
            f"{len(regions)} regions, so the new code cannot be placed",
            fix="copy the whole file, EVOLVE-BLOCK marker comments included, and change only the "
            "code between them",
        )
    (start, end), = regions
    lines = old.splitlines()
    before = {line.rstrip() for line in lines[: start - 1]} | {""}
    after = {line.rstrip() for line in lines[end + 1 :]} | {""}
    body = code.splitlines()
    first = 0
    while first < len(body) and body[first].rstrip() in before:
        first += 1
    last = len(body)
    while last > first and body[last - 1].rstrip() in after:
        last -= 1
    if first == last:
        raise EditError(
            f"the rewritten {path} has no code for the EVOLVE-BLOCK region: every line of the reply "
            f"already occurs outside the markers",
            fix="write the improved code that belongs between the EVOLVE-BLOCK markers",
        )
    spliced = lines[:start] + body[first:last] + lines[end:]
    return "\n".join(spliced) + "\n"


# ---------------------------------------------------------------- applying blocks


@dataclass(frozen=True)
class _Match:
    start: int  # first matched file line, 0-based
    replacement: list[str]  # the REPLACE lines, re-indented to the match


def _trailing_ws_equal(file_lines: Sequence[str], search: Sequence[str]) -> bool:
    return all(f.rstrip() == s.rstrip() for f, s in zip(file_lines, search))


def _indent_delta(file_lines: Sequence[str], search: Sequence[str]) -> tuple[str, str] | None:
    """(added, removed) leading whitespace that turns every search line into its file line."""
    pairs = [(f.rstrip(), s.rstrip()) for f, s in zip(file_lines, search)]
    first = next(((f, s) for f, s in pairs if f and s), None)
    if first is None:
        return None
    f_lead = first[0][: len(first[0]) - len(first[0].lstrip())]
    s_lead = first[1][: len(first[1]) - len(first[1].lstrip())]
    if f_lead.startswith(s_lead):
        added, removed = f_lead[len(s_lead) :], ""
    elif s_lead.startswith(f_lead):
        added, removed = "", s_lead[len(f_lead) :]
    else:
        return None
    for f, s in pairs:
        if (f == "") != (s == ""):
            return None
        if s and (not s.startswith(removed) or f != added + s[len(removed) :]):
            return None
    return added, removed


def _reindent(lines: Sequence[str], added: str, removed: str) -> list[str]:
    out = []
    for line in lines:
        if not line.strip():
            out.append(line)
        elif line.startswith(removed):
            out.append(added + line[len(removed) :])
        else:
            out.append(added + line.lstrip())  # less indented than SEARCH: best effort
    return out


def _find(
    file_lines: Sequence[str],
    search: Sequence[str],
    replace: Sequence[str],
    *,
    describe: Callable[[list[int]], EditError],
) -> _Match | None:
    """Exact, then trailing-whitespace-tolerant, then indentation-tolerant matching.

    Returns None when no level matches; raises `describe(starts)` when the first
    level that matches finds more than one place.
    """
    n = len(search)
    windows = range(len(file_lines) - n + 1)
    exact = [i for i in windows if list(file_lines[i : i + n]) == list(search)]
    loose = exact or [i for i in windows if _trailing_ws_equal(file_lines[i : i + n], search)]
    if loose:
        if len(loose) > 1:
            raise describe(loose)
        return _Match(loose[0], list(replace))
    shifted = [(i, d) for i in windows if (d := _indent_delta(file_lines[i : i + n], search))]
    if len(shifted) > 1:
        raise describe([i for i, _ in shifted])
    if shifted:
        start, (added, removed) = shifted[0]
        return _Match(start, _reindent(replace, added, removed))
    return None


def _closest(file_lines: Sequence[str], search: Sequence[str]) -> tuple[float, int, list[str]]:
    """(similarity 0-1, first line number from 1, lines) of the window most like `search`."""
    target = "\n".join(line.strip() for line in search)
    n = max(1, min(len(search), len(file_lines)))
    best = (0.0, 1, list(file_lines[:n]))
    for i in range(len(file_lines) - n + 1):
        window = file_lines[i : i + n]
        matcher = difflib.SequenceMatcher(None, "\n".join(s.strip() for s in window), target)
        if matcher.real_quick_ratio() <= best[0] or matcher.quick_ratio() <= best[0]:
            continue
        ratio = matcher.ratio()
        if ratio > best[0]:
            best = (ratio, i + 1, list(window))
    return best


def _resolve_path(path: str | None, files: Mapping[str, str], *, default_path: str, index: int) -> str:
    if path is None:
        return default_path
    if path in files:
        return path
    # The model may write a longer or shorter path for the same file, e.g. seed/packing.py.
    by_name = [name for name in files if name.rsplit("/", 1)[-1] == path.rsplit("/", 1)[-1]]
    if len(by_name) == 1:
        return by_name[0]
    raise EditError(
        f"SEARCH/REPLACE block {index} names {path!r}, which is not a file of this program; "
        f"its files are: {', '.join(sorted(files))}",
        fix="write one of the program's file names on the line before <<<<<<< SEARCH, or none for "
        f"{default_path}",
    )


def _check_inside_regions(
    regions: Sequence[tuple[int, int]], start: int, stop: int, *, lines: Sequence[str], path: str, index: int
) -> None:
    if not regions or any(r0 <= start and stop <= r1 for r0, r1 in regions):
        return
    inside = {n for r0, r1 in regions for n in range(r0, r1)}
    # A span crossing two regions has its first outside line at a marker.
    offending = next((n for n in range(start, stop) if n not in inside), start)
    what = " (an EVOLVE-BLOCK marker)" if _MARKER_RE.match(lines[offending]) else ""
    raise EditError(
        f"SEARCH/REPLACE block {index} edits line {offending + 1} of {path}{what}, outside the "
        f"EVOLVE-BLOCK markers; only code between # EVOLVE-BLOCK-START and # EVOLVE-BLOCK-END "
        f"may change",
        fix="make SEARCH copy only lines between the EVOLVE-BLOCK markers",
    )


def _apply_one(text: str, block: EditBlock, *, path: str) -> str:
    index = block.index
    search = block.search.splitlines()
    replace = block.replace.splitlines()
    if not search:
        raise EditError(
            f"SEARCH/REPLACE block {index} has an empty SEARCH section; new files cannot be "
            f"created and code cannot be inserted without an anchor",
            fix="copy the existing lines next to your change into SEARCH and repeat them in REPLACE",
        )
    if block.search == block.replace:
        raise EditError(
            f"SEARCH/REPLACE block {index} changes nothing: its SEARCH and REPLACE sections are "
            f"identical",
            fix="write the changed lines in the REPLACE section",
        )
    lines = text.splitlines()
    regions = evolve_regions(text, path=path)

    def ambiguous(starts: list[int]) -> EditError:
        where = ", ".join(str(s + 1) for s in starts[:8])
        return EditError(
            f"SEARCH block {index} matches {len(starts)} places in {path} (lines {where}); "
            f"include more surrounding lines so it matches one place",
            fix="add the unchanged lines around your change to both SEARCH and REPLACE",
        )

    match = _find(lines, search, replace, describe=ambiguous)
    if match is None:
        trimmed = _trim_blank_edges(search)
        if trimmed != search and trimmed:
            match = _find(lines, trimmed, _trim_blank_edges(replace), describe=ambiguous)
            search = trimmed
    if match is None:
        ratio, first, closest = _closest(lines, search)
        shown = "\n".join(f"{first + k:4d} | {line}" for k, line in enumerate(closest[:15]))
        raise EditError(
            f"SEARCH block {index} did not match {path}. The closest lines were (similarity "
            f"{ratio:.2f}):\n{shown}\nSEARCH must copy existing lines exactly, indentation included",
            fix="copy the lines to change from the current program into SEARCH character for character",
        )
    stop = match.start + len(search)
    _check_inside_regions(regions, match.start, stop, lines=lines, path=path, index=index)
    if any(_MARKER_RE.match(line) for line in match.replacement):
        raise EditError(
            f"SEARCH/REPLACE block {index} writes an EVOLVE-BLOCK marker; markers may not be "
            f"added or moved",
            fix="leave the EVOLVE-BLOCK marker lines out of SEARCH and REPLACE",
        )
    new_lines = lines[: match.start] + match.replacement + lines[stop:]
    ends_with_newline = text.endswith("\n") or not text
    return "\n".join(new_lines) + ("\n" if ends_with_newline and new_lines else "")


def _trim_blank_edges(lines: Sequence[str]) -> list[str]:
    out = list(lines)
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


def apply_blocks(
    files: Mapping[str, str], blocks: Sequence[EditBlock], *, default_path: str
) -> dict[str, str]:
    """Apply SEARCH/REPLACE blocks in order; each block sees the result of the ones before.

    A block without a path edits `default_path`. Matching is exact first, then
    ignores trailing whitespace, then a uniform indentation difference (the
    replacement is re-indented by the same amount), then blank lines at the ends
    of SEARCH. Refused with EditError: an empty SEARCH, no match (the message shows
    the closest lines), several matches, an unknown file, and an edit touching
    lines outside the file's EVOLVE-BLOCK regions. Returns the new path -> text.
    """
    out = dict(files)
    for block in blocks:
        path = _resolve_path(block.path, out, default_path=default_path, index=block.index)
        out[path] = _apply_one(out[path], block, path=path)
    return out


# ---------------------------------------------------------------- whole-file replies


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
