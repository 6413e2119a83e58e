"""Which lines the `lines` and `knob` operators ask the FM to rewrite: spans of simple statements, the
module's number settings, and the spans of those that an edit may replace (inside the editable regions,
occurring once)."""

from __future__ import annotations

import ast

from evaluators.base import Genome
from meta_agent.edits import evolve_regions

#: Statements the `lines` operator asks the FM to rewrite at once: 1 to this many simple statements.
MAX_FOCUS_STATEMENTS = 3
_COMPOUND = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.AsyncFor, ast.While, ast.With,
             ast.AsyncWith, ast.Try, ast.Import, ast.ImportFrom, ast.Return)  # fmt: skip


def statement_runs(text: str) -> list[tuple[int, int]]:
    """0-based [start, end) line spans of 1..MAX_FOCUS_STATEMENTS consecutive simple statements of one body
    (assignments, calls, augmented assignments...; no header, import, return or docstring), each span whole
    lines. Measured: windows that cut a header from its body, or a statement in two, came back as syntax
    errors."""
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    spans: list[tuple[int, int]] = []
    for node in ast.walk(tree):
        for name in ("body", "orelse", "finalbody"):
            body = getattr(node, name, None)
            if not isinstance(body, list) or not body or not isinstance(body[0], ast.stmt):
                continue
            for i, first in enumerate(body):
                for last in body[i : i + MAX_FOCUS_STATEMENTS]:
                    if isinstance(last, _COMPOUND) or _is_string(last) or last.end_lineno is None:
                        break
                    spans.append((first.lineno - 1, last.end_lineno))
    return spans


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


def editable_windows(parent: Genome, spans: list[tuple[int, int]]) -> list[str]:
    """The text of each span of the entry file that lies inside its editable regions and occurs in the file
    once (so the reply's lines replace exactly it), in span order, without repeats."""
    text = parent.files[parent.entry]
    lines = text.splitlines()
    regions = evolve_regions(text, path=parent.entry) or [(0, len(lines))]
    windows: list[str] = []
    for start, end in spans:
        if not any(low <= start and end <= high for low, high in regions):
            continue
        focus = "\n".join(lines[start:end]).rstrip()
        if focus.strip() and text.count(focus + "\n") == 1 and focus not in windows:
            windows.append(focus)
    return windows
