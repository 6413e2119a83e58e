"""Mutation operators: a parent and its context become FM messages; the FM's reply becomes a child.

An operator does no I/O besides reading its prompt templates: the loop calls the
FM between `messages` and `apply`. `apply` raises `EditError` with a public
reason when the reply cannot become a child genome; the loop stores that reason
on the invalid agent and shows it to the next prompt of the same parent.

- `rewrite`: the FM returns the whole entry file in a fenced block; with
  EVOLVE-BLOCK markers the text outside them must be unchanged.
- `diff`: the FM returns SEARCH/REPLACE blocks, applied tolerantly (see `edits`).
"""

from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field
from typing import Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

from evaluators.base import Genome
from meta_agent.edits import (
    EditError,
    apply_blocks,
    check_outside_unchanged,
    evolve_regions,
    extract_code,
    parse_search_replace,
    splice_into_region,
)
from meta_agent.prompting import code_language, format_files, format_score, render, truncate

#: Names of the operators `make_operator` builds.
OPERATORS: tuple[str, ...] = ("rewrite", "diff")


class UnknownOperatorError(ValueError):
    """An operator name that does not exist. `fix` lists the valid names."""

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


class OperatorWeightsError(ValueError):
    """Operator weights that cannot be sampled from (negative, not finite, all zero)."""

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class ParentInfo:
    """What a prompt may show about an agent: never its holdout score.

    score: its search-split score (None when not evaluated).
    feedback: its public evaluation feedback, or None.
    """

    agent_id: int
    genome: Genome
    score: float | None
    feedback: str | None


@dataclass(frozen=True)
class PromptContext:
    """Everything one mutation prompt shows.

    failed_attempts: public reasons recent children of this parent were invalid, oldest first.
    inspirations: a few other good agents whose (truncated) code is shown for ideas.
    """

    contract: str
    benchmark: str
    parent: ParentInfo
    failed_attempts: Sequence[str] = ()
    inspirations: Sequence[ParentInfo] = ()


@dataclass(frozen=True)
class PromptLimits:
    """How much context a prompt shows; small local models need it short.

    max_failed_attempts: the most recent N failed attempts shown (>= 0).
    max_attempt_chars: characters shown of each failed attempt's reason.
    max_feedback_chars: characters shown of the parent's feedback.
    max_inspirations: inspirations shown (>= 0).
    max_inspiration_chars: characters shown of each inspiration file.
    """

    max_failed_attempts: int = 3
    max_attempt_chars: int = 600
    max_feedback_chars: int = 2000
    max_inspirations: int = 2
    max_inspiration_chars: int = 2500


@runtime_checkable
class Operator(Protocol):
    """Turns a parent into FM messages, and the FM's reply into a child genome."""

    name: str

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """OpenAI chat messages (role, content) asking the FM for a variant of `ctx.parent`."""
        ...

    def apply(self, parent: Genome, reply: str) -> Genome:
        """The child genome the reply describes; raises EditError with a public reason."""
        ...


def _has_markers(genome: Genome) -> bool:
    return any(evolve_regions(text, path=path) for path, text in genome.files.items())


def _context_sections(ctx: PromptContext, limits: PromptLimits) -> str:
    """Inspirations, then the parent, then its failed attempts: the parent sits next to the task."""
    sections = []
    for other in list(ctx.inspirations)[: limits.max_inspirations]:
        sections.append(
            render(
                "inspiration",
                {
                    "score": format_score(other.score),
                    "files": format_files(other.genome, max_chars=limits.max_inspiration_chars),
                },
            )
        )
    parent = ctx.parent
    feedback = (parent.feedback or "").strip()
    sections.append(
        render(
            "parent",
            {
                "score": format_score(parent.score),
                "files": format_files(parent.genome),
                "feedback": truncate(feedback, max_chars=limits.max_feedback_chars) if feedback else "(none)",
            },
        )
    )
    recent = list(ctx.failed_attempts)[-limits.max_failed_attempts :] if limits.max_failed_attempts else []
    if recent:
        lines = []
        for number, reason in enumerate(recent, start=1):
            shown = truncate(reason.strip(), max_chars=limits.max_attempt_chars).rstrip()
            lines.append(f"{number}. " + shown.replace("\n", "\n   "))
        sections.append(render("failed_attempts", {"attempts": "\n".join(lines)}))
    return "\n\n".join(section.rstrip() for section in sections)


def _task_values(ctx: PromptContext, limits: PromptLimits) -> dict[str, str]:
    genome = ctx.parent.genome
    return {
        "contract": ctx.contract.strip(),
        "context": _context_sections(ctx, limits),
        "entry": genome.entry,
        "language": code_language(genome.entry),
        # A comment, so a small model that copies the format line verbatim still writes valid code.
        "placeholder": (
            f"# the complete, improved {genome.entry}"
            if genome.entry.endswith(".py")
            else f"the complete, improved {genome.entry}"
        ),
        "evolve_note": render("evolve_note", {}) if _has_markers(genome) else "",
    }


def _system_message(ctx: PromptContext) -> dict[str, str]:
    return {"role": "system", "content": render("system", {"benchmark": ctx.benchmark}).strip()}


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


def _normalised(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip()


def _check_changed(parent: Genome, files: Mapping[str, str]) -> None:
    # A whitespace-only change cannot change a score; evaluating it would waste a sandbox run.
    if all(_normalised(files[path]) == _normalised(text) for path, text in parent.files.items()):
        raise EditError(
            "the edit left the program unchanged",
            fix="change the code in a way that could raise the score",
        )


@dataclass(frozen=True)
class RewriteOperator:
    """The FM returns the whole entry file in a fenced block (name "rewrite")."""

    limits: PromptLimits = field(default_factory=PromptLimits)
    name: str = field(default="rewrite", init=False)

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """System rules, then contract, code, feedback and failed attempts, the format last."""
        user = render("rewrite", _task_values(ctx, self.limits))
        return [_system_message(ctx), {"role": "user", "content": user.strip()}]

    def apply(self, parent: Genome, reply: str) -> Genome:
        """The parent with its entry file replaced by the reply's code.

        A reply without the EVOLVE-BLOCK markers of a file that has one region is
        spliced into that region (see `edits.splice_into_region`). Raises EditError
        when the reply has no code block, changes text outside the markers, does
        not parse (Python entry files) or changes nothing.
        """
        language = code_language(parent.entry) or "python"
        code = extract_code(reply, language=language)
        original = parent.files[parent.entry]
        try:
            rewritten = evolve_regions(code, path=f"the rewritten {parent.entry}")
        except EditError:
            # Small models often drop one of the two marker comments: with a single region in the
            # original, the stray marker carries no information, so splice the code in without it.
            if len(evolve_regions(original, path=parent.entry)) != 1:
                raise
            code = "\n".join(line for line in code.splitlines() if "EVOLVE-BLOCK-" not in line) + "\n"
            rewritten = []
        if evolve_regions(original, path=parent.entry) and not rewritten:
            code = splice_into_region(original, code, path=parent.entry)
        check_outside_unchanged(original, code, path=parent.entry)
        _check_python(parent.entry, code)
        files = {**parent.files, parent.entry: code}
        _check_changed(parent, files)
        return Genome(files=files, entry=parent.entry)


@dataclass(frozen=True)
class DiffOperator:
    """The FM returns SEARCH/REPLACE blocks (name "diff")."""

    limits: PromptLimits = field(default_factory=PromptLimits)
    name: str = field(default="diff", init=False)

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """System rules, then contract, code, feedback and failed attempts, a worked block example last."""
        values = _task_values(ctx, self.limits)
        several_files = len(ctx.parent.genome.files) > 1
        values["other_files_note"] = (
            render("diff_other_files", {"entry": ctx.parent.genome.entry}) if several_files else ""
        )
        user = render("diff", values)
        return [_system_message(ctx), {"role": "user", "content": user.strip()}]

    def apply(self, parent: Genome, reply: str) -> Genome:
        """The parent with the reply's blocks applied (see `edits.apply_blocks`).

        Raises EditError for malformed or unmatched blocks, edits outside EVOLVE-BLOCK
        markers, Python files that no longer parse, and edits that change nothing.
        """
        blocks = parse_search_replace(reply)
        files = apply_blocks(parent.files, blocks, default_path=parent.entry)
        for path, text in files.items():
            if text != parent.files[path]:
                _check_python(path, text)
        _check_changed(parent, files)
        return Genome(files=files, entry=parent.entry)


def make_operator(name: str, *, limits: PromptLimits | None = None) -> Operator:
    """The operator called `name` (one of OPERATORS); UnknownOperatorError otherwise."""
    chosen = limits or PromptLimits()
    if name == "rewrite":
        return RewriteOperator(limits=chosen)
    if name == "diff":
        return DiffOperator(limits=chosen)
    raise UnknownOperatorError(
        f"there is no mutation operator named {name!r}; the operators are: {', '.join(OPERATORS)}",
        fix=f"use one of: {', '.join(OPERATORS)}",
    )


def choose_operator(weights: Mapping[str, float], rng: np.random.Generator) -> str:
    """Draw an operator name with probability proportional to its weight.

    weights: operator name -> weight (finite, >= 0; at least one > 0). Names not
    listed are never drawn. The draw depends only on `rng` and the weights' order.
    """
    for name in weights:
        if name not in OPERATORS:
            raise UnknownOperatorError(
                f"operator weights name {name!r}, which is not an operator; the operators are: "
                f"{', '.join(OPERATORS)}",
                fix=f"use only these names as operator weights: {', '.join(OPERATORS)}",
            )
    names = list(weights)
    values = [float(weights[name]) for name in names]
    if any(not math.isfinite(v) or v < 0 for v in values) or sum(values) <= 0:
        raise OperatorWeightsError(
            f"operator weights must be finite, non-negative and not all zero; got {dict(weights)}",
            fix='give at least one operator a positive weight, e.g. {"diff": 0.7, "rewrite": 0.3}',
        )
    probabilities = np.asarray(values) / sum(values)
    return names[int(rng.choice(len(names), p=probabilities))]
