"""The static check every child passes before it may spend sandbox time.

A child's changed Python files must compile and have no undefined names
(pyflakes), and its entry file must still define the benchmark's entry
function with a signature the harness can call. A name that is a well-known
import the model forgot (`math`, `np`, `defaultdict`, `minimize`, ...) is
repaired by adding the import, and the repair is reported so it can be stored
on the agent; anything else is refused with an `EditError` that names the file,
the line and the text. A child whose code does exactly what its parent's does
(it only moved blank lines, comments or docstrings, added unused or repeated
imports, put code after a `return`, put a copy of a function where the
original, defined later, replaces it, or added functions and constants that
nothing refers to) is refused too, so that the FM hears it changed nothing
before any sandbox time is spent. Pure functions of the code: nothing here
runs it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages

from evaluators.base import Genome
from meta_agent.edits._base import EditError
from meta_agent.edits._evolve_blocks import evolve_regions

#: name -> the import line that defines it: modules of the standard library and numpy/scipy (installed in
#: every sandbox), common aliases, and the names small models most often use without importing them.
KNOWN_IMPORTS: Mapping[str, str] = {
    **{
        module: f"import {module}"
        for module in (
            "math", "cmath", "random", "itertools", "functools", "collections", "heapq", "bisect", "re", "json",
            "time", "sys", "statistics", "copy", "operator", "typing", "dataclasses", "fractions", "decimal",
            "enum", "textwrap", "string", "numpy", "scipy",
        )
    },
    "np": "import numpy as np",
    **{
        name: f"from collections import {name}"
        for name in ("defaultdict", "Counter", "deque", "OrderedDict", "namedtuple")
    },
    **{
        name: f"from typing import {name}"
        for name in ("List", "Dict", "Tuple", "Optional", "Any", "Callable", "Sequence", "Iterable", "Iterator",
                     "Set", "FrozenSet", "Union", "Mapping")
    },
    **{name: f"from functools import {name}" for name in ("lru_cache", "reduce", "partial", "cache", "cmp_to_key")},
    **{
        name: f"from itertools import {name}"
        for name in ("product", "permutations", "combinations", "combinations_with_replacement", "accumulate",
                     "chain", "groupby", "islice")
    },
    **{
        name: f"from math import {name}"
        for name in ("sqrt", "pi", "inf", "hypot", "floor", "ceil", "cos", "sin", "atan2", "exp", "log", "gcd",
                     "isqrt", "comb", "factorial", "isclose")
    },
    **{name: f"from heapq import {name}" for name in ("heappush", "heappop", "heapify")},
    **{name: f"from bisect import {name}" for name in ("bisect_left", "bisect_right", "insort")},
    "dataclass": "from dataclasses import dataclass",
    "Fraction": "from fractions import Fraction",
    "deepcopy": "from copy import deepcopy",
    "minimize": "from scipy.optimize import minimize",
}  # fmt: skip

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
    _refuse_neutral(files, parent.files, analysed, keep=frozenset({entry_function} if entry_function else ()))
    return CheckedChild(Genome(files=files, entry=child.entry), tuple(repairs))


@dataclass(frozen=True)
class _Analysis:
    """One parse of a file and what pyflakes found in it: the findings that fail a run, and the lines of the
    bindings nothing uses (which `behaviour_key` ignores, see `_inert_lines`)."""

    tree: ast.Module
    fatal: tuple[pyflakes_messages.Message, ...]
    inert_lines: _Inert


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
    return _Analysis(tree, tuple(fatal), _inert_lines(found))


def _inert_lines(found: Sequence[pyflakes_messages.Message]) -> _Inert:
    """Lines of bindings nothing uses: imports never used, and bindings a later one of the same name replaces
    before anything uses them (pyflakes' "redefinition of unused"), such as a second copy of a function put
    above the original, which the original then replaces. `_live` drops only the definitions among the
    latter: an import repeated is dropped where it repeats, so the imports keep their order."""
    unused = frozenset(m.lineno for m in found if isinstance(m, pyflakes_messages.UnusedImport))
    replaced = (m.message_args[1] for m in found if isinstance(m, pyflakes_messages.RedefinedWhileUnused))
    return _Inert(unused, frozenset(line for line in replaced if isinstance(line, int)))


@dataclass(frozen=True)
class _Inert:
    unused_imports: frozenset[int]  # lines
    replaced: frozenset[int]  # lines of bindings replaced before any use
    uncalled: frozenset[tuple[int, int]] = frozenset()  # (line, column) of new top-level definitions nothing uses


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
        is_docstring = (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
        )
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if (is_docstring and at == 0) or is_future:
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


def _refuse_neutral(
    child: Mapping[str, str],
    parent: Mapping[str, str],
    analysed: Mapping[str, _Analysis],
    *,
    keep: frozenset[str] = frozenset(),
) -> None:
    """Refuse a child whose files all do what the parent's do (see `behaviour_key`), counting as nothing the
    new top-level functions and constants that no code of the child refers to (`_uncalled`); `keep`: names
    the harness calls, never counted as unused."""
    if child.keys() != parent.keys():
        return
    changed = [path for path, text in child.items() if parent[path] != text]
    if not changed or not all(p.endswith(".py") for p in changed):
        return  # an identical child is the operators' own refusal; other files may change behaviour
    try:
        trees = {p: analysed[p].tree if p in analysed else _parsed(t) for p, t in child.items() if p.endswith(".py")}
        uncalled = {p: _uncalled(trees, p, parent[p], keep) for p in changed if p in analysed}
    except (SyntaxError, ValueError):
        uncalled = {}  # an unchanged file that is not Python may refer to anything: count nothing as unused
    for path, found in uncalled.items():
        inert = dataclasses.replace(analysed[path].inert_lines, uncalled=frozenset(found))
        analysed = {**analysed, path: dataclasses.replace(analysed[path], inert_lines=inert)}
    if all(_key(analysed[p]) == behaviour_key(parent[p]) for p in changed if p in analysed):
        names = list(dict.fromkeys(name for found in uncalled.values() for name in found.values()))
        added = f"; it adds {', '.join(f'`{n}`' for n in names)}, which nothing calls or reads" if names else ""
        raise EditError(
            f"the edit changes nothing the program does: {', '.join(changed)} differs from the parent only in "
            "blank lines, comments, docstrings, unused or repeated imports, code that can never run (after a "
            "return), a function that a later definition of the same name replaces, or new definitions that "
            f"nothing uses{added}",
            fix="call new code from the code that computes the result, or change the statements that compute it"
            if names
            else "change the statements that compute the result",
        )


def _uncalled(
    trees: Mapping[str, ast.Module], path: str, parent_text: str, keep: frozenset[str]
) -> dict[tuple[int, int], str]:
    """(line, column) -> name of the top-level statements in `path` that bind only new names (the parent binds
    none of them at top level), run no code of the program when made (`_inert_names`), and that nothing refers
    to: not the rest of the module, not another file, not a statement that is itself referred to (a mark from
    every other statement; an import used only by such a definition is unused too). A name in any string
    counts as a reference (getattr, __all__)."""
    parent_names = {name for statement in _parsed(parent_text).body for name in _bound_names(statement)}
    candidates: dict[str, list[ast.stmt]] = {}
    roots: list[ast.AST] = [tree for other, tree in trees.items() if other != path]
    for statement in trees[path].body:
        names = _inert_names(statement)
        if names and names.isdisjoint(parent_names) and names.isdisjoint(keep):
            for name in names:
                candidates.setdefault(name, []).append(statement)
        else:
            roots.append(statement)
    used: set[str] = set()
    todo = roots
    while todo:
        found = set().union(*(_references(node) for node in todo)) - used
        used |= found
        todo = [statement for name in found for statement in candidates.get(name, ())]
    live = {id(statement) for name in used for statement in candidates.get(name, ())}
    return {
        (statement.lineno, statement.col_offset): name
        for name, statements in candidates.items()
        for statement in statements
        if id(statement) not in live
    }


def _inert_names(statement: ast.stmt) -> set[str]:
    """The names a top-level statement binds without running the program's code (a plain `def`, `NAME =
    constant`, an import), else none."""
    if _inert_definition(statement):
        return {statement.name}  # type: ignore[attr-defined]  # a FunctionDef or AsyncFunctionDef
    if isinstance(statement, (ast.Import, ast.ImportFrom)):
        return {alias.asname or alias.name.split(".")[0] for alias in statement.names if alias.name != "*"}
    if isinstance(statement, ast.Assign) and len(statement.targets) == 1:
        target, value = statement.targets[0], statement.value
    elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
        target, value = statement.target, statement.value
    else:
        return set()
    return {target.id} if isinstance(target, ast.Name) and isinstance(value, ast.Constant) else set()


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _references(node: ast.AST, local: frozenset[str] = frozenset()) -> set[str]:
    """Every module-level name `node` may refer to: names read (except inside a function where the name is
    a parameter or a local of it or of a function around it), attributes, imported names, names declared
    global or nonlocal, and words in strings other than bare string statements (getattr, __all__). Errs
    towards more: a name counts as read wherever the scope rules do not rule it out."""
    names: set[str] = set()
    if _is_docstring(node):
        return names  # a bare string statement (a docstring) names nothing the program looks up
    if isinstance(node, _SCOPES):
        outer = [*getattr(node, "decorator_list", ()), *node.args.defaults, *filter(None, node.args.kw_defaults)]
        for expression in outer:
            names |= _references(expression, local)
        inner = local | _locals(node)
        for statement in node.body if isinstance(node.body, list) else [node.body]:
            names |= _references(statement, inner)
        return names
    if isinstance(node, ast.Name) and not isinstance(node.ctx, ast.Store) and node.id not in local:
        names.add(node.id)
    elif isinstance(node, ast.Attribute):
        names.add(node.attr)
    elif isinstance(node, ast.alias):
        names.add(node.name.split(".")[-1])
    elif isinstance(node, (ast.Global, ast.Nonlocal)):
        names.update(node.names)
    elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        names.update(_WORD.findall(node.value))
    for child in ast.iter_child_nodes(node):
        names |= _references(child, local)
    return names


def _locals(function: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> frozenset[str]:
    """The names local to a function: its parameters and what its own body binds (not nested functions',
    classes' or comprehensions'), less what it declares global or nonlocal."""
    arguments = function.args
    names = {a.arg for a in (*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs)}
    names.update(a.arg for a in (arguments.vararg, arguments.kwarg) if a is not None)
    declared: set[str] = set()
    todo: list[ast.AST] = list(function.body) if isinstance(function.body, list) else [function.body]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            names.add(node.name)
        elif isinstance(node, ast.alias):
            names.add(node.asname or node.name.split(".")[0])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            declared.update(node.names)
        if isinstance(node, (*_DEFINITIONS, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            if isinstance(node, _DEFINITIONS):
                names.add(node.name)
            continue  # its own scope: what it binds is not this function's
        todo.extend(ast.iter_child_nodes(node))
    return frozenset(names - declared)


def _is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


@functools.lru_cache(maxsize=256)
def behaviour_key(text: str) -> str:
    """The parts of a module that decide what it does: its AST without docstrings, bare string statements,
    imports nothing uses and statements after a return, raise, break or continue. Equal keys, same program.

    Cached by text: a parent's key is computed once however many children are checked against it."""
    tree = ast.parse(text)
    return _key(_Analysis(tree, (), _inert_lines(pyflakes_checker.Checker(tree).messages)))


def _key(analysis: _Analysis) -> str:
    """`behaviour_key` of an analysed file. Strips its tree in place: the last use of an analysis."""
    _strip_inert(analysis.tree, analysis.inert_lines)
    return ast.dump(analysis.tree, annotate_fields=False, include_attributes=False)


#: Fields holding statement lists; expressions hold none (a lambda's body is an expression), so only
#: statements, except handlers and match cases need visiting.
_STATEMENT_LISTS = ("body", "orelse", "finalbody")


def _strip_inert(node: ast.AST, inert_lines: _Inert) -> None:
    """Drop the statements `behaviour_key` ignores from every statement list under `node`, in place."""
    for field in _STATEMENT_LISTS:
        statements = getattr(node, field, None)
        if isinstance(statements, list) and statements and isinstance(statements[0], ast.stmt):
            for statement in statements:
                _strip_inert(statement, inert_lines)
            setattr(node, field, _live(statements, inert_lines))
    for child in (*getattr(node, "handlers", ()), *getattr(node, "cases", ())):
        _strip_inert(child, inert_lines)


_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _live(statements: list[ast.stmt], inert_lines: _Inert) -> list[ast.stmt]:
    kept: list[ast.stmt] = []
    imports: dict[str, str] = {}  # name -> the import statement (dumped) that bound it last, while still bound
    for statement in statements:
        if isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            continue  # a docstring or a bare string
        if isinstance(statement, (ast.Import, ast.ImportFrom)) and statement.lineno in inert_lines.unused_imports:
            continue  # an import nothing uses
        if _inert_definition(statement) and statement.lineno in inert_lines.replaced:
            continue  # a function replaced before anything used it
        if (statement.lineno, statement.col_offset) in inert_lines.uncalled:
            continue  # a new definition nothing uses
        if isinstance(statement, (ast.Import, ast.ImportFrom)):
            dumped = ast.dump(statement, include_attributes=False)
            names = [alias.asname or alias.name.split(".")[0] for alias in statement.names]
            if all(imports.get(name) == dumped for name in names):
                continue  # the same import again, its names still bound by the first: a no-op
            imports.update(dict.fromkeys(names, dumped))
        else:
            for name in _bound_names(statement):
                imports.pop(name, None)
        kept.append(statement)
        if isinstance(statement, (ast.Return, ast.Raise, ast.Break, ast.Continue)):
            break  # what follows can never run
    return kept or [ast.Pass()]


def _inert_definition(statement: ast.stmt) -> bool:
    """A `def` whose definition runs nothing: no decorator, and defaults that are constants or names (a class
    body, a decorator or a default such as `x=make()` runs code when the definition is made)."""
    if not isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef)) or statement.decorator_list:
        return False
    defaults = [*statement.args.defaults, *(d for d in statement.args.kw_defaults if d is not None)]
    return all(isinstance(d, (ast.Constant, ast.Name)) for d in defaults)


def _bound_names(statement: ast.stmt) -> set[str]:
    """Names a statement may bind at its own level (conservatively: any name stored anywhere in it, the names
    it defines, and those it declares global or nonlocal)."""
    names = {node.id for node in ast.walk(statement) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    for node in ast.walk(statement):
        if isinstance(node, (*_DEFINITIONS, ast.Global, ast.Nonlocal)):
            names.update([node.name] if isinstance(node, _DEFINITIONS) else node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    return names


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


@functools.lru_cache(maxsize=64)
def _parsed(text: str) -> ast.Module:
    """A parent's tree, parsed once however many children are checked against it (never mutated)."""
    return ast.parse(text)


def _signature(node: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    return f"{node.name}({ast.unparse(node.args)})"


def _check_entry(child_tree: ast.Module, parent_text: str, *, path: str, name: str) -> None:
    parent_def = _top_level(_parsed(parent_text), name)
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
