"""The static check every child passes before it may spend sandbox time.

A child's changed Python files must compile and have no undefined names
(pyflakes), and its entry file must still define the benchmark's entry
function with a signature the harness can call. A name that is a well-known
import the model forgot (`math`, `np`, `defaultdict`, `minimize`, ...) is
repaired by adding the import, and the repair is reported so it can be stored
on the agent; anything else is refused with an `EditError` that names the file,
the line and the text. A child whose code does exactly what its parent's does
is refused too (`_neutral`). Pure functions of the code: nothing here runs
it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits._base import EditError
from cambrian.meta_agent.edits._evolve_blocks import evolve_regions
from cambrian.meta_agent.edits._neutral import Analysed, inert_lines, is_docstring, parsed, refuse_neutral

#: name -> the import line that defines it: modules of the standard library and numpy/scipy (installed in
#: every sandbox), common aliases, and the names small models most often use without importing them.
KNOWN_IMPORTS: Mapping[str, str] = {
    **{
        module: f"import {module}"
        for module in (
            "math",
            "cmath",
            "random",
            "itertools",
            "functools",
            "collections",
            "heapq",
            "bisect",
            "re",
            "json",
            "time",
            "sys",
            "statistics",
            "copy",
            "operator",
            "typing",
            "dataclasses",
            "fractions",
            "decimal",
            "enum",
            "textwrap",
            "string",
            "numpy",
            "scipy",
        )
    },
    "np": "import numpy as np",
    **{
        name: f"from collections import {name}"
        for name in ("defaultdict", "Counter", "deque", "OrderedDict", "namedtuple")
    },
    **{
        name: f"from typing import {name}"
        for name in (
            "List",
            "Dict",
            "Tuple",
            "Optional",
            "Any",
            "Callable",
            "Sequence",
            "Iterable",
            "Iterator",
            "Set",
            "FrozenSet",
            "Union",
            "Mapping",
        )
    },
    **{name: f"from functools import {name}" for name in ("lru_cache", "reduce", "partial", "cache", "cmp_to_key")},
    **{
        name: f"from itertools import {name}"
        for name in (
            "product",
            "permutations",
            "combinations",
            "combinations_with_replacement",
            "accumulate",
            "chain",
            "groupby",
            "islice",
        )
    },
    **{
        name: f"from math import {name}"
        for name in (
            "sqrt",
            "pi",
            "inf",
            "hypot",
            "floor",
            "ceil",
            "cos",
            "sin",
            "atan2",
            "exp",
            "log",
            "gcd",
            "isqrt",
            "comb",
            "factorial",
            "isclose",
        )
    },
    **{name: f"from heapq import {name}" for name in ("heappush", "heappop", "heapify")},
    **{name: f"from bisect import {name}" for name in ("bisect_left", "bisect_right", "insort")},
    "dataclass": "from dataclasses import dataclass",
    "Fraction": "from fractions import Fraction",
    "deepcopy": "from copy import deepcopy",
    "minimize": "from scipy.optimize import minimize",
}

# pyflakes findings that make a program fail when it runs; the rest (unused imports, style) are harmless.
_FATAL = (
    pyflakes_messages.UndefinedName,
    pyflakes_messages.UndefinedLocal,
    pyflakes_messages.UndefinedExport,
    pyflakes_messages.DuplicateArgument,
    pyflakes_messages.ReturnOutsideFunction,
    pyflakes_messages.YieldOutsideFunction,
    pyflakes_messages.ContinueOutsideLoop,
    pyflakes_messages.BreakOutsideLoop,
    pyflakes_messages.TwoStarredExpressions,
    pyflakes_messages.TooManyExpressionsInStarredAssignment,
)


@dataclass(frozen=True)
class CheckedChild:
    """A child that passed the static check, after its repairs.

    repairs: one sentence per repair made, e.g. "added `import math` at line 14 of packing.py".
    """

    genome: Genome
    repairs: tuple[str, ...] = ()

    @property
    def repair_note(self) -> str | None:
        """The repairs as one line for the archive, None when there were none."""
        return "; ".join(self.repairs) or None


def check_child(child: Genome, parent: Genome, *, entry_function: str | None = None) -> CheckedChild:
    """Check (and repair) the Python files `child` changed relative to `parent`.

    entry_function: the function the benchmark's harness calls in the entry file (e.g. "pack_circles");
        when the parent's entry file defines it at top level, the child's must too, callable the same way.
    Raises EditError (public, line-precise) for code that does not compile, undefined names that are not a
    known import, and a missing or incompatible entry function.

    Each changed file is parsed once and checked by pyflakes once (twice when an import was added); the
    entry check, the fatal findings and the behaviour key all read that one parse.
    """
    files = dict(child.files)
    repairs: list[str] = []
    analysed: dict[str, _Analysis] = {}
    for path, text in child.files.items():
        if not path.endswith(".py") or parent.files.get(path) == text:
            continue
        analysis = _analyse(path, text)
        missing = [name for name in _undefined_names(analysis.fatal) if name in KNOWN_IMPORTS]
        if missing:
            text, added = _add_imports(path, text, missing)
            files[path] = text
            repairs.append(added)
            analysis = _analyse(path, text)
        _refuse_fatal(path, text, analysis.fatal)
        analysed[path] = analysis
    entry = child.entry
    if entry_function is not None and entry in analysed and entry in parent.files:
        _check_entry(analysed[entry].tree, parent.files[entry], path=entry, name=entry_function)
    refuse_neutral(files, parent.files, analysed, keep=frozenset({entry_function} if entry_function else ()))
    return CheckedChild(Genome(files=files, entry=child.entry), tuple(repairs))


@dataclass(frozen=True)
class _Analysis(Analysed):
    """One parse of a file and what pyflakes found in it: the findings that fail a run, besides the lines of
    the bindings nothing uses."""

    fatal: tuple[pyflakes_messages.Message, ...] = ()


def _analyse(path: str, text: str) -> _Analysis:
    """Parse and compile `text` (EditError when it is not valid Python) and run pyflakes over the tree."""
    try:
        tree = ast.parse(text, filename=path)
        # The parse alone misses what only the compiler checks ('return' outside a function, nonlocal at
        # module level): compiling the tree catches those without parsing the text again.
        compile(tree, path, "exec", dont_inherit=True)
    except SyntaxError as error:
        line = (error.text or "").strip()
        raise EditError(
            f"the edited {path} is not valid Python: {error.msg} at line {error.lineno}"
            + (f": {line!r}" if line else ""),
            fix="return complete, syntactically valid code",
        ) from None
    except ValueError as error:  # e.g. a null byte in the source
        raise EditError(f"the edited {path} cannot be compiled: {error}", fix="return plain Python source") from None
    found = pyflakes_checker.Checker(tree, filename=path).messages
    fatal = sorted((m for m in found if isinstance(m, _FATAL)), key=lambda m: (m.lineno, m.col))
    return _Analysis(tree, inert_lines(found), tuple(fatal))


def _undefined_names(findings: Sequence[pyflakes_messages.Message]) -> list[str]:
    names = [m.message_args[0] for m in findings if isinstance(m, pyflakes_messages.UndefinedName)]
    return list(dict.fromkeys(names))


def _add_imports(path: str, text: str, missing: Sequence[str]) -> tuple[str, str]:
    """`text` with the imports of the known names `missing` added, and a sentence saying so."""
    imports = sorted({KNOWN_IMPORTS[name] for name in missing})
    lines = text.splitlines(keepends=True)
    at = _import_position(text)
    lines[at:at] = [line + "\n" for line in imports]
    where = f"at line {at + 1}" if len(imports) == 1 else f"at lines {at + 1}-{at + len(imports)}"
    added = ", ".join(f"`{line}`" for line in imports)
    return "".join(lines), f"added {added} {where} of {path} (used but never imported)"


def _import_position(text: str) -> int:
    """0-based line before which missing imports go: first line inside the first EVOLVE-BLOCK when the
    file has one (only that region may change), else after the module docstring and __future__ imports."""
    regions = evolve_regions(text)
    if regions:
        return regions[0][0]
    tree = ast.parse(text)
    at = 0
    for node in tree.body:
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if (is_docstring(node) and at == 0) or is_future:
            at = node.end_lineno or at
        else:
            break
    return at


def _refuse_fatal(path: str, text: str, findings: Sequence[pyflakes_messages.Message]) -> None:
    if not findings:
        return
    lines = text.splitlines()
    problems = []
    for message in findings[:3]:
        source = lines[message.lineno - 1].strip() if 0 < message.lineno <= len(lines) else ""
        problems.append(f"{message.message % message.message_args} at line {message.lineno}: {source!r}")
    more = f" (and {len(findings) - 3} more)" if len(findings) > 3 else ""
    undefined = _undefined_names(findings)
    fix = (
        f"define or import {', '.join(undefined[:3])} before using it"
        if undefined
        else "fix the code so that it would run"
    )
    raise EditError(f"static check of {path}: " + "; ".join(problems) + more, fix=fix)


def _top_level(tree: ast.Module, name: str) -> ast.AST | None:
    """The last top-level statement that defines `name` (def, class, assignment or import), or None."""
    found: ast.AST | None = None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            found = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found = node
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((alias.asname or alias.name.split(".")[0]) == name for alias in node.names):
                found = node
    return found


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return f"{node.name}({ast.unparse(node.args)})"


def _check_entry(child_tree: ast.Module, parent_text: str, *, path: str, name: str) -> None:
    parent_def = _top_level(parsed(parent_text), name)
    if not isinstance(parent_def, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return  # the parent gets it some other way; nothing to compare against
    child_def = _top_level(child_tree, name)
    if child_def is None:
        raise EditError(
            f"static check of {path}: the program no longer defines `{name}` at top level; the benchmark calls "
            f"{_signature(parent_def)}",
            fix=f"keep a top-level `def {_signature(parent_def)}`",
        )
    if not isinstance(child_def, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return  # bound some other way (an alias, an import): it may well be callable
    missing = _uncallable(child_def.args, parent_def.args)
    if missing:
        raise EditError(
            f"static check of {path}: `{_signature(child_def)}` at line {child_def.lineno} cannot be called the "
            f"way the benchmark calls {_signature(parent_def)}: {missing}",
            fix=f"keep the signature {_signature(parent_def)}",
        )


def _uncallable(child: ast.arguments, parent: ast.arguments) -> str:
    """Why a call that fits the parent's parameters would fail on the child's ("" when it would not)."""
    parent_names = [a.arg for a in (*parent.posonlyargs, *parent.args, *parent.kwonlyargs)]
    child_positional = [a.arg for a in (*child.posonlyargs, *child.args)]
    child_names = set(child_positional) | {a.arg for a in child.kwonlyargs}
    # The harness passes arguments by name; a child that lost a parameter name cannot take that call.
    lost = [n for n in parent_names if n not in child_names and child.kwarg is None]
    if lost:
        return f"it has no parameter {', '.join(map(repr, lost))}"
    n_defaults = len(child.defaults)
    required = child_positional[: len(child_positional) - n_defaults] if n_defaults else child_positional
    required += [a.arg for a, d in zip(child.kwonlyargs, child.kw_defaults) if d is None]
    extra = [n for n in required if n not in parent_names]
    if extra:
        return f"it requires {', '.join(map(repr, extra))}, which the benchmark never passes"
    return ""
