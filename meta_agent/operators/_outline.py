"""What a `lines` or `knob` prompt shows of a long program: an outline, then in full the code around the lines.

A prompt's length is what a CPU model pays for before it writes a token: a 1.5B model reads the 295-line
strip-packing seed (about 3,500 tokens) for every proposal, to rewrite one to three lines. A program longer
than `PromptLimits.max_lines_program_chars` is shown as an outline instead: the module-level code, every
signature and docstring summary; other function bodies read `...  # body not shown`. The outline is the same
whatever lines are asked for (`outline_genome`), so a local server's prompt cache holds it from one proposal
to the next, and a child's outline differs from its parent's only where the edit shows; the functions that
hold the lines (or, for a knob, that use the name it sets) follow in full, next to the task (`in_full`).

Only the prompt changes: the reply still replaces the asked-for lines of the parent's own text.
"""

from __future__ import annotations

import ast
from collections.abc import Collection

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.operators._focus import Focus

#: What an elided function body reads (at the body's indentation).
ELIDED = "...  # body not shown"
_FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def outline(text: str, *, keep: tuple[int, int] | None = None, names: Collection[str] = ()) -> str:
    """`text` (Python) with the bodies of functions elided, except those that contain the 0-based line span
    `keep` or mention one of `names`. Decorators, signatures and the first line of docstrings stay; a
    function inside a kept one is elided by the same rule. A file that does not parse is returned whole, and
    a body that holds an EVOLVE-BLOCK marker is never elided."""
    lines = text.splitlines()
    found = _cuts(text, keep, names)
    if not found or not found[0]:
        return text
    shown = _render(lines, found[0], 0, len(lines))
    return "\n".join(shown) + ("\n" if text.endswith("\n") else "")


def in_full(text: str, *, keep: tuple[int, int] | None = None, names: Collection[str] = ()) -> list[str]:
    """The functions of `text` that `outline(text, keep=keep, names=names)` shows whole and `outline(text)`
    does not, each as it reads there (its decorators and signature, functions inside it elided by the same
    rule), in file order: what a prompt that shows `outline(text)` adds in full."""
    found = _cuts(text, keep, names)
    plain = _cuts(text, None, ())
    if found is None or plain is None:
        return []
    lines = text.splitlines()
    shown = []
    for start, end in found[1]:
        if any(start <= cut_start and cut_end <= end for cut_start, cut_end, _ in plain[0]):
            shown.append("\n".join(_render(lines, found[0], start, end)))
    return shown


def outline_genome(genome: Genome) -> Genome:
    """The genome as a `lines`/`knob` prompt shows it: every Python file outlined (`outline`, the same for any
    lines asked for), other files whole."""
    return Genome(
        files={path: outline(text) if path.endswith(".py") else text for path, text in genome.files.items()},
        entry=genome.entry,
    )


def code_around(genome: Genome, focus: Focus, *, names: Collection[str] = ()) -> Genome | None:
    """What `outline_genome(genome)` leaves out that a prompt asking for the `focus` lines shows in full: the
    functions of the focus file that hold them, and those of any Python file that mention `names` (`in_full`),
    one file of them each (the focus file the entry); None when there is nothing to add."""
    files = {}
    for path, text in genome.files.items():
        if path.endswith(".py"):
            keep = (focus.start, focus.end) if path == focus.path else None
            found = in_full(text, keep=keep, names=names)
            if found:
                files[path] = "\n\n\n".join(found) + "\n"
    if not files:
        return None
    return Genome(files=files, entry=focus.path if focus.path in files else min(files))


def _cuts(
    text: str, keep: tuple[int, int] | None, names: Collection[str]
) -> tuple[list[tuple[int, int, tuple[str, ...]]], list[tuple[int, int]]] | None:
    """The elided spans of `outline` ([start, end) 0-based -> the docstring line that stays), sorted, and the
    spans of the outermost functions kept whole for `keep`/`names`; None when `text` does not parse."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    lines = text.splitlines()
    cuts: list[tuple[int, int, tuple[str, ...]]] = []
    kept: list[tuple[int, int]] = []
    for node in _outermost_functions(tree):
        _collect(node, lines, keep, set(names), cuts, kept)
    return sorted(cuts), sorted(kept)


def _render(lines: list[str], cuts: list[tuple[int, int, tuple[str, ...]]], start: int, end: int) -> list[str]:
    """lines[start:end] with the cuts inside that span elided."""
    out: list[str] = []
    position = start
    for cut_start, cut_end, summary in cuts:
        if cut_start < start or cut_end > end:
            continue
        out.extend(lines[position:cut_start])
        indent = lines[cut_start][: len(lines[cut_start]) - len(lines[cut_start].lstrip())]
        out.extend(indent + line for line in (*summary, ELIDED))
        position = cut_end
    out.extend(lines[position:end])
    return out


def assigned_names(focus_text: str) -> set[str]:
    """The names the focus lines assign (`SAMPLES = 4` -> {"SAMPLES"}): a knob's readers are shown in full."""
    try:
        tree = ast.parse(_dedent(focus_text))
    except SyntaxError:
        return set()
    return {
        target.id
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }


def _dedent(text: str) -> str:
    lines = text.splitlines()
    indent = min((len(line) - len(line.lstrip()) for line in lines if line.strip()), default=0)
    return "\n".join(line[indent:] for line in lines)


def _outermost_functions(tree: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """The functions not inside another function: at module level, in classes, under `if`/`try` blocks."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    pending: list[ast.AST] = [tree]
    while pending:
        node = pending.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _FUNCTIONS):
                found.append(child)
            elif isinstance(child, ast.stmt):
                pending.append(child)
    return found


def _collect(
    function: ast.FunctionDef | ast.AsyncFunctionDef,
    lines: list[str],
    keep: tuple[int, int] | None,
    names: set[str],
    cuts: list[tuple[int, int, tuple[str, ...]]],
    kept: list[tuple[int, int]] | None = None,
) -> None:
    """Add `function`'s elided span to `cuts`, or, when it is kept, its span (decorators included) to `kept`
    (outermost only) and look at the functions inside it."""
    start, end = function.lineno - 1, function.end_lineno or function.lineno
    holds_focus = keep is not None and start <= keep[0] and keep[1] <= end
    mentions = any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(function))
    if holds_focus or mentions:
        if kept is not None:
            kept.append((min([start, *(d.lineno - 1 for d in function.decorator_list)]), end))
        for inner in _outermost_functions(function):
            _collect(inner, lines, keep, names, cuts)
        return
    body = function.body
    docstring = body[0] if _is_docstring(body[0]) else None
    code = body[1:] if docstring is not None else body
    if not code:
        return
    body_start = min([code[0].lineno, *(d.lineno for d in getattr(code[0], "decorator_list", ()))]) - 1
    if body_start <= start or end - body_start < 2:  # a body on the signature's line, or one line: nothing saved
        return
    if any("EVOLVE-BLOCK-" in line for line in lines[start : _trailing_comments_end(lines, start, end)]):
        return  # a marker (inside the body, or a comment just after its last statement) stays where it is
    summary: tuple[str, ...] = ()
    if docstring is not None and docstring.end_lineno is not None and docstring.end_lineno > docstring.lineno:
        # A docstring of several lines shows its first line (the summary) only.
        first_line = (ast.get_docstring(function) or "").strip().splitlines()
        summary = (f'"""{first_line[0].replace(chr(34) * 3, "")}"""',) if first_line else ()
        body_start = docstring.lineno - 1
    cuts.append((body_start, end, summary))


def _trailing_comments_end(lines: list[str], start: int, end: int) -> int:
    """The end of the lines after `lines[start:end]` (a definition) that are blank or comments indented deeper
    than its first line: still its body to a reader."""
    indent = len(lines[start]) - len(lines[start].lstrip())
    while end < len(lines):
        line = lines[end]
        if line.strip() and not (line.lstrip().startswith("#") and len(line) - len(line.lstrip()) > indent):
            break
        end += 1
    return end


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )
