"""What a `lines` or `knob` prompt shows of a long program: an outline around the lines it asks for.

A prompt's length is what a CPU model pays for before it writes a token: a 1.5B model reads the 295-line
strip-packing seed (about 3,500 tokens) for every proposal, to rewrite one to three lines. A program longer
than `PromptLimits.max_lines_program_chars` is shown as an outline instead: the module-level code, every
signature and docstring summary, and in full only the functions that hold the lines asked for (or, for a knob, that
use the name it sets). Other function bodies read `...  # body not shown`.

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
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    lines = text.splitlines()
    cuts: list[tuple[int, int, tuple[str, ...]]] = []  # [start, end) (0-based) -> docstring line, ELIDED
    for node in _outermost_functions(tree):
        _collect(node, lines, keep, set(names), cuts)
    if not cuts:
        return text
    out: list[str] = []
    position = 0
    for start, end, summary in sorted(cuts):
        out.extend(lines[position:start])
        indent = lines[start][: len(lines[start]) - len(lines[start].lstrip())]
        out.extend(indent + line for line in (*summary, ELIDED))
        position = end
    out.extend(lines[position:])
    return "\n".join(out) + ("\n" if text.endswith("\n") else "")


def outline_genome(genome: Genome, focus: Focus, *, names: Collection[str] = ()) -> Genome:
    """The genome as a `lines`/`knob` prompt shows it: the focus file outlined around the focus (and `names`),
    every other Python file outlined to its signatures (they hold no kept lines), other files whole."""
    shown = {}
    for path, text in genome.files.items():
        if not path.endswith(".py"):
            shown[path] = text
        elif path == focus.path:
            shown[path] = outline(text, keep=(focus.start, focus.end), names=names)
        else:
            shown[path] = outline(text, names=names)
    return Genome(files=shown, entry=genome.entry)


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
) -> None:
    """Add `function`'s elided span to `cuts`, or, when it is kept, look at the functions inside it."""
    start, end = function.lineno - 1, function.end_lineno or function.lineno
    holds_focus = keep is not None and start <= keep[0] and keep[1] <= end
    mentions = any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(function))
    if holds_focus or mentions:
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
