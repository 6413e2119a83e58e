"""Agent code as HTML: syntax highlighting with pygments and line diffs with difflib, always escaped.

Agent code is untrusted. Pygments' HtmlFormatter escapes every character of the source it
formats; diff lines are handed to the templates as plain strings, which Jinja2's autoescape
escapes. Nothing here builds HTML from code by string concatenation.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass

from markupsafe import Markup
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import get_lexer_for_filename
from pygments.lexers.special import TextLexer
from pygments.util import ClassNotFound

#: CSS class of highlighted blocks; `pygments_css()` styles it.
CODE_CLASS = "code"
#: Lines of context around each change in a diff.
CONTEXT_LINES = 3


#: Files longer than this (characters) are shown as plain text, cut here, with a link to the whole file:
#: highlighting a 4.8 MB one-line genome took a page 3 min 46 s and 80 MB.
HIGHLIGHT_MAX_CHARS = 200_000
#: Characters shown of one line of a diff; the rest is counted.
DIFF_LINE_MAX_CHARS = 2_000


def highlighted(path: str, text: str, *, download: str | None = None) -> Markup:
    """`text` as escaped, highlighted HTML with line numbers, the lexer chosen by `path`'s name. A text longer
    than HIGHLIGHT_MAX_CHARS is shown plain and cut there, with a link to `download` (the whole file)."""
    if len(text) > HIGHLIGHT_MAX_CHARS:
        note = Markup('<p class="muted">{} has {:,} characters: the first {:,} are shown as plain text. ').format(
            path, len(text), HIGHLIGHT_MAX_CHARS
        )
        if download is not None:
            note += Markup('<a href="{}" download>Download the whole file</a>.').format(download)
        return note + Markup('</p><pre class="{} wrap">{}</pre>').format(CODE_CLASS, text[:HIGHLIGHT_MAX_CHARS])
    try:
        lexer = get_lexer_for_filename(path, stripnl=False)
    except ClassNotFound:
        lexer = TextLexer(stripnl=False)
    formatter = HtmlFormatter(cssclass=CODE_CLASS, linenos="table", wrapcode=True)
    return Markup(highlight(text, lexer, formatter))  # pygments escapes the source it formats


def pygments_css() -> str:
    """The stylesheet for highlighted blocks."""
    return str(HtmlFormatter(cssclass=CODE_CLASS).get_style_defs(f".{CODE_CLASS}"))


@dataclass(frozen=True)
class DiffLine:
    """One line of a unified diff: kind is ' ' (context), '-', '+' or '@' (a hunk header); numbers 1-based."""

    kind: str
    old_no: int | None
    new_no: int | None
    text: str


@dataclass(frozen=True)
class FileDiff:
    """The diff of one path: status added | removed | changed | same, and its lines (empty when same)."""

    path: str
    status: str
    lines: list[DiffLine]
    added: int
    removed: int


def diff_files(old: Mapping[str, str], new: Mapping[str, str], *, context: int = CONTEXT_LINES) -> list[FileDiff]:
    """Per path of either genome (sorted), the line diff from `old` to `new`."""
    diffs = []
    for path in sorted(set(old) | set(new)):
        before, after = old.get(path), new.get(path)
        status = "added" if before is None else "removed" if after is None else "changed"
        if before == after:
            diffs.append(FileDiff(path, "same", [], 0, 0))
            continue
        lines = _diff_lines((before or "").splitlines(), (after or "").splitlines(), context)
        added = sum(1 for line in lines if line.kind == "+")
        removed = sum(1 for line in lines if line.kind == "-")
        diffs.append(FileDiff(path, status, lines, added, removed))
    return diffs


def _diff_lines(a: list[str], b: list[str], context: int) -> list[DiffLine]:
    lines = [
        dataclasses.replace(line, text=_cut(line.text)) if len(line.text) > DIFF_LINE_MAX_CHARS else line
        for line in _all_diff_lines(a, b, context)
    ]
    return lines


def _cut(text: str) -> str:
    return f"{text[:DIFF_LINE_MAX_CHARS]} ... ({len(text) - DIFF_LINE_MAX_CHARS:,} more characters)"


def _all_diff_lines(a: list[str], b: list[str], context: int) -> list[DiffLine]:
    lines: list[DiffLine] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for group in matcher.get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        header = f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@"
        lines.append(DiffLine("@", None, None, header))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines.extend(DiffLine(" ", i + 1, j1 + k + 1, a[i]) for k, i in enumerate(range(i1, i2)))
                continue
            if tag in ("replace", "delete"):
                lines.extend(DiffLine("-", i + 1, None, a[i]) for i in range(i1, i2))
            if tag in ("replace", "insert"):
                lines.extend(DiffLine("+", None, j + 1, b[j]) for j in range(j1, j2))
    return lines
