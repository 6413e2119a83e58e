"""Which lines the `lines` and `knob` operators ask the FM to rewrite.

A `Focus` is a span of whole lines of one file of the genome, inside its editable regions. The spans
come from the program's statements, of every kind: runs of 1..MAX_FOCUS_STATEMENTS simple statements
(assignments, calls, `return`, `raise`, ...), the header of a condition or a loop (`if x > limit:`,
`for i in range(n):`, the body kept), and whole short compound statements (an `if` with its body, a
small loop). `knob` draws from the module-level statements that assign a number to a name.

Measured: windows that cut a statement in two, or a header from part of its body, came back as syntax
errors; whole statements and whole headers do not. A seed whose only code is `return value` offers one
window, that line; a block with no statement offers none, and the operators say so before any FM call.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError, evolve_regions

#: Simple statements the `lines` operator asks the FM to rewrite at once: 1 to this many.
MAX_FOCUS_STATEMENTS = 3
#: The longest compound statement (an `if` or a loop with its body) offered whole, in lines.
MAX_COMPOUND_LINES = 6
_HEADED = (ast.If, ast.For, ast.AsyncFor, ast.While)  # their header line is a window of its own
_COMPOUND = (ast.If, ast.For, ast.AsyncFor, ast.While, ast.With, ast.AsyncWith, ast.Try)
_NEVER = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Import, ast.ImportFrom)


@dataclass(frozen=True)
class Focus:
    """Lines [start, end) (0-based) of the genome's file `path`, and their text as the prompt shows it."""

    path: str
    start: int
    end: int
    text: str

    @classmethod
    def find(cls, genome: Genome, text: str, *, path: str | None = None) -> Focus:
        """The first run of whole lines of `path` (default: the entry file) that reads `text`; ValueError if none."""
        path = path or genome.entry
        lines = genome.files[path].splitlines()
        wanted = text.rstrip("\n").splitlines()
        for start in range(len(lines) - len(wanted) + 1):
            if wanted and lines[start : start + len(wanted)] == wanted:
                return cls(path=path, start=start, end=start + len(wanted), text="\n".join(wanted).rstrip())
        raise ValueError(f"{path} has no lines reading {text!r}")


def statement_spans(text: str) -> list[tuple[int, int]]:
    """0-based [start, end) line spans of the statements a `lines` edit may replace (see the module docstring),
    sorted, without repeats: runs of simple statements of one body, headers of conditions and loops, and
    whole compound statements of at most MAX_COMPOUND_LINES lines. Imports, definitions and docstrings are
    never a window."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    spans: set[tuple[int, int]] = set()
    for body in _bodies(tree):
        for i, first in enumerate(body):
            if isinstance(first, _COMPOUND) and first.end_lineno is not None:
                if first.end_lineno - first.lineno + 1 <= MAX_COMPOUND_LINES:
                    spans.add((first.lineno - 1, first.end_lineno))
                if isinstance(first, _HEADED):
                    spans.add((first.lineno - 1, first.body[0].lineno - 1))
                continue
            for last in body[i : i + MAX_FOCUS_STATEMENTS]:
                if isinstance(last, (*_COMPOUND, *_NEVER)) or _is_string(last) or last.end_lineno is None:
                    break
                spans.add((first.lineno - 1, last.end_lineno))
    # A header that shares its line with its body (`if x: y = 1`) is no window of its own.
    return sorted(span for span in spans if span[1] > span[0])


def _bodies(tree: ast.AST) -> Iterator[list[ast.stmt]]:
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if isinstance(body, list) and body and isinstance(body[0], ast.stmt):
                yield body
        for handler in getattr(node, "handlers", ()) or ():
            yield handler.body


def _is_string(statement: ast.stmt) -> bool:
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant)


def number_assignments(text: str) -> list[tuple[int, int]]:
    """0-based [start, end) line spans of the module-level statements that assign a number literal to a name
    (`SAMPLES = 1`, `STEP: float = -0.05`, `VERBOSE = True`): the program's knobs. Assignments inside
    functions are left out: there a number is mostly a variable's start (`best = 0`), not a setting."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    spans = []
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign) and all(isinstance(target, ast.Name) for target in node.targets):
            value = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            value = node.value
        else:
            continue
        if isinstance(value, ast.UnaryOp) and isinstance(value.op, (ast.USub, ast.UAdd)):
            value = value.operand
        if isinstance(value, ast.Constant) and isinstance(value.value, (int, float)) and node.end_lineno:
            spans.append((node.lineno - 1, node.end_lineno))
    return spans


def editable_files(genome: Genome) -> list[str]:
    """The Python files a line edit may touch, entry first: those with EVOLVE-BLOCK markers when any file has
    them, else every Python file."""
    python = [genome.entry] + sorted(path for path in genome.files if path != genome.entry)
    python = [path for path in python if path.endswith(".py")]
    marked = [path for path in python if "EVOLVE-BLOCK-" in genome.files[path] and _regions(genome, path)]
    return marked or python


def windows(genome: Genome, *, knobs: bool = False) -> list[Focus]:
    """Every span a line edit may ask for, over the editable files (entry first), each inside one editable
    region and not blank. knobs: the module-level number assignments (`number_assignments`) instead of
    the statements (`statement_spans`)."""
    found: list[Focus] = []
    for path in editable_files(genome):
        text = genome.files[path]
        lines = text.splitlines()
        regions = _regions(genome, path) or [(0, len(lines))]
        spans = number_assignments(text) if knobs else statement_spans(text)
        for start, end in spans:
            if not any(low <= start and end <= high for low, high in regions):
                continue
            shown = "\n".join(lines[start:end]).rstrip()
            if shown.strip():
                found.append(Focus(path=path, start=start, end=end, text=shown))
    return found


@dataclass(frozen=True)
class Headed:
    """A condition or loop whose header a `Focus` is: its kind, and the 0-based [start, end) lines of the whole
    statement (its `else` included) and of its body."""

    kind: type[ast.stmt]
    statement: tuple[int, int]
    body: tuple[int, int]


def headed_statement(genome: Genome, focus: Focus) -> Headed | None:
    """The `if`, `for` or `while` whose header is exactly the `focus` lines (a header window), else None."""
    try:
        tree = ast.parse(genome.files[focus.path])
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, _HEADED) and node.lineno - 1 == focus.start and node.body[0].lineno - 1 == focus.end:
            end, body_end = node.end_lineno, node.body[-1].end_lineno
            if end is not None and body_end is not None:
                return Headed(type(node), (focus.start, end), (focus.end, body_end))
    return None


def enclosing_function(genome: Genome, focus: Focus) -> tuple[str, Focus] | None:
    """The name and the lines (decorators included) of the innermost function definition around `focus`, where
    that definition lies inside one editable region of its file; None for lines at module level or a
    function that reaches outside its region."""
    text = genome.files[focus.path]
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return None
    found: tuple[str, int, int] | None = None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
            start = min([node.lineno, *(decorator.lineno for decorator in node.decorator_list)]) - 1
            if start <= focus.start and focus.end <= node.end_lineno and (found is None or start >= found[1]):
                found = (node.name, start, node.end_lineno)
    if found is None:
        return None
    name, start, end = found
    lines = text.splitlines()
    if not any(low <= start and end <= high for low, high in _regions(genome, focus.path) or [(0, len(lines))]):
        return None
    return name, Focus(path=focus.path, start=start, end=end, text="\n".join(lines[start:end]).rstrip())


def _regions(genome: Genome, path: str) -> list[tuple[int, int]]:
    try:
        return evolve_regions(genome.files[path], path=path)
    except EditError:  # unbalanced markers: nothing of this file is editable
        return [(0, 0)]


def has_editable_code(genome: Genome) -> bool:
    """Whether some editable file (`editable_files`) has a non-blank line inside its editable regions: what a
    SEARCH/REPLACE edit must copy to change anything."""
    for path in editable_files(genome):
        lines = genome.files[path].splitlines()
        for low, high in _regions(genome, path) or [(0, len(lines))]:
            if any(line.strip() for line in lines[low:high]):
                return True
    return False
