"""Turning an FM (or agent) reply into a child genome, with the checks every operator shares.

A reply is a whole entry file (`rewrite`, `crossover`), SEARCH/REPLACE blocks (`diff`), or
either (`diagnose`, `self_modify`). The helpers here apply it to the parent under the
EVOLVE-BLOCK rules (`cambrian.meta_agent.edits`), refuse Python that no longer parses, and refuse a
child that differs from its parent only in whitespace; every refusal is an `EditError` with
a public reason. The operators in `_fm.py` and `_self_modify.py` call them.
"""

from __future__ import annotations

import ast
import re
import textwrap
from collections.abc import Mapping

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import (
    EditError,
    apply_blocks,
    check_outside_unchanged,
    evolve_regions,
    extract_code,
    parse_search_replace,
    splice_into_region,
)
from cambrian.meta_agent.operators._focus import Focus, Headed, enclosing_function, headed_statement
from cambrian.meta_agent.operators._prompting import code_language

# A line that opens or closes a SEARCH/REPLACE block: its presence means the reply chose the block format.
_BLOCK_MARKER_RE = re.compile(r"^\s*(?:<{5,9}\s*SEARCH|>{5,9}\s*REPLACE)\s*$", re.MULTILINE)

# A comment line that names the EVOLVE-BLOCK (any comment syntax of `edits`' markers): in a reply it is about the
# prompt, never the program.
_REGION_COMMENT_RE = re.compile(r"^\s*(?:#+|//+|--|;+|%+|/\*+|<!--|\*+)[^\n]*EVOLVE-BLOCK")


def _without_region_comments(code: str) -> str:
    """The reply's code less its lines that name the EVOLVE-BLOCK: marker lines (a copied marker would move the
    region for every later child), and comments such as the task's placeholder (`# the complete, improved code of
    the EVOLVE-BLOCK of primes.py`) or a bare `# EVOLVE-BLOCK` around the code, which small models copy from
    the prompt (measured: 39 of 44 programs of one 40-proposal fast-primes run carried them, passed on to every
    descendant)."""
    return "".join(line + "\n" for line in code.splitlines() if not _names_the_region(line))


def _names_the_region(line: str) -> bool:
    return "EVOLVE-BLOCK-" in line or _REGION_COMMENT_RE.match(line) is not None


def _check_python(path: str, text: str) -> None:
    if not path.endswith(".py"):
        return
    try:
        ast.parse(text)
    except SyntaxError as error:
        line = (error.text or "").rstrip()
        raise EditError(
            f"the edited {path} is not valid Python: {error.msg} at line {error.lineno}"
            + (f": {line.strip()!r}" if line else ""),
            fix="return complete, syntactically valid code",
        ) from None


def _parses(text: str) -> bool:
    try:
        ast.parse(text)
    except (SyntaxError, ValueError):  # ValueError: a NUL byte
        return False
    return True


def _normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip()


def _same_program(files: Mapping[str, str], other: Genome) -> bool:
    # A whitespace-only change cannot change a score; evaluating it would waste a sandbox run.
    return set(files) == set(other.files) and all(
        _normalised(files[path]) == _normalised(text) for path, text in other.files.items()
    )


def _check_changed(parent: Genome, files: Mapping[str, str]) -> None:
    if _same_program(files, parent):
        raise EditError(
            "the edit left the program unchanged",
            fix="change the code in a way that could raise the score",
        )


def _region_body(code: str) -> str:
    """The code a reply wrote for a file with one EVOLVE-BLOCK region: what lies between its markers when it
    kept exactly one pair, else the whole reply; either without the lines that name the EVOLVE-BLOCK
    (`_without_region_comments`)."""
    try:
        regions = evolve_regions(code, path="the reply")
    except EditError:
        regions = []
    lines = code.splitlines()
    if len(regions) == 1:
        start, end = regions[0]
        lines = lines[start:end]
    return _without_region_comments("\n".join(lines))


def _replace_entry(parent: Genome, code: str) -> Genome:
    """The parent with its entry file replaced by `code` (EVOLVE-BLOCK rules, parses, changed).

    For an entry file with one EVOLVE-BLOCK region the reply is that region's new code: what the reply
    wrote between its markers (or, without markers, all of it, less the lines it copied from outside the
    region) is spliced in, and the text outside the region stays as it was by construction (see
    `edits.splice_into_region`). Files with several regions must come back whole, every line outside
    the regions unchanged.
    """
    original = parent.files[parent.entry]
    if len(evolve_regions(original, path=parent.entry)) == 1:
        code = splice_into_region(original, _region_body(code), path=parent.entry)
    else:
        check_outside_unchanged(original, code, path=parent.entry)
    _check_python(parent.entry, code)
    files = {**parent.files, parent.entry: code}
    _check_changed(parent, files)
    return Genome(files=files, entry=parent.entry)


def _apply_rewrite(parent: Genome, reply: str) -> Genome:
    language = code_language(parent.entry) or "python"
    return _replace_entry(parent, extract_code(reply, language=language))


def _apply_search_replace(parent: Genome, reply: str) -> Genome:
    files = apply_blocks(parent.files, parse_search_replace(reply), default_path=parent.entry)
    for path, text in files.items():
        if text != parent.files[path]:
            _check_python(path, text)
    _check_changed(parent, files)
    return Genome(files=files, entry=parent.entry)


def _apply_lines(parent: Genome, reply: str, focus: Focus) -> Genome:
    """The parent with the `focus` lines of `focus.path` replaced by the reply's code.

    New lines are moved to the old lines' indentation (`_at_indent`), and lines naming the EVOLVE-BLOCK copied
    into them are dropped (small models copy the marker next to the lines they were shown); a reply
    with no code is refused, and so is a focus that no longer matches the parent's lines (a caller's bug).
    """
    original = parent.files[focus.path]
    lines = original.splitlines()
    if "\n".join(lines[focus.start : focus.end]).rstrip() != focus.text:
        raise EditError(
            f"the lines asked for are not lines {focus.start + 1}-{focus.end} of {focus.path}",
            fix="pick the lines from this parent (LinesOperator.pick)",
        )
    language = code_language(focus.path) or "python"
    try:
        code = extract_code(reply, language=language).rstrip()
    except EditError:
        code = ""
    if not code.strip():
        raise EditError("the reply had no new lines", fix=f"reply with the new lines in one ```{language} block")
    code = _without_region_comments(code).rstrip()
    if not code.strip():
        raise EditError(
            "the reply had no new lines, only EVOLVE-BLOCK markers",
            fix="reply with the new code only, without EVOLVE-BLOCK comments",
        )
    headed = headed_statement(parent, focus) if focus.path.endswith(".py") else None
    text = _redefined(parent, focus, code) or (_restated(lines, headed, focus, code) if headed else None)
    if text is None:
        placed = [_spliced(lines, focus.start, focus.end, new) for new in _at_indent(code, _indent(focus.text))]
        if headed is not None:  # a reply that cannot stand at a header, above its body, may be a new body
            start, end = headed.body
            placed += [
                _spliced(lines, start, end, new) for new in _at_indent(code, _indent("\n".join(lines[start:end])))
            ]
        text = next((t for t in placed if not focus.path.endswith(".py") or _parses(t)), placed[0])
    _check_python(focus.path, text)
    files = {**parent.files, focus.path: text}
    _check_changed(parent, files)
    return Genome(files=files, entry=parent.entry)


def _spliced(lines: list[str], start: int, end: int, new: str) -> str:
    """The file of `lines` with its lines [start, end) replaced by `new`."""
    return "\n".join([*lines[:start], *new.splitlines(), *lines[end:]]) + "\n"


def _restated(lines: list[str], headed: Headed, focus: Focus, code: str) -> str | None:
    """Where the lines asked for are the header of a condition or a loop (its body kept) and the reply is a whole
    statement of that kind, header and body: the file with the old statement replaced by it (its `else` kept
    where the reply has none); else None.

    Measured (fast primes, qwen2.5-coder-1.5b, seed 0): asked for `while d * d <= k:` or `for k in range(2, n):`,
    the model wrote the whole loop, or only its body. Placed at the header, the old body followed the new one
    (or did not parse); a reply that is only a body is placed under the old header when it cannot stand at
    the header (`_apply_lines`)."""
    try:
        statements = ast.parse(textwrap.dedent(code)).body
    except (SyntaxError, ValueError):
        return None  # a header alone does not parse: it is what was asked for
    if not statements or not isinstance(statements[0], headed.kind):
        return None
    # A reply without an `else` (or `elif`) of its own replaces the header and body: the old `else` stays.
    start, end = headed.statement if getattr(statements[0], "orelse", None) else (headed.statement[0], headed.body[1])
    placed = (_spliced(lines, start, end, new) for new in _at_indent(code, _indent(focus.text)))
    return next((text for text in placed if _parses(text)), None)


def _redefined(parent: Genome, focus: Focus, code: str) -> str | None:
    """The focus's file with the function around the focus replaced by `code`, where `code` defines that
    function anew (imports or helpers beside it kept); None otherwise, or where the result does not parse.

    Small models asked for a few lines of a function often answer with the whole function. Placed at the
    lines, that definition nested inside the old one, which never called it: the old function ran on without
    its lines and returned None (measured with bench/replay_lines.py on the generality suite's TSP run, seed 0,
    qwen2.5-coder-1.5b: 9 of 38 line edits, none valid so, 4 valid as replacements). The reply says which
    function it means; it replaces that one."""
    found = enclosing_function(parent, focus) if focus.path.endswith(".py") else None
    if found is None:
        return None
    name, function = found
    try:
        tree = ast.parse(textwrap.dedent(code))
    except (SyntaxError, ValueError):
        return None
    if not any(isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body):
        return None
    lines = parent.files[focus.path].splitlines()
    placed = (_spliced(lines, function.start, function.end, new) for new in _at_indent(code, _indent(function.text)))
    return next((text for text in placed if _parses(text)), None)


def _at_indent(code: str, indent: str) -> list[str]:
    """`code` (the new lines) placed at the indentation of the lines they replace, the likeliest reading first:
    its common indentation made the old lines' (its own relative indentation kept); then, where its first line
    has none and the rest are at the file's indentation already (a first line copied without it), with only
    that line indented. The caller keeps the first that parses.

    Measured (circle packing, qwen2.5-coder-1.5b): 3 of 11 `lines` replies were refused as "unexpected indent"
    or "expected an indented block" only because they were written 4 spaces deeper or shallower than the
    lines they replace, their own relative indentation right."""
    lines = code.splitlines()
    own = _indent(code)
    placed = ["\n".join(indent + line[len(own) :] if line.strip() else "" for line in lines)]
    rest = [line for line in lines[1:] if line.strip()]
    if indent and not own and rest and all(line.startswith(indent) for line in rest):
        placed.append("\n".join([indent + lines[0], *lines[1:]]))
    return placed


def _indent(code: str) -> str:
    """The whitespace every non-blank line of `code` starts with."""
    lines = [line for line in code.splitlines() if line.strip()]
    if not lines:
        return ""
    common = lines[0][: len(lines[0]) - len(lines[0].lstrip())]
    for line in lines[1:]:
        while common and not line.startswith(common):
            common = common[:-1]
    return common


def _apply_blocks_or_file(parent: Genome, reply: str) -> Genome:
    # Small models often answer a block request with the whole file: accept either format.
    if _BLOCK_MARKER_RE.search(reply):
        return _apply_search_replace(parent, reply)
    return _apply_rewrite(parent, reply)
