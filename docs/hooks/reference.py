"""MkDocs hook: the reference pages written at build time from the code itself.

A page holding one of these comments gets it replaced by generated markdown:

- `<!-- generated: cli -->`: every command of the Typer app (`cambrian.meta_agent.cli.app`), its help, usage,
  arguments and options with their defaults;
- `<!-- generated: config -->`: every key of `cambrian.meta_agent.config.RunConfig`, its type, default and
  meaning (the field's description, else `MEANINGS` below; a key with neither fails the build);
- `<!-- generated: benchmarks -->`: every benchmark this installation knows, with its description.

Registered under `hooks:` in mkdocs.yml.
"""

from __future__ import annotations

import json
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mkdocs.exceptions import PluginError

#: Meanings of the config keys whose pydantic field has no description (the rest come from the field).
MEANINGS = {
    "name": "the run's name: letters, digits, '.', '_' and '-'; unset: BENCHMARK-TIMESTAMP",
    "benchmark": "what to search (`cambrian benchmarks` lists them)",
    "seed": "drives parent selection, the operator draw and the FM's sampling seed",
    "runs_dir": "the folder holding one sub-folder per run (`runs/<name>/archive.db`)",
    "benchmark_options": "the benchmark's own options, passed to its factory as keywords; unknown keys are refused",
    "fm.api_base": "an OpenAI-compatible server's URL for `fm.model` (e.g. http://host:8000/v1)",
    "fm.temperature": "sampling temperature of proposals",
    "fm.max_tokens": "the completion cap of one FM reply (`diff` replies are capped at 512)",
    "fm.timeout_s": "seconds one FM call may take",
    "fm.retries": "retries of a failed FM call",
    "search.strategy": "the parent-selection strategy: uniform, greedy, tournament, power_law, dgm, hgm, "
    "map_elites, novelty, or one an installed package registers",
    "search.failed_attempts_shown": "recent invalid children of the parent shown to the FM as feedback",
    "search.novelty": "embeddings, k-NN novelty and the near-duplicate gate",
    "search.bandit": "the (model, operator) bandit",
    "evaluation.sandbox": "where agents' code runs: auto (Docker when an engine answers and the image is "
    "current, else local), docker or local",
    "evaluation.concurrency": "evaluations at once (Docker: pre-started containers; with Ray: slots per node)",
    "evaluation.memory_mb": "memory per task run, MiB; default: the benchmark's",
    "evaluation.max_output_bytes": "output kept per run, bytes; default: the sandbox's cap",
    "budget": "when a search stops proposing",
    "fm": "the foundation model that proposes edits",
    "search": "how parents and operators are chosen",
    "evaluation": "how and where agents are evaluated",
}

#: Meanings of the CLI's arguments that carry no help text, by their metavar.
ARGUMENTS = {
    "RUN": "a run's name (in --runs-dir, or in --store)",
    "AGENT": "an agent's id in that run (`cambrian tree RUN` shows them)",
    "A": "the first agent's id",
    "B": "the second agent's id",
}

_TITLES = {"budget": "Budget", "fm": "The FM", "search": "Search", "evaluation": "Evaluation"}


def on_page_markdown(markdown: str, **_: Any) -> str:
    for marker, build in (("cli", cli_reference), ("config", config_reference), ("benchmarks", benchmark_list)):
        tag = f"<!-- generated: {marker} -->"
        if tag in markdown:
            markdown = markdown.replace(tag, build())
    return markdown


# ----- the CLI ------------------------------------------------------------------------------------


def _commands(command: Any, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], Any]]:
    yield path, command
    if hasattr(command, "list_commands"):
        for name in command.list_commands(None):
            yield from _commands(command.get_command(None, name), (*path, name))


def _escape(text: str) -> str:
    """`<` and `>` outside code spans as entities, so that `RUNS_DIR/<run>` is not read as HTML."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):  # the even parts are outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def _cell(text: object) -> str:
    """One table cell: one line, pipes escaped."""
    return _escape(" ".join(str(text).split()).replace("|", "\\|"))


def _default(param: Any) -> str:
    default = param.default
    if getattr(param, "is_flag", False) and param.secondary_opts:
        return "`" + (param.opts[0] if default else param.secondary_opts[0]) + "`" if default is not None else ""
    if default is None or default == [] or getattr(param, "is_flag", False) and default is False:
        return ""
    return f"`{default}`"


def _metavar(param: Any) -> str:
    """What an option's value is, from the annotation Typer keeps (VALUE where it keeps none)."""
    annotation = getattr(getattr(param, "type_descriptor", None), "annotation", None)
    if typing.get_origin(annotation) is list:
        annotation = typing.get_args(annotation)[0]
    return {int: "N", float: "X", Path: "PATH", str: "TEXT"}.get(annotation, "VALUE")


def cli_reference() -> str:
    import typer

    from cambrian.meta_agent.cli import app

    lines: list[str] = []
    for path, command in _commands(typer.main.get_command(app), ("cambrian",)):
        if getattr(command, "hidden", False):
            continue
        arguments = [p for p in command.params if not p.opts[0].startswith("-")]
        options = [p for p in command.params if p.opts[0].startswith("-") and not getattr(p, "hidden", False)]
        words = [" ".join(path), "[OPTIONS]" if options else ""]
        for param in arguments:
            name = param.metavar or param.name.upper()
            words.append(name if param.required else f"[{name}]")
        if hasattr(command, "list_commands"):
            words.append("COMMAND")
        if len(path) > 1:
            lines += [f"{'#' * len(path)} `{' '.join(path)}`", ""]
        usage = " ".join(word for word in words if word)
        lines += [_escape((command.help or "").strip()), "", "```text", usage, "```", ""]
        if hasattr(command, "list_commands"):
            subs = command.list_commands(None)
            lines += [f"Commands: {', '.join(f'`{name}`' for name in subs)}.", ""]
        if arguments or options:
            lines += ["| argument or option | default | meaning |", "|---|---|---|"]
            for param in arguments:
                name = param.metavar or param.name.upper()
                meaning = param.help or ARGUMENTS.get(name, "")
                lines.append(f"| `{name}` | {_default(param)} | {_cell(meaning)} |")
            for param in options:
                names = ", ".join(f"`{opt}`" for opt in [*param.opts, *param.secondary_opts])
                value = "" if getattr(param, "is_flag", False) else f" {_metavar(param)}"
                repeat = " (repeatable)" if param.multiple else ""
                lines.append(f"| {names}{value} | {_default(param)} | {_cell(param.help or '')}{repeat} |")
            lines.append("")
    return "\n".join(lines)


# ----- the configuration --------------------------------------------------------------------------


def _type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " \\| ".join(json.dumps(a) for a in args)
    if origin in (typing.Union, types.UnionType):
        unset = " \\| unset" if type(None) in args else ""
        return " \\| ".join(_type_name(a) for a in args if a is not type(None)) + unset
    if origin is not None:
        inner = ", ".join(_type_name(a) for a in args)
        return f"{origin.__name__}[{inner}]"
    if annotation is Path:
        return "path"
    return getattr(annotation, "__name__", str(annotation))


def _bounds(field: Any) -> str:
    words = []
    for item in field.metadata:
        for attr, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                words.append(f"{sign} {value:g}" if isinstance(value, float) else f"{sign} {value}")
    return ", ".join(words)


def _toml(value: Any) -> str:
    """A JSON-like value as TOML writes it: `true`, `"auto"`, `[]`, `{lines = 0.4}`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        pairs = (f"{k if str(k).isidentifier() else json.dumps(str(k))} = {_toml(v)}" for k, v in value.items())
        return "{" + ", ".join(pairs) + "}"
    return json.dumps(value)


def config_reference() -> str:
    from pydantic import BaseModel

    from cambrian.meta_agent.config import RunConfig, config_keys

    resolved = json.loads(RunConfig().to_json())
    documented: set[str] = set()
    lines: list[str] = []

    def table(model: type[BaseModel], values: dict[str, Any], prefix: str) -> None:
        rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
        nested = []
        for name, field in model.model_fields.items():
            key = f"{prefix}{name}"
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                nested.append((key, annotation, field.description, values.get(name) or {}))
                continue
            meaning = field.description or MEANINGS.get(key)
            if not meaning:
                raise PluginError(f"config key {key} has no description: add one to its Field or to MEANINGS")
            declared = field.get_default(call_default_factory=True)
            default = "unset" if declared is None else f"`{_toml(json.loads(json.dumps(declared, default=str)))}`"
            if values.get(name) != json.loads(json.dumps(declared, default=str)):
                default += f" (resolved for the default model: `{_toml(values.get(name))}`)"
            kind = _type_name(annotation)
            bounds = _bounds(field)
            rows.append(f"| `{key}` | {kind}{', ' + bounds if bounds else ''} | {default} | {_cell(meaning)} |")
            documented.add(key)
        lines.extend([*rows, ""])
        for key, sub, description, sub_values in nested:
            title = _TITLES.get(key, f"`[{key}]`")
            heading = "##" if "." not in key else "###"
            about = MEANINGS.get(key) or description or (sub.__doc__ or "").strip().split("\n")[0]
            lines.extend([f"{heading} {title}", "", f"Table `[{key}]`: {about}.", ""])
            documented.add(key)
            table(sub, sub_values, f"{key}.")

    lines.extend(["## Top level", ""])
    table(RunConfig, resolved, "")
    missing = set(config_keys()) - documented
    if missing:
        raise PluginError(f"config keys missing from the reference: {', '.join(sorted(missing))}")
    return "\n".join(lines)


# ----- benchmarks ---------------------------------------------------------------------------------


def benchmark_list() -> str:
    from cambrian.evaluators.registry import describe_benchmarks

    rows = ["| benchmark | what it is |", "|---|---|"]
    rows += [f"| `{name}` | {_cell(description)} |" for name, description in describe_benchmarks()]
    return "\n".join(rows) + "\n"
