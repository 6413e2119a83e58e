"""Prompt templates: loading `meta_agent/operators/prompts/*.txt` and rendering them.

Templates are plain text with `$name` placeholders, rendered with
`string.Template.substitute`, so a placeholder without a value is an error
rather than a silent gap in a prompt. Literal dollar signs are written `$$`.
The helpers below format what a prompt shows: files with their names, scores,
truncated text, and the sections every mutation prompt shares (`PromptContext`:
the parent, a second parent, inspirations, failed attempts).
"""

from __future__ import annotations

import functools
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources

from cambrian.errors import CambrianError
from cambrian.evaluators.base import Genome
from cambrian.meta_agent.edits import evolve_regions
from cambrian.meta_agent.operators._focus import Focus

_LANGUAGES = {
    ".py": "python",
    ".js": "javascript",
    ".ts": "typescript",
    ".sh": "bash",
    ".json": "json",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".md": "markdown",
    ".c": "c",
    ".cpp": "cpp",
    ".rs": "rust",
    ".go": "go",
    ".txt": "",
}


class PromptTemplateError(CambrianError):
    """A prompt template that is missing or needs a value nobody gave. `fix` names the fix."""


def template_names() -> list[str]:
    """The names (file stems) of the packaged templates, sorted."""
    folder = resources.files("cambrian.meta_agent.operators").joinpath("prompts")
    return sorted(p.name[: -len(".txt")] for p in folder.iterdir() if p.name.endswith(".txt"))


@functools.lru_cache(maxsize=64)
def load_template(name: str) -> string.Template:
    """The template `prompts/<name>.txt` of this package (read once per process); PromptTemplateError if none."""
    source = resources.files("cambrian.meta_agent.operators").joinpath("prompts").joinpath(f"{name}.txt")
    if not source.is_file():
        raise PromptTemplateError(
            f"there is no prompt template named {name!r}; the templates are: {', '.join(template_names())}",
            fix=f"add meta_agent/prompts/{name}.txt or use one of the names listed",
        )
    return string.Template(source.read_text(encoding="utf-8"))


def render(name: str, values: Mapping[str, object]) -> str:
    """Render template `name` with `values` (each turned into text with `str`).

    Every placeholder of the template must have a value; extra values are ignored.
    """
    template = load_template(name)
    try:
        return template.substitute({key: str(value) for key, value in values.items()})
    except KeyError as error:
        raise PromptTemplateError(
            f"prompt template {name!r} needs a value for ${error.args[0]}, which was not given",
            fix=f"pass {error.args[0]}=... when rendering {name!r}",
        ) from None
    except ValueError as error:
        raise PromptTemplateError(
            f"prompt template {name!r} has a malformed placeholder: {error}",
            fix="write placeholders as $name or ${name}, and a literal dollar sign as $$",
        ) from None


def truncate(text: str, *, max_chars: int) -> str:
    """`text` cut at a line boundary to at most about `max_chars` characters, saying how much was cut."""
    if len(text) <= max_chars:
        return text
    cut = text.rfind("\n", 0, max_chars)
    head = text[: cut if cut > 0 else max_chars]
    dropped = text[len(head) :].count("\n") + 1
    return f"{head.rstrip()}\n... ({dropped} more lines not shown)\n"


def code_language(path: str) -> str:
    """The fence info string for a file, from its extension ("" when unknown)."""
    dot = path.rfind(".")
    return _LANGUAGES.get(path[dot:].lower(), "") if dot >= 0 else ""


def format_files(genome: Genome, *, max_chars: int | None = None) -> str:
    """Every file of a genome under a `### path` heading in a fenced block; entry file first.

    max_chars: per-file limit (characters) for the shown text; None shows it all.
    """
    order = [genome.entry] + sorted(path for path in genome.files if path != genome.entry)
    parts = []
    for path in order:
        text = genome.files[path]
        if max_chars is not None:
            text = truncate(text, max_chars=max_chars)
        fence = "````" if "```" in text else "```"
        parts.append(f"### {path}\n{fence}{code_language(path)}\n{text.rstrip()}\n{fence}")
    return "\n\n".join(parts)


def format_score(score: float | None) -> str:
    """A score as a prompt shows it: 6 significant digits, or a note when there is none."""
    return "not evaluated yet" if score is None else f"{score:.6g}"


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
    second_parent: the other parent of a crossover (None for one-parent operators).
    plan: the improvement plan the first call of `diagnose` wrote (None before that call).
    idea: one direction to try, drawn from the benchmark's `ideas` for this proposal (None: no direction).
    focus: the lines the `lines` and `knob` operators ask the FM to rewrite (None for other operators).
    notes: what the FM wrote of the run's recent edits and their effect (`search.reflect_every`), or None.
    repeated: the changes ("-"/"+" lines) this proposal's earlier attempts made that rebuilt a program the run
    already has: the next attempt is shown them, so the same prompt does not bring the same reply again.
    """

    contract: str
    benchmark: str
    parent: ParentInfo
    failed_attempts: Sequence[str] = ()
    inspirations: Sequence[ParentInfo] = ()
    second_parent: ParentInfo | None = None
    plan: str | None = None
    idea: str | None = None
    focus: Focus | None = None
    notes: str | None = None
    repeated: Sequence[str] = ()


@dataclass(frozen=True)
class PromptLimits:
    """How much context a prompt shows; small local models need it short.

    max_failed_attempts: the most recent N failed attempts shown (>= 0).
    max_attempt_chars: characters shown of each failed attempt's reason.
    max_feedback_chars: characters shown of the parent's feedback.
    max_inspirations: inspirations shown (>= 0).
    max_inspiration_chars: characters shown of each inspiration file.
    max_plan_chars: characters kept of a `diagnose` plan.
    max_reply_tokens: the most tokens the FM may write back (`fm.max_tokens`): an operator whose reply is a
    whole region (rewrite, crossover) cannot edit a program whose region does not fit in it.
    max_lines_program_chars: a program longer than this (characters, all files) is shown to `lines` and
    `knob` as an outline: the function holding the lines in full, the others as signatures (`_outline`).
    """

    max_failed_attempts: int = 3
    max_attempt_chars: int = 600
    max_feedback_chars: int = 2000
    max_inspirations: int = 2
    max_inspiration_chars: int = 2500
    max_plan_chars: int = 1500
    max_reply_tokens: int = 1024
    max_lines_program_chars: int = 3000


def has_markers(genome: Genome) -> bool:
    """Whether any file of the genome has EVOLVE-BLOCK markers."""
    return any(evolve_regions(text, path=path) for path, text in genome.files.items())


def recent_attempts(attempts: Sequence[str], limits: PromptLimits) -> list[str]:
    """The most recent failed attempts a prompt shows, each stripped and truncated, oldest first."""
    recent = list(attempts)[-limits.max_failed_attempts :] if limits.max_failed_attempts else []
    return [truncate(reason.strip(), max_chars=limits.max_attempt_chars).rstrip() for reason in recent]


def repeated_section(changes: Sequence[str], limits: PromptLimits) -> str:
    """The numbered "already tried in this proposal" section, or "" when no attempt rebuilt a known program."""
    lines = [
        f"{number}. " + truncate(change.strip(), max_chars=limits.max_attempt_chars).rstrip().replace("\n", "\n   ")
        for number, change in enumerate(changes, start=1)
    ]
    return render("repeated", {"changes": "\n".join(lines)}) if lines else ""


def failed_attempts_section(attempts: Sequence[str], limits: PromptLimits) -> str:
    """The numbered "recent changes that failed" section, or "" when there are none."""
    lines = [
        f"{number}. " + shown.replace("\n", "\n   ")
        for number, shown in enumerate(recent_attempts(attempts, limits), start=1)
    ]
    return render("failed_attempts", {"attempts": "\n".join(lines)}) if lines else ""


def shown_feedback(parent: ParentInfo, limits: PromptLimits) -> str:
    """The parent's feedback as a prompt shows it: truncated, or "(none)"."""
    feedback = (parent.feedback or "").strip()
    return truncate(feedback, max_chars=limits.max_feedback_chars) if feedback else "(none)"


def context_sections(ctx: PromptContext, limits: PromptLimits) -> str:
    """Inspirations, then the parent, then its failed attempts: the parent sits next to the task."""
    sections = [
        render(
            "inspiration",
            {
                "score": format_score(other.score),
                "files": format_files(other.genome, max_chars=limits.max_inspiration_chars),
            },
        )
        for other in list(ctx.inspirations)[: limits.max_inspirations]
    ]
    parent = ctx.parent
    sections.append(
        render(
            "parent",
            {
                "score": format_score(parent.score),
                "files": format_files(parent.genome),
                "feedback": shown_feedback(parent, limits),
            },
        )
    )
    sections.append(failed_attempts_section(ctx.failed_attempts, limits))
    return "\n\n".join(section.rstrip() for section in sections if section)


def task_values(ctx: PromptContext, limits: PromptLimits) -> dict[str, str]:
    """The values the task templates (rewrite, diff, crossover, diagnose) share."""
    genome = ctx.parent.genome
    one_region = region_reply(genome)
    target = (
        f"the complete new code for the EVOLVE-BLOCK of {genome.entry} (everything between its "
        "EVOLVE-BLOCK-START and EVOLVE-BLOCK-END lines, imports included)"
        if one_region
        else f"the complete new {genome.entry}"
    )
    what = f"code of the EVOLVE-BLOCK of {genome.entry}" if one_region else genome.entry
    evolve_note = render("evolve_note", {}) if has_markers(genome) else ""
    return {
        "contract": ctx.contract.strip(),
        "context": context_sections(ctx, limits),
        "entry": genome.entry,
        "language": code_language(genome.entry),
        "target": target,
        # A comment, so a small model that copies the format line verbatim still writes valid code.
        "placeholder": f"# the complete, improved {what}" if genome.entry.endswith(".py") else f"the improved {what}",
        "evolve_note": evolve_note,
        "idea_note": render("idea", {"idea": ctx.idea.strip()}) if ctx.idea else "",
        "notes_note": render("notes", {"notes": ctx.notes.strip()}) if ctx.notes else "",
        "repeated_note": repeated_section(ctx.repeated, limits),
        # Whole-file replies: a one-region file is answered with its region only, so no note is needed.
        "whole_note": "" if one_region else evolve_note,
    }


def region_reply(genome: Genome) -> bool:
    """Whether a whole-file operator asks only for the code of the entry file's single EVOLVE-BLOCK."""
    return len(evolve_regions(genome.files[genome.entry], path=genome.entry)) == 1


def block_format(genome: Genome) -> str:
    """The SEARCH/REPLACE format instructions with a worked example (names files for multi-file genomes)."""
    other_files_note = render("diff_other_files", {"entry": genome.entry}) if len(genome.files) > 1 else ""
    return render("diff_format", {"other_files_note": other_files_note})


def system_message(ctx: PromptContext) -> dict[str, str]:
    """The system message every operator's prompt begins with, the benchmark named: one text for all, so a
    local server's prompt cache holds it (and the contract after it) for every prompt of a run."""
    return {"role": "system", "content": render("system", {"benchmark": ctx.benchmark}).strip()}
