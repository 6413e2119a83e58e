"""The FM operators: `rewrite`, `diff`, `crossover` (one FM call each) and `diagnose` (two); `lines` and
`knob`, which ask for a few named lines, are in `_lines`.

They share `FMOperator`: messages -> one FM call -> the reply applied to the parent -> the static
check. A reply that cannot become a checked child is drawn again from the same messages with another
seed, up to `env.redraws` times (the ledger's purpose "redraw": the server still holds the prompt, so
it costs the reply's decoding), then goes back to the FM with its error, in the same conversation, up
to `env.repair_rounds` times (the ledger's purpose "repair"); a child that failed when run can be
taken back the same way (`fix`). Each says what its reply must look like as a grammar (`grammar`, for
constrained decoding) and in words (`format_hint`, for the repair message).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import EditError, evolve_regions
from cambrian.meta_agent.operators._base import Operator, OperatorEnv, Proposal
from cambrian.meta_agent.operators._focus import has_editable_code
from cambrian.meta_agent.operators._grammars import code_grammar, search_replace_grammar
from cambrian.meta_agent.operators._prompting import (
    PromptContext,
    PromptLimits,
    block_format,
    code_language,
    failed_attempts_section,
    format_files,
    format_score,
    region_reply,
    render,
    shown_feedback,
    system_message,
    task_values,
    truncate,
)
from cambrian.meta_agent.operators._replies import (
    _apply_blocks_or_file,
    _apply_rewrite,
    _apply_search_replace,
    _same_program,
)

# How the repair note of a child made by `FMOperator.fix` (a failed run sent back to the FM) begins: such a
# child shares its iteration with the child that failed.
RUN_REPAIR_NOTE = "FM repair after the run failed"


def run_repair_note(failure: str) -> str:
    """The repair note of the child a failed run's repair makes, kept whether that child counts or is refused:
    RUN_REPAIR_NOTE and the failure's first line."""
    return f"{RUN_REPAIR_NOTE}: {_first_line(failure)}"


class FMOperator(Operator):
    """An operator the FM writes: `messages(ctx)` -> one call -> `apply(parent, reply)` -> the static check."""

    uses_fm: ClassVar[bool] = True
    #: The most tokens a reply may take, where replies are short by nature (None: `fm.max_tokens`). A small
    #: model that loses the format writes on to the limit, so a tight cap is what that costs.
    max_reply_tokens: ClassVar[int | None] = None
    #: Whether a proposal is given one of the benchmark's ideas (`search.ideas`) to try.
    takes_idea: ClassVar[bool] = True

    @abstractmethod
    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """OpenAI chat messages (role, content) asking the FM for a variant of `ctx.parent`."""

    @abstractmethod
    def apply(self, parent: Genome, reply: str) -> Genome:
        """The child genome the reply describes; raises EditError with a public reason."""

    @abstractmethod
    def grammar(self, ctx: PromptContext) -> str | None:
        """GBNF the reply must follow under constrained decoding (`_grammars.py`), or None."""

    @abstractmethod
    def format_hint(self, ctx: PromptContext) -> str:
        """A few words on the reply format, for the repair message after a reply that could not be used."""

    def prepare(self, ctx: PromptContext, env: OperatorEnv) -> PromptContext:
        """The context completed with what this operator draws for itself before it asks (see `lines`)."""
        return ctx

    def child(self, ctx: PromptContext, reply: str) -> Genome:
        """The child `reply` makes of `ctx.parent` (operators that need more of the context than the parent
        override this: crossover, lines)."""
        return self.apply(ctx.parent.genome, reply)

    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        """One direction drawn from the benchmark's ideas (where the operator `takes_idea`; not for crossover: its
        direction is the other parent), then the edit."""
        if context.idea is None and self.takes_idea and not self.needs_second_parent:
            context = dataclasses.replace(context, idea=env.idea())
        return await self.edit(self.prepare(context, env), env)

    async def edit(self, ctx: PromptContext, env: OperatorEnv) -> Proposal:
        """Ask for the edit; a reply that cannot become a checked child is drawn again from the same messages
        with another seed, up to `env.redraws` times, then goes back with its error, up to `env.repair_rounds`
        times, in the same conversation."""
        messages = list(self.messages(ctx))
        grammar = self.grammar(ctx)
        errors: list[str] = []
        draw = round_ = 0
        while True:
            purpose = "repair" if round_ else "redraw" if draw else "mutate"
            reply = await env.complete(
                messages, purpose=purpose, grammar=grammar, max_tokens=self.max_reply_tokens, draw=draw
            )
            try:
                proposal = await env.derive(functools.partial(self.child, ctx, reply), ctx.parent.genome)
            except EditError as exc:
                errors.append(str(exc))
                if not round_ and draw < env.redraws:
                    draw += 1
                    continue
                if round_ == env.repair_rounds:
                    if errors[1:]:
                        raise EditError(f"{exc} (still failing after {_tries(draw, round_)})", fix=exc.fix) from exc
                    raise
                round_ += 1
                messages += [
                    {"role": "assistant", "content": reply},
                    {
                        "role": "user",
                        "content": render(
                            "repair",
                            {
                                "error": str(exc),
                                "fix": exc.fix.rstrip("."),
                                "format_hint": self.format_hint(ctx),
                            },
                        ).strip(),
                    },
                ]
                continue
            fixed = f"FM repair round {round_}" if round_ else f"FM redraw {draw}"
            repaired = [f"{fixed} fixed: {_first_line(errors[-1])}"] if errors else []
            return dataclasses.replace(
                proposal,
                repair_note=_joined(*repaired, proposal.repair_note),
                idea=ctx.idea,
                conversation=(*messages, {"role": "assistant", "content": reply}),
                repairs_left=env.repair_rounds - round_,
            )

    async def fix(self, ctx: PromptContext, failed: Proposal, failure: str, env: OperatorEnv) -> Proposal:
        """The child again, after it failed when run: `failure` (its public feedback: the crash, the timeout,
        the invalid result) goes back to the FM in the conversation that wrote it (purpose "repair").

        `failed` must carry a conversation and repairs_left > 0. The answer is checked like any reply; one
        that cannot become a child raises EditError.
        """
        if not failed.conversation or failed.repairs_left <= 0:
            raise ValueError("fix needs a proposal with its FM conversation and repair rounds left")
        ctx = self.prepare(dataclasses.replace(ctx, idea=failed.idea), env)
        message = render("repair_run", {"failure": failure.strip(), "format_hint": self.format_hint(ctx)})
        messages = [*failed.conversation, {"role": "user", "content": message.strip()}]
        reply = await env.complete(
            messages, purpose="repair", grammar=self.grammar(ctx), max_tokens=self.max_reply_tokens
        )
        try:
            proposal = await env.derive(functools.partial(self.child, ctx, reply), ctx.parent.genome)
        except EditError as exc:
            raise EditError(f"{exc} (the repair after a failed run)", fix=exc.fix) from exc
        return dataclasses.replace(
            proposal,
            repair_note=_joined(run_repair_note(failure), proposal.repair_note),
            idea=failed.idea,
            conversation=(*messages, {"role": "assistant", "content": reply}),
            repairs_left=failed.repairs_left - 1,
        )


def _tries(redraws: int, repair_rounds: int) -> str:
    """'1 redraw', '2 repair round(s)', '1 redraw and 1 repair round(s)'."""
    tries = [f"{redraws} redraw{'s' if redraws > 1 else ''}"] if redraws else []
    tries += [f"{repair_rounds} repair round(s)"] if repair_rounds else []
    return " and ".join(tries)


def _first_line(text: str, limit: int = 160) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _joined(*notes: str | None) -> str | None:
    return "; ".join(note for note in notes if note) or None


@dataclass(frozen=True)
class RewriteOperator(FMOperator):
    """The FM returns the whole entry file in a fenced block (name "rewrite")."""

    name: ClassVar[str] = "rewrite"
    limits: PromptLimits = field(default_factory=PromptLimits)

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """System rules, then contract, code, feedback and failed attempts, the format last."""
        user = render("rewrite", task_values(ctx, self.limits))
        return [system_message(ctx), {"role": "user", "content": user.strip()}]

    def apply(self, parent: Genome, reply: str) -> Genome:
        """The parent with its entry file replaced by the reply's code.

        A reply without the EVOLVE-BLOCK markers of a file that has one region is
        spliced into that region (see `edits.splice_into_region`). Raises EditError
        when the reply has no code block, changes text outside the markers, does
        not parse (Python entry files) or changes nothing.
        """
        return _apply_rewrite(parent, reply)

    def grammar(self, ctx: PromptContext) -> str | None:
        """One fenced code block (without EVOLVE-BLOCK markers when it is the code of a Python region)."""
        return _whole_file_grammar(ctx.parent.genome)

    def format_hint(self, ctx: PromptContext) -> str:
        return _code_hint(ctx)

    def cannot_edit(self, parent: Genome) -> str | None:
        return _region_too_long(self, parent, self.limits)


#: Characters per token of code, a low estimate (Qwen2.5-Coder's tokenizer: 3.3-3.8 on the suite's seeds), so
#: a region is judged too long to write back only when it surely is.
_CHARS_PER_TOKEN = 3.0


def _region_too_long(operator: FMOperator, parent: Genome, limits: PromptLimits) -> str | None:
    """Why a whole-region reply cannot fit in `limits.max_reply_tokens`, or None when it can."""
    text = parent.files[parent.entry]
    regions = evolve_regions(text, path=parent.entry) if "EVOLVE-BLOCK-" in text else []
    lines = text.splitlines()
    region = "\n".join(lines[regions[0][0] : regions[0][1]]) if len(regions) == 1 else text
    tokens = int(len(region) / _CHARS_PER_TOKEN)
    if tokens <= limits.max_reply_tokens:
        return None
    return (
        f"{operator.name} needs the code it rewrites to fit in a reply of fm.max_tokens = {limits.max_reply_tokens} "
        f"tokens, and {parent.entry}'s editable code is about {tokens}"
    )


def _whole_file_grammar(genome: Genome) -> str:
    """The code grammar of a whole-file reply: one that is a Python region's code cannot write a marker, so
    it is always spliced between the parent's markers and cannot change a line outside them."""
    language = code_language(genome.entry) or "python"
    return code_grammar(language, markers=not (language == "python" and region_reply(genome)))


def _code_hint(ctx: PromptContext) -> str:
    language = code_language(ctx.parent.genome.entry) or "python"
    what = "the EVOLVE-BLOCK's code" if region_reply(ctx.parent.genome) else f"the whole {ctx.parent.genome.entry}"
    return f": {what} in one ```{language} block"


_BLOCKS_HINT = ": SEARCH/REPLACE blocks, SEARCH copying existing lines exactly"


@dataclass(frozen=True)
class DiffOperator(FMOperator):
    """The FM returns SEARCH/REPLACE blocks (name "diff")."""

    name: ClassVar[str] = "diff"
    #: One block whose SEARCH copies at most 4 lines: local models' valid replies took 17-454 tokens
    #: (bench/results/fm_efficacy-after*-circle.json); past that a 1.5B model on 2 cores spends minutes.
    max_reply_tokens: ClassVar[int | None] = 512
    limits: PromptLimits = field(default_factory=PromptLimits)

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """System rules, then contract, code, feedback and failed attempts, a worked block example last."""
        values = {**task_values(ctx, self.limits), "block_format": block_format(ctx.parent.genome)}
        return [system_message(ctx), {"role": "user", "content": render("diff", values).strip()}]

    def apply(self, parent: Genome, reply: str) -> Genome:
        """The parent with the reply's blocks applied (see `edits.apply_blocks`).

        Raises EditError for malformed or unmatched blocks, edits outside EVOLVE-BLOCK
        markers, Python files that no longer parse, and edits that change nothing.
        """
        return _apply_search_replace(parent, reply)

    def grammar(self, ctx: PromptContext) -> str | None:
        """SEARCH/REPLACE blocks whose SEARCH copies a run of the parent's editable lines."""
        return search_replace_grammar(ctx.parent.genome)

    def cannot_edit(self, parent: Genome) -> str | None:
        if has_editable_code(parent):
            return None
        return f"{self.name} needs a line of editable code for SEARCH to copy, and {parent.entry} has none"

    def format_hint(self, ctx: PromptContext) -> str:
        return _BLOCKS_HINT


@dataclass(frozen=True)
class CrossoverOperator(FMOperator):
    """Two parents, one child: the FM combines their strengths into one whole file (name "crossover").

    The child is built relative to the FIRST parent (`ctx.parent`), like `rewrite`.
    """

    name: ClassVar[str] = "crossover"
    needs_second_parent: ClassVar[bool] = True
    limits: PromptLimits = field(default_factory=PromptLimits)

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """Contract, program A (the parent) and program B (scores, code, feedback), failed attempts, format.

        Raises ValueError when `ctx.second_parent` is None (a caller's bug: the loop
        must pick a second parent for an operator with `needs_second_parent`).
        """
        if ctx.second_parent is None:
            raise ValueError("crossover needs ctx.second_parent; pick a second parent before building the prompt")
        sections = [
            render(
                "crossover_parent",
                {
                    "label": label,
                    "score": format_score(info.score),
                    "files": format_files(info.genome),
                    "feedback": shown_feedback(info, self.limits),
                },
            )
            for label, info in (("A", ctx.parent), ("B", ctx.second_parent))
        ]
        sections.append(failed_attempts_section(ctx.failed_attempts, self.limits))
        context = "\n\n".join(section.rstrip() for section in sections if section)
        user = render("crossover", {**task_values(ctx, self.limits), "context": context})
        return [system_message(ctx), {"role": "user", "content": user.strip()}]

    def child(self, ctx: PromptContext, reply: str) -> Genome:
        second = ctx.second_parent.genome if ctx.second_parent is not None else None
        return self.apply(ctx.parent.genome, reply, second_parent=second)

    def apply(self, parent: Genome, reply: str, *, second_parent: Genome | None = None) -> Genome:
        """The first parent with its entry file replaced by the reply's code (as `rewrite.apply`).

        second_parent: the other parent's genome; when given, a child that equals it
        (ignoring trailing whitespace) is refused too. Raises EditError as `rewrite` does.
        """
        child = _apply_rewrite(parent, reply)
        if second_parent is not None and _same_program(child.files, second_parent):
            raise EditError(
                "the crossover child is a copy of program B",
                fix="write a program that combines ideas of both programs instead of copying one",
            )
        return child

    def grammar(self, ctx: PromptContext) -> str | None:
        """One fenced code block (without EVOLVE-BLOCK markers when it is the code of a Python region)."""
        return _whole_file_grammar(ctx.parent.genome)

    def format_hint(self, ctx: PromptContext) -> str:
        return _code_hint(ctx)

    def cannot_edit(self, parent: Genome) -> str | None:
        return _region_too_long(self, parent, self.limits)


# ---------------------------------------------------------------- two FM calls


@dataclass(frozen=True)
class DiagnoseOperator(FMOperator):
    """First a plan from the parent's failures, then the edit implementing it (name "diagnose")."""

    name: ClassVar[str] = "diagnose"
    limits: PromptLimits = field(default_factory=PromptLimits)

    async def propose(self, context: PromptContext, env: OperatorEnv) -> Proposal:
        """A plan first (ledger purpose "diagnose"), then the edit implementing it."""
        if context.idea is None:
            context = dataclasses.replace(context, idea=env.idea())
        planned = await env.complete(self.plan_messages(context), purpose="diagnose")
        return await self.edit(dataclasses.replace(context, plan=self.parse_plan(planned)), env)

    def plan_messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """Contract, code, feedback and failed attempts, then the request for a numbered plan (no code)."""
        user = render("diagnose_plan", task_values(ctx, self.limits))
        return [system_message(ctx), {"role": "user", "content": user.strip()}]

    def parse_plan(self, reply: str) -> str:
        """The plan in a reply: code blocks dropped (untagged or text fences kept, fence lines removed),
        cut to `limits.max_plan_chars` characters. EditError when no text is left."""
        kept: list[str] = []
        fence: str | None = None
        drop = False
        for line in reply.splitlines():
            stripped = line.strip()
            if fence is None and (opening := re.match(r"(`{3,}|~{3,})\s*(\S*)", stripped)):
                fence, drop = opening.group(1), opening.group(2).lower() not in ("", "text", "txt", "markdown", "md")
                continue
            if fence is not None and stripped.startswith(fence) and not stripped.strip(fence[0]):
                fence, drop = None, False
                continue
            if not drop:
                kept.append(line.rstrip())
        plan = "\n".join(kept).strip()
        if not plan:
            raise EditError(
                "the diagnosis reply had no plan: it was empty or only code",
                fix="reply with a short numbered plan in plain words, without code",
            )
        return truncate(plan, max_chars=self.limits.max_plan_chars).strip()

    def messages(self, ctx: PromptContext) -> list[dict[str, str]]:
        """The plan's conversation (`plan_messages`, the plan as its reply), then the request to change the
        program as it says, in the SEARCH/REPLACE format: a local server holds the conversation in its prompt
        cache, so the edit costs the new request, not the program and its feedback again.

        Raises ValueError when `ctx.plan` is None (a caller's bug: call `plan_messages` first).
        """
        if ctx.plan is None:
            raise ValueError("diagnose needs ctx.plan; ask plan_messages(ctx) and parse_plan(reply) first")
        values = {**task_values(ctx, self.limits), "block_format": block_format(ctx.parent.genome)}
        return [
            *self.plan_messages(ctx),
            {"role": "assistant", "content": ctx.plan.strip()},
            {"role": "user", "content": render("diagnose", values).strip()},
        ]

    def apply(self, parent: Genome, reply: str) -> Genome:
        """SEARCH/REPLACE blocks when the reply has block markers, else a whole file applied as `rewrite`.

        Raises EditError as `diff` or `rewrite` does.
        """
        return _apply_blocks_or_file(parent, reply)

    def grammar(self, ctx: PromptContext) -> str | None:
        """The edit (not the plan): SEARCH/REPLACE blocks, as `diff`."""
        return search_replace_grammar(ctx.parent.genome)

    def format_hint(self, ctx: PromptContext) -> str:
        return _BLOCKS_HINT
