"""`cambrian doctor`, `config` and `benchmarks`: machine readiness, a run's settings, the benchmarks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import typer
from pydantic import BaseModel
from rich.table import Table

from cambrian.meta_agent.cli._app import app, console, http_url
from cambrian.meta_agent.config import RunConfig, load_config


@app.command()
def doctor(
    config: Path | None = typer.Option(None, "--config", "-c", help="check with this TOML config (FM, sandbox)"),
    model: str | None = typer.Option(None, help="the model to check (default: fm.model)"),
    api_base: str | None = typer.Option(None, help="an OpenAI-compatible server URL to probe", callback=http_url),
    api_key_env: str | None = typer.Option(None, help="NAME of the env var holding its API key"),
    quick: bool = typer.Option(False, "--quick", help="skip the sandbox's live self-test (about 10 s)"),
) -> None:
    """Is this machine ready to search? Engine, image and its self-test, local sandbox, model, FM, disk, user."""
    from cambrian.meta_agent.cli._doctor import Finding, diagnose

    cfg = load_config(config, overrides={"fm.model": model, "fm.api_base": api_base, "fm.api_key_env": api_key_env})
    marks = {"ok": "[green]ok[/green]  ", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}

    def say(finding: Finding) -> None:
        console.print(f"{marks[finding.verdict]}  [bold]{finding.name}[/bold]: {finding.detail}", highlight=False)
        if finding.fix and finding.verdict != "ok":
            console.print(f"        fix: {finding.fix}", highlight=False)

    findings = diagnose(cfg, self_test=not quick, say=say)
    failed = [f for f in findings if f.verdict == "fail"]
    console.print(f"{len(failed)} problem(s)" if failed else "ready")
    if failed:
        raise typer.Exit(1)


@app.command("config")
def config_(
    config: Path | None = typer.Option(None, "--config", "-c", help="a TOML config file to check and show"),
    set_: list[str] = typer.Option([], "--set", help="config keys to set, e.g. --set search.strategy=greedy"),
    show_defaults: bool = typer.Option(False, "--show-defaults", help="show the defaults (the default without -c)"),
) -> None:
    """Every config key with its value and meaning: the defaults, or a config file (+ --set) checked and resolved."""
    resolved = None if show_defaults else load_config(config, sets=set_) if (config or set_) else None
    print(defaults_toml(resolved), end="")


def defaults_toml(config: RunConfig | None = None) -> str:
    """`config` (default: the defaults) as commented TOML: every key, its value and what it means."""
    lines = ["# Cambrian's settings: any key goes in a --config TOML file or on the command line as --set KEY=VALUE"]

    def table(model: type[BaseModel], values: Mapping[str, Any], prefix: str) -> None:
        nested = []
        for name, field in model.model_fields.items():
            annotation = field.annotation
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                nested.append((name, annotation))
                continue
            value = values.get(name)
            shown = "# (unset)" if value is None else _toml_value(value)
            note = f"  # {field.description}" if field.description else ""
            lines.append(f"{name} = {shown}{note}" if value is not None else f"# {name} = (unset){note}")
        for name, sub in nested:
            lines.append(f"\n[{prefix}{name}]")
            table(sub, values.get(name) or {}, f"{prefix}{name}.")

    table(RunConfig, json.loads((config or RunConfig()).to_json()), "")
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return (
            "{"
            + ", ".join(
                f"{json.dumps(str(k)) if not str(k).isidentifier() else k} = {_toml_value(v)}" for k, v in value.items()
            )
            + "}"
        )
    return json.dumps(value)


@app.command()
def benchmarks() -> None:
    """The benchmarks this installation knows (built-in and from installed packages)."""
    from cambrian.evaluators.registry import describe_benchmarks

    table = Table("benchmark", "description")
    for bench_name, description in describe_benchmarks():
        table.add_row(bench_name, description)
    console.print(table)
