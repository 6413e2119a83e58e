"""Whether a child changes what its program does: the half of the static check that refuses neutral edits.

A child whose changed files all do exactly what the parent's do (it only moved
blank lines, comments or docstrings, added unused or repeated imports, put
code after a `return`, put a copy of a function where the original, defined
later, replaces it, or added functions and constants that nothing refers to)
is refused, so that the FM hears it changed nothing before any sandbox time is
spent. Two files do the same when their `behaviour_key`s are equal: the AST
without what cannot change behaviour. Pure functions of the code: nothing here
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

from cambrian.meta_agent.edits._base import EditError


def refuse_neutral(
    child: Mapping[str, str],
    parent: Mapping[str, str],
    analysed: Mapping[str, Analysed],
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
        trees = {p: analysed[p].tree if p in analysed else parsed(t) for p, t in child.items() if p.endswith(".py")}
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


@functools.lru_cache(maxsize=256)
def behaviour_key(text: str) -> str:
    """The parts of a module that decide what it does: its AST without docstrings, bare string statements,
    imports nothing uses and statements after a return, raise, break or continue. Equal keys, same program.

    Cached by text: a parent's key is computed once however many children are checked against it."""
    tree = ast.parse(text)
    return _key(Analysed(tree, inert_lines(pyflakes_checker.Checker(tree).messages)))


def inert_lines(found: Sequence[pyflakes_messages.Message]) -> Inert:
    """Lines of bindings nothing uses: imports never used, and bindings a later one of the same name replaces
    before anything uses them (pyflakes' "redefinition of unused"), such as a second copy of a function put
    above the original, which the original then replaces. `_live` drops only the definitions among the
    latter: an import repeated is dropped where it repeats, so the imports keep their order."""
    unused = frozenset(m.lineno for m in found if isinstance(m, pyflakes_messages.UnusedImport))
    replaced = (m.message_args[1] for m in found if isinstance(m, pyflakes_messages.RedefinedWhileUnused))
    return Inert(unused, frozenset(line for line in replaced if isinstance(line, int)))


@dataclass(frozen=True)
class Inert:
    """Where the statements of a file are that bind what nothing uses (dropped from its behaviour key)."""

    unused_imports: frozenset[int]  # lines
    replaced: frozenset[int]  # lines of bindings replaced before any use
    uncalled: frozenset[tuple[int, int]] = frozenset()  # (line, column) of new top-level definitions nothing uses


@dataclass(frozen=True)
class Analysed:
    """One parse of a changed file and the lines of the bindings nothing uses in it (which `behaviour_key`
    ignores, see `inert_lines`)."""

    tree: ast.Module
    inert_lines: Inert


def _key(analysis: Analysed) -> str:
    """`behaviour_key` of an analysed file. Strips its tree in place: the last use of an analysis."""
    _strip_inert(analysis.tree, analysis.inert_lines)
    return ast.dump(analysis.tree, annotate_fields=False, include_attributes=False)


#: Fields holding statement lists; expressions hold none (a lambda's body is an expression), so only
#: statements, except handlers and match cases need visiting.
_STATEMENT_LISTS = ("body", "orelse", "finalbody")


def _strip_inert(node: ast.AST, inert_lines: Inert) -> None:
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


def _live(statements: list[ast.stmt], inert_lines: Inert) -> list[ast.stmt]:
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
        elif imports:  # (the walk costs: most statement lists follow no import)
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
    names: set[str] = set()
    for node in ast.walk(statement):
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Store):
                names.add(node.id)
        elif isinstance(node, _DEFINITIONS):
            names.add(node.name)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update(alias.asname or alias.name.split(".")[0] for alias in node.names)
    return names


@functools.lru_cache(maxsize=64)
def _module_names(text: str) -> frozenset[str]:
    """What a parent's top-level statements may bind (`_bound_names`), once per parent."""
    return frozenset(name for statement in parsed(text).body for name in _bound_names(statement))


def _uncalled(
    trees: Mapping[str, ast.Module], path: str, parent_text: str, keep: frozenset[str]
) -> dict[tuple[int, int], str]:
    """(line, column) -> name of the top-level statements in `path` that bind only new names (the parent binds
    none of them at top level), run no code of the program when made (`_inert_names`), and that nothing refers
    to: not the rest of the module, not another file, not a statement that is itself referred to (a mark from
    every other statement; an import used only by such a definition is unused too). A name in any string
    counts as a reference (getattr, __all__)."""
    parent_names = _module_names(parent_text)
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


def _references(node: ast.AST) -> set[str]:
    """Every module-level name `node` may refer to: names read (except inside a function where the name is
    a parameter or a local of it or of a function around it), attributes, imported names, names declared
    global or nonlocal, and words in strings other than bare string statements (getattr, __all__). Errs
    towards more: a name counts as read wherever the scope rules do not rule it out."""
    names: set[str] = set()
    todo: list[tuple[ast.AST, frozenset[str]]] = [(node, frozenset())]  # (node, the names local where it is)
    while todo:
        node, local = todo.pop()
        if is_docstring(node):
            continue  # a bare string statement (a docstring) names nothing the program looks up
        if isinstance(node, _SCOPES):
            outer = [*getattr(node, "decorator_list", ()), *node.args.defaults, *filter(None, node.args.kw_defaults)]
            todo.extend((expression, local) for expression in outer)
            inner = local | _locals(node)
            todo.extend((statement, inner) for statement in (node.body if isinstance(node.body, list) else [node.body]))
            continue
        if isinstance(node, ast.Name):
            if not isinstance(node.ctx, ast.Store) and node.id not in local:
                names.add(node.id)
        elif isinstance(node, ast.Attribute):
            names.add(node.attr)
        elif isinstance(node, ast.alias):
            names.add(node.name.split(".")[-1])
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            names.update(_WORD.findall(node.value))
        todo.extend((child, local) for child in ast.iter_child_nodes(node))
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


def is_docstring(node: ast.AST) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


@functools.lru_cache(maxsize=64)
def parsed(text: str) -> ast.Module:
    """A parent's tree, parsed once however many children are checked against it (never mutated)."""
    return ast.parse(text)
