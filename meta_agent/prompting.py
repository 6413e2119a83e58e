"""Prompt templates: loading `meta_agent/prompts/*.txt` and rendering them.

Templates are plain text with `$name` placeholders, rendered with
`string.Template.substitute`, so a placeholder without a value is an error
rather than a silent gap in a prompt. Literal dollar signs are written `$$`.
The helpers below format what a prompt shows: files with their names, scores,
truncated text.
"""

from __future__ import annotations

import functools
import string
from importlib import resources
from typing import Mapping

from evaluators.base import Genome

_LANGUAGES = {".py": "python", ".js": "javascript", ".ts": "typescript", ".sh": "bash",
              ".json": "json", ".toml": "toml", ".yaml": "yaml", ".yml": "yaml", ".md": "markdown",
              ".c": "c", ".cpp": "cpp", ".rs": "rust", ".go": "go", ".txt": ""}


class PromptTemplateError(Exception):
    """A prompt template that is missing or needs a value nobody gave. `fix` names the fix."""

    def __init__(self, message: str, *, fix: str = "") -> None:
        super().__init__(message)
        self.fix = fix


def template_names() -> list[str]:
    """The names (file stems) of the packaged templates, sorted."""
    folder = resources.files("meta_agent").joinpath("prompts")
    return sorted(p.name[: -len(".txt")] for p in folder.iterdir() if p.name.endswith(".txt"))


@functools.lru_cache(maxsize=64)
def load_template(name: str) -> string.Template:
    """The template `meta_agent/prompts/<name>.txt` (read once per process); PromptTemplateError if there is none."""
    source = resources.files("meta_agent").joinpath("prompts", f"{name}.txt")
    if not source.is_file():
        raise PromptTemplateError(
            f"there is no prompt template named {name!r}; the templates are: "
            f"{', '.join(template_names())}",
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
