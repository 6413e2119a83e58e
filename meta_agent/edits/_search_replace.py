"""SEARCH/REPLACE blocks: parsing them out of an FM reply and applying them, tolerantly, to files.

The block format (aider / OpenEvolve style), 5-9 marker characters allowed:

    <<<<<<< SEARCH
    old lines
    =======
    new lines
    >>>>>>> REPLACE

Matching is exact first, then tolerant of trailing whitespace, indentation and blank edges;
edits outside a file's EVOLVE-BLOCK regions are refused. Pure functions, no I/O; every
refusal is an `EditError` whose public message names the block, the file and the line.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from cambrian.meta_agent.edits._base import _FENCE_ONLY_RE, _FENCE_RE, EditBlock, EditError, _join_lines
from cambrian.meta_agent.edits._evolve_blocks import _MARKER_RE, evolve_regions

FORMAT_HINT = "<<<<<<< SEARCH / old lines / ======= / new lines / >>>>>>> REPLACE"

_SEARCH_RE = re.compile(r"^\s*<{5,9}\s*SEARCH\s*$")
_DIVIDER_RE = re.compile(r"^\s*={5,9}\s*$")
_REPLACE_RE = re.compile(r"^\s*>{5,9}\s*REPLACE\s*$")
# A path line names one file: `packing.py`, ### packing.py, **src/util.py**:, File: packing.py
_PATH_LINE_RE = re.compile(
    r"^\s*(?:#+\s*|\*+\s*|//\s*)?(?:file(?:name)?\s*:\s*)?[`*'\"]*"
    r"(?P<path>[\w.\-/]*\w\.[A-Za-z0-9_]{1,10})[`*'\"]*\s*:?\s*$",
    re.IGNORECASE,
)


# ---------------------------------------------------------------- parsing


def _strip_section_fence(lines: list[str]) -> list[str]:
    # Models wrap a section's code in ``` fences, or open one and never close it; a line that is only a
    # fence (``` or ```python) is never code, so it is dropped wherever it sits.
    return [line for line in lines if not _FENCE_ONLY_RE.match(line)]


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
                    f"SEARCH/REPLACE block {index} is missing its {missing} line; use the format {FORMAT_HINT}",
                    fix="end the SEARCH section with ======= and the block with >>>>>>> REPLACE",
                )
            line = lines[j]
            if _DIVIDER_RE.match(line):
                if seen_divider:
                    raise EditError(
                        f"SEARCH/REPLACE block {index} has more than one ======= line; use the format {FORMAT_HINT}",
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
        fix=f"write one of the program's file names on the line before <<<<<<< SEARCH, or none for {default_path}",
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
            f"SEARCH/REPLACE block {index} changes nothing: its SEARCH and REPLACE sections are identical",
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
            f"SEARCH/REPLACE block {index} writes an EVOLVE-BLOCK marker; markers may not be added or moved",
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


def apply_blocks(files: Mapping[str, str], blocks: Sequence[EditBlock], *, default_path: str) -> dict[str, str]:
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
