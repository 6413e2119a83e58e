"""A BASELINE mutation operator without an FM: small random edits of constants and operators.

It exists for ablations: selection strategies (greedy, MAP-Elites, novelty, HGM)
compared over many seeds at no FM cost, on benchmarks where small numeric edits
matter (the deceptive trap benchmark, circle packing's constants). It is not a
competitive operator: it never writes new code, only nudges what is there.

One mutation: parse the entry file with `ast.parse` (never executed), collect the
sites inside its EVOLVE-BLOCK regions (the whole file when it has no markers),
draw the number of edits 1 + Geometric (P(1) = 0.7, P(2) = 0.21, P(3) = 0.09 for
max_edits = 3; never more than the sites), pick that many distinct sites
uniformly and edit each by replacing its exact source span, so comments and
formatting stay as they were (ast.unparse would rewrite the file). Sites:

- numeric constants (int, float; never bool), a leading unary minus included:
  int c -> c +- 1 (70%), 2c, -c, or 0 / 1 (10% each; a draw equal to c becomes
  c +- 1); float c -> c * (1 + N(0, s)) or c + N(0, s), written with repr so it
  parses back to the same float;
- binary operators + - * / // % ** -> another of the same seven;
- comparison operators < <= > >= == != -> another of the same six;
- `and` <-> `or`;
- a unary minus before a non-constant operand -> removed.

The child must parse and differ from the parent, else the draw is repeated (a
bounded number of times) before `EditError` says why. Deterministic: the same
parent and the same rng state give the same child.
"""

from __future__ import annotations

import ast
import bisect
import io
import math
import re
import tokenize
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError, check_outside_unchanged, evolve_regions
from cambrian.meta_agent.operators._base import Operator, OperatorEnv, Proposal
from cambrian.meta_agent.operators._prompting import PromptContext

ONE_EDIT_PROBABILITY = 0.7  # P(1 edit); the number of edits is Geometric with this p, capped at max_edits
MAX_ATTEMPTS = 20  # draws tried before giving up on a parent whose edits never parse or never change it

_BINARY_OPERATORS: dict[type[ast.operator], str] = {
    ast.Add: "+",
    ast.Sub: "-",
    ast.Mult: "*",
    ast.Div: "/",
    ast.FloorDiv: "//",
    ast.Mod: "%",
    ast.Pow: "**",
}
_COMPARISONS: dict[type[ast.cmpop], str] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
}
_BOOLEANS: dict[type[ast.boolop], str] = {ast.And: "and", ast.Or: "or"}
_NEWLINE = re.compile(rb"\r\n|\r|\n")

SiteKind = Literal["number", "binop", "compare", "boolop", "negation"]


@dataclass(frozen=True)
class MutationSite:
    """One editable spot: a byte span [start, end) of the UTF-8 source and what it holds.

    kind: "number" (`value` holds it), "binop", "compare", "boolop" (`text` is the operator) or
    "negation" (`text` is the "-" of a unary minus). line: 1-based line of the span's start, for the note.
    wrap_negative: a negative number written here needs parentheses (`(-2) ** x` is not `-2 ** x`).
    """

    start: int
    end: int
    kind: SiteKind
    text: str
    line: int
    value: int | float = 0
    wrap_negative: bool = False


@dataclass(frozen=True)
class _Edit:
    site: MutationSite
    new_text: str

    def describe(self) -> str:
        return f"line {self.site.line}: {self.site.text} -> {self.new_text}"


class AstMutation(Operator):
    """Random small AST-level edits of numbers and operators inside the EVOLVE-BLOCK (no FM).

    max_edits: most edits in one child, >= 1 (default 3). float_sigma: the standard deviation of
    the relative (c * (1 + N(0, s))) or absolute (c + N(0, s)) change of a float constant, > 0.
    """

    name = "ast_mutate"

    def __init__(self, *, max_edits: int = 3, float_sigma: float = 0.1) -> None:
        if max_edits < 1:
            raise ValueError(f"max_edits is {max_edits}; it must be at least 1")
        if not (math.isfinite(float_sigma) and float_sigma > 0):
            raise ValueError(f"float_sigma is {float_sigma}; it must be a positive finite number")
        self.max_edits = max_edits
        self.float_sigma = float_sigma

    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        """A child with random edits drawn from `env.rng()`; the note names them."""
        parent = context.parent.genome
        child, note = self.mutate_with_note(parent, env.rng())
        return env.check(child, parent, note=note)

    def cannot_edit(self, parent: Genome) -> str | None:
        try:
            if collect_sites(parent.files[parent.entry], path=parent.entry):
                return None
        except EditError as exc:
            return f"{self.name} cannot read {parent.entry}: {exc}"
        return f"{self.name} needs a number or an operator in the EVOLVE-BLOCK of {parent.entry}, and it has none"

    def mutate(self, parent: Genome, rng: np.random.Generator) -> Genome:
        """A child of `parent` with 1..max_edits random edits in its entry file; EditError when none can be made."""
        return self.mutate_with_note(parent, rng)[0]

    def mutate_with_note(self, parent: Genome, rng: np.random.Generator) -> tuple[Genome, str]:
        """The child and a short note of its edits, e.g. "line 12: 0.5 -> 0.5731; line 14: + -> *".

        Raises EditError (public reason + fix) when the entry file does not parse, has no site to
        edit inside its EVOLVE-BLOCK, or no draw of MAX_ATTEMPTS gave a parseable, different child.
        """
        path = parent.entry
        text = parent.files[path]
        sites = collect_sites(text, path=path)
        if not sites:
            raise EditError(
                f"{path} has no numeric constants or operators inside its EVOLVE-BLOCK to mutate",
                fix="put numbers or arithmetic/comparison operators inside the EVOLVE-BLOCK, or use an FM operator",
            )
        source = text.encode("utf-8")
        for _ in range(MAX_ATTEMPTS):
            count = min(int(rng.geometric(ONE_EDIT_PROBABILITY)), self.max_edits, len(sites))
            chosen = sorted(rng.choice(len(sites), size=count, replace=False).tolist())
            edits = [self._edit(sites[index], rng) for index in chosen]
            child = _apply(source, edits)
            if child == text or not _parses(child):
                continue
            try:
                check_outside_unchanged(text, child, path=path)
            except EditError:
                continue  # a span the tokenizer and the markers disagree on: draw again rather than trust it
            files = dict(parent.files)
            files[path] = child
            return Genome(files=files, entry=path), "; ".join(edit.describe() for edit in edits)
        raise EditError(
            f"no parseable change of {path} was found in {MAX_ATTEMPTS} random draws of its {len(sites)} sites",
            fix="use an FM operator for this program; its constants and operators admit no valid random edit",
        )

    def _edit(self, site: MutationSite, rng: np.random.Generator) -> _Edit:
        if site.kind == "number":
            value = (
                _mutate_int(int(site.value), rng)
                if isinstance(site.value, int)
                else self._mutate_float(float(site.value), rng)
            )
            new_text = repr(value)
            if value < 0 and site.wrap_negative:
                new_text = f"({new_text})"
            return _Edit(site, new_text)
        if site.kind == "negation":
            return _Edit(site, "")
        families: dict[str, Mapping[type, str]] = {
            "binop": _BINARY_OPERATORS,
            "compare": _COMPARISONS,
            "boolop": _BOOLEANS,
        }
        others = [symbol for symbol in families[site.kind].values() if symbol != site.text]
        return _Edit(site, others[int(rng.integers(len(others)))])

    def _mutate_float(self, value: float, rng: np.random.Generator) -> float:
        noise = float(rng.normal(0.0, self.float_sigma))
        # Relative change keeps a constant's scale; 0.0 has no scale, so it moves absolutely.
        changed = value * (1.0 + noise) if value != 0.0 and rng.random() < 0.5 else value + noise
        if math.isfinite(changed) and changed != value:
            return changed
        # Tiny noise on a huge constant (or an overflow): a fixed relative step still changes it.
        return value * (1.0 - self.float_sigma) if value != 0.0 else self.float_sigma


def _mutate_int(value: int, rng: np.random.Generator) -> int:
    """c +- 1 (70%), 2c, -c, or 0 / 1 (10% each); never c itself."""
    step = value + (1 if rng.random() < 0.5 else -1)
    draw = rng.random()
    if draw < 0.7:
        return step
    if draw < 0.8:
        changed = 2 * value
    elif draw < 0.9:
        changed = -value
    else:
        changed = int(rng.integers(2))
    return changed if changed != value else step


def collect_sites(text: str, *, path: str = "the entry file") -> list[MutationSite]:
    """Every editable site of `text` inside its EVOLVE-BLOCK regions, in source order.

    Raises EditError when the text does not parse as Python or its markers are unbalanced.
    """
    try:
        tree = ast.parse(text)
    except SyntaxError as exc:
        raise EditError(
            f"{path} does not parse as Python (line {exc.lineno}: {exc.msg}), so it cannot be mutated",
            fix="mutate a parent whose entry file is valid Python",
        ) from exc
    index = _SourceIndex(text, regions=evolve_regions(text, path=path))
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    # Positions inside f-strings are unreliable before Python 3.12: leave f-strings alone.
    in_fstring = {id(n) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for n in ast.walk(node)}
    sites: list[MutationSite] = []
    for node in ast.walk(tree):
        if id(node) in in_fstring or not isinstance(node, ast.expr):
            continue
        parent = parents.get(id(node))
        number = _signed_number(node)
        if number is not None:
            if _signed_number(parent) is None:  # the `1` of `-1` is not a site of its own: `-1` is
                sites += index.number_site(node, number, wrap_negative=_needs_parentheses(node, parent))
            continue
        sites += _operator_sites(node, index)
    return sorted(sites, key=lambda site: site.start)


def _signed_number(node: ast.AST | None) -> int | float | None:
    """The value of an int/float literal, or of `-literal`; None for anything else (bool included)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _signed_number(node.operand)
        return -inner if inner is not None and isinstance(node.operand, ast.Constant) else None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    return None


def _needs_parentheses(node: ast.expr, parent: ast.AST | None) -> bool:
    """Whether a negative number written at `node` would bind differently without parentheses."""
    if isinstance(parent, ast.Attribute):
        return True  # `(-1).real`, never `-1.real`
    return isinstance(parent, ast.BinOp) and isinstance(parent.op, ast.Pow) and parent.left is node


def _operator_sites(node: ast.expr, index: _SourceIndex) -> list[MutationSite]:
    """The sites of the operator tokens `node` itself holds (not those of its children)."""
    pairs: list[tuple[ast.expr, ast.expr, SiteKind, str]] = []  # (left, right, kind, symbol)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPERATORS:
        pairs.append((node.left, node.right, "binop", _BINARY_OPERATORS[type(node.op)]))
    elif isinstance(node, ast.Compare):
        lefts = [node.left, *node.comparators[:-1]]
        pairs += [
            (left, right, "compare", _COMPARISONS[type(op)])
            for left, op, right in zip(lefts, node.ops, node.comparators)
            if type(op) in _COMPARISONS
        ]
    elif isinstance(node, ast.BoolOp):
        symbol = _BOOLEANS[type(node.op)]
        pairs += [(left, right, "boolop", symbol) for left, right in zip(node.values, node.values[1:])]
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        site = index.negation_site(node)
        return [site] if site is not None else []
    found = (index.operator_site(left, right, kind=kind, symbol=symbol) for left, right, kind, symbol in pairs)
    return [site for site in found if site is not None]


class _SourceIndex:
    """Byte offsets of a source text: lines, operator tokens, EVOLVE-BLOCK regions.

    The ast gives columns as UTF-8 byte offsets, tokenize as characters; both become absolute byte offsets.
    """

    def __init__(self, text: str, *, regions: list[tuple[int, int]]) -> None:
        self.source = text.encode("utf-8")
        self.line_starts = [0] + [match.end() for match in _NEWLINE.finditer(self.source)]
        # No markers: the whole file may change.
        self.regions = regions or [(0, len(self.line_starts))]
        self.tokens = self._operator_tokens(text)

    def _operator_tokens(self, text: str) -> list[tuple[int, int, str]]:
        """(start, end, text) of every operator and `and`/`or` token."""
        tokens: list[tuple[int, int, str]] = []
        wanted = {*_BINARY_OPERATORS.values(), *_COMPARISONS.values(), *_BOOLEANS.values()}
        try:
            for token in tokenize.generate_tokens(io.StringIO(text).readline):
                if token.string in wanted and token.type in (tokenize.OP, tokenize.NAME):
                    (row, col), (end_row, _) = token.start, token.end
                    if row != end_row or row > len(self.line_starts):
                        continue
                    start = self.line_starts[row - 1] + len(token.line[:col].encode("utf-8"))
                    tokens.append((start, start + len(token.string.encode("utf-8")), token.string))
        except (tokenize.TokenError, SyntaxError):
            return tokens  # the ast parsed it, so this is a tokenizer corner: numbers stay editable
        return tokens

    def offset(self, line: int | None, col: int | None) -> int:
        return self.line_starts[(line or 1) - 1] + (col or 0)

    def line_of(self, offset: int) -> int:
        """1-based line holding byte `offset`."""
        return bisect.bisect_right(self.line_starts, offset)

    def inside(self, start: int, end: int) -> bool:
        """Whether the byte span [start, end) lies within one EVOLVE-BLOCK region."""
        first, last = self.line_of(start) - 1, self.line_of(max(start, end - 1)) - 1
        return any(low <= first and last < high for low, high in self.regions)

    def text(self, start: int, end: int) -> str:
        return self.source[start:end].decode("utf-8")

    def number_site(self, node: ast.expr, value: int | float, *, wrap_negative: bool) -> list[MutationSite]:
        start, end = self.offset(node.lineno, node.col_offset), self.offset(node.end_lineno, node.end_col_offset)
        if not self.inside(start, end):
            return []
        literal = self.text(start, end)
        try:
            reads_back = ast.literal_eval(literal) == value
        except (ValueError, SyntaxError):
            reads_back = False
        if not reads_back:  # the span is not the literal it should be: never edit blind
            return []
        return [MutationSite(start, end, "number", literal, node.lineno, value, wrap_negative=wrap_negative)]

    def operator_site(self, left: ast.expr, right: ast.expr, *, kind: SiteKind, symbol: str) -> MutationSite | None:
        """The site of the one `symbol` token between `left` and `right`, or None when not exactly one."""
        low, high = self.offset(left.end_lineno, left.end_col_offset), self.offset(right.lineno, right.col_offset)
        spans = [(s, e) for s, e, text in self.tokens if text == symbol and low <= s and e <= high]
        if len(spans) != 1 or not self.inside(*spans[0]) or self.text(*spans[0]) != symbol:
            return None
        start, end = spans[0]
        return MutationSite(start, end, kind, symbol, self.line_of(start))

    def negation_site(self, node: ast.UnaryOp) -> MutationSite | None:
        """The leading `-` of a unary minus (its removal is the edit)."""
        start = self.offset(node.lineno, node.col_offset)
        if self.text(start, start + 1) != "-" or not self.inside(start, start + 1):
            return None
        return MutationSite(start, start + 1, "negation", "-", node.lineno)


def _apply(source: bytes, edits: list[_Edit]) -> str:
    """`source` with every edit's span replaced, last span first so earlier offsets stay valid."""
    for edit in sorted(edits, key=lambda edit: edit.site.start, reverse=True):
        source = source[: edit.site.start] + edit.new_text.encode("utf-8") + source[edit.site.end :]
    return source.decode("utf-8")


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):  # ValueError: e.g. a null byte
        return False
    return True
