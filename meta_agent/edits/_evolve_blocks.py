"""EVOLVE-BLOCK regions: which lines of a file an edit may change, and checks that it did not stray.

A file's editable spans lie between `EVOLVE-BLOCK-START` and `EVOLVE-BLOCK-END` comments; a
file without markers is editable everywhere. Pure functions, no I/O; every refusal is an
`EditError` whose public message names the file and the line.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from cambrian.meta_agent.edits._base import EditError

# Markers count only inside a comment, so a string literal mentioning them is ignored.
_MARKER_RE = re.compile(r"^\s*(?:#+|//+|--|;+|%+|/\*+|<!--|\*+|')\s*EVOLVE-BLOCK-(?P<kind>START|END)\b")


def evolve_regions(text: str, *, path: str = "the file") -> list[tuple[int, int]]:
    """The editable line spans of a file: 0-based, half-open `(start, end)` line indices.

    A span holds the lines strictly between an `EVOLVE-BLOCK-START` and the next
    `EVOLVE-BLOCK-END` comment (any comment syntax: #, //, --, /* */, <!-- -->, ...);
    the marker lines are outside every span. An empty list means the file has no
    markers and every line may change. Unbalanced markers raise EditError.
    """
    regions: list[tuple[int, int]] = []
    if "EVOLVE-BLOCK-" not in text:
        return regions
    open_at: int | None = None
    for number, line in enumerate(text.splitlines()):
        match = _MARKER_RE.match(line) if "EVOLVE-BLOCK-" in line else None
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
                    f"{path} has an EVOLVE-BLOCK-END at line {number + 1} with no EVOLVE-BLOCK-START before it",
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
    inside: set[int] = set()
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
            f"the rewrite removed line {number} ({line!r}) of {path}, outside the EVOLVE-BLOCK markers; {rule}",
            fix=fix,
        )
    if len(new_outside) > len(old_outside):
        number, line = _first_non_blank(new_outside[len(old_outside) :])
        raise EditError(
            f"the rewrite added line {number} ({line!r}) to {path}, outside the EVOLVE-BLOCK markers; {rule}",
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
            fix="copy the whole file, EVOLVE-BLOCK marker comments included, and change only the code between them",
        )
    ((start, end),) = regions
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
