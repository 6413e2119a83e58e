"""The FM operators that ask for a few named lines: `lines` (a statement the proposer picks) and `knob` (a
module-level number).

Small models asked for a free edit copy what they see; asked to rewrite named lines, in a short prompt, they
change them (docs/results/small-models.md). So the proposer draws the lines first (`_focus.windows`, a seeded
draw from a stream of its own), the prompt shows the program (as an outline around the lines when it is long,
`_outline`) and asks for those lines only, and the reply's code block takes their place at their indentation
(`_replies._apply_lines`). Both are `FMOperator`s (`_fm`): one call, the static check, repair rounds.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError
from cambrian.meta_agent.operators._base import OperatorEnv
from cambrian.meta_agent.operators._fm import FMOperator
from cambrian.meta_agent.operators._focus import Focus, editable_files, windows
from cambrian.meta_agent.operators._grammars import changed_lines_grammar, code_grammar
from cambrian.meta_agent.operators._outline import assigned_names, code_around, outline_genome
from cambrian.meta_agent.operators._prompting import (
    PromptContext,
    PromptLimits,
    code_language,
    format_files,
    format_score,
    render,
    system_message,
    task_values,
)
from cambrian.meta_agent.operators._replies import _apply_lines

_FOCUS_SALT = 0xF0C5  # the lines are drawn from a stream of their own, apart from the idea's


@dataclass(frozen=True)
class LinesOperator(FMOperator):
    """The FM rewrites a few lines the proposer picks (name "lines"), replying with the new lines in one code
    block: a run of simple statements, a condition's or a loop's header, or a short compound statement, of
    any editable file (see `_focus`). Small models asked for a free edit copy what they see; asked to
    rewrite named lines, in a short prompt, they change them (docs/results/small-models.md)."""

    name: ClassVar[str] = "lines"
    kind: ClassVar[str | None] = "lines"  # `knob` too: the same question, on a number's line
    #: The reply is a few lines: far below fm.max_tokens.
    max_reply_tokens: ClassVar[int | None] = 384
    #: A benchmark's ideas are moves of a whole program ("place circles one at a time"); asked to make one in
    #: the few lines named, qwen2.5-coder-1.5b wrote lines that broke the program (docs/results/generality.md,
    #: "Line edits that must change the lines, and ideas for whole programs only").
    takes_idea: ClassVar[bool] = False
    limits: PromptLimits = field(default_factory=PromptLimits)

    def windows(self, parent: Genome) -> list[Focus]:
        """What this operator may ask to rewrite in `parent` (`_focus.windows`)."""
        return windows(parent)

    def pick(self, parent: Genome, rng: np.random.Generator) -> Focus | None:
        """The lines to rewrite: a seeded draw among `windows(parent)`; None when there is none."""
        found = self.windows(parent)
        return found[int(rng.integers(len(found)))] if found else None

    def cannot_edit(self, parent: Genome) -> str | None:
        if self.windows(parent):
            return None
        files = ", ".join(editable_files(parent)) or parent.entry
        return f"{self.name} needs a statement in the editable code to rewrite, and {files} has none"

    def prepare(self, ctx: PromptContext, env: OperatorEnv) -> PromptContext:
        """The lines to ask for: a seeded draw (`pick`), unless the context names them."""
        if ctx.focus is not None:
            return ctx
        return dataclasses.replace(ctx, focus=self.pick(ctx.parent.genome, env.rng(_FOCUS_SALT)))

    def child(self, ctx: PromptContext, reply: str) -> Genome:
        return self.apply(ctx.parent.genome, reply, focus=ctx.focus)

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """A short prompt: the contract, the program and its score, the lines to rewrite. A program
        longer than `limits.max_lines_program_chars` is shown as an outline, the same for any lines asked for,
        and the code around the lines follows in full (`_outline`).

        What a local server must process anew for each prompt is what it does not share with an earlier one:
        the program comes before its score and the lines, so proposals from one parent share all but the task,
        and a child's prompt shares its parent's up to the first line the edit changed."""
        genome = ctx.parent.genome
        if ctx.focus is None:
            raise EditError(
                self.cannot_edit(genome) or f"the {self.name} operator was given no lines to ask for",
                fix="give the program's editable region a statement, or use the rewrite operator",
            )
        shown, around = genome, None
        if sum(len(text) for text in genome.files.values()) > self.limits.max_lines_program_chars:
            # A module-level assignment (a knob's setting) brings the functions that read it.
            names = () if ctx.focus.text[:1].isspace() else assigned_names(ctx.focus.text)
            shown, around = outline_genome(genome), code_around(genome, ctx.focus, names=names)
        values = {
            **task_values(ctx, self.limits),
            "score": format_score(ctx.parent.score),
            "files": format_files(shown),
            "around_note": render("lines_around", {"code": format_files(around)}) if around else "",
            "path": ctx.focus.path,
            "focus": ctx.focus.text,
            "language": code_language(ctx.focus.path) or "python",
        }
        return [system_message(ctx), {"role": "user", "content": render("lines", values).strip()}]

    def apply(self, parent: Genome, reply: str, *, focus: Focus | str | None = None) -> Genome:
        """The parent with the `focus` lines replaced by the reply's code block (a str: the first lines of the
        entry file that read it)."""
        if focus is None:
            raise EditError("the lines operator needs the lines it asked for", fix="pass focus=")
        return _apply_lines(parent, reply, Focus.find(parent, focus) if isinstance(focus, str) else focus)

    def grammar(self, ctx: PromptContext) -> str | None:
        """One fenced code block; in Python, one that does not copy the lines asked for (`changed_lines_grammar`)."""
        path = ctx.focus.path if ctx.focus is not None else ctx.parent.genome.entry
        language = code_language(path) or "python"
        if language == "python" and ctx.focus is not None:
            return changed_lines_grammar(ctx.focus.text)  # no markers either: the new lines sit inside the region
        return code_grammar(language, markers=language != "python")

    def format_hint(self, ctx: PromptContext) -> str:
        """The lines asked for, again: sent back with an error ("Reply again with the whole corrected answer"),
        qwen2.5-coder-1.5b answered a third of its line edits' repairs with the whole program, cut off at the
        reply's 384 tokens (bench/replay_repairs.py)."""
        if ctx.focus is None:
            return ": the new lines only, in one code block, with the same indentation"
        language = code_language(ctx.focus.path) or "python"
        return (
            f": new code for only these lines of {ctx.focus.path}, not the whole program:\n```{language}\n"
            f"{ctx.focus.text}\n```\nin one ```{language} block, with the same indentation"
        )


@dataclass(frozen=True)
class KnobOperator(LinesOperator):
    """The FM retunes one number (name "knob"): the `lines` operator, with the line to rewrite drawn from the
    module-level statements that assign a number literal to a name (`SAMPLES = 1`, `MAX_TOKENS = 512`), the
    knobs a program's author left to turn. A program with none gets `lines`' own windows.

    Why: a one-number change is an edit small models make reliably, and a knob is in few of the `lines`
    operator's windows (docs/results/humaneval.md, "Tuning the knobs")."""

    name: ClassVar[str] = "knob"

    def windows(self, parent: Genome) -> list[Focus]:
        """The number assignments of the editable code (see `number_assignments`), else `lines`' windows."""
        return windows(parent, knobs=True) or windows(parent)
