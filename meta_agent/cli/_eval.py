"""`cambrian eval DIR|RUN:AGENT`: score an agent on a split (holdout by default), apart from any search."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from cambrian.meta_agent.cli._app import RunsDir, Store, app, console, http_url
from cambrian.meta_agent.cli._browse import fmt_score, fmt_scores
from cambrian.meta_agent.cli._run import CliReporter
from cambrian.meta_agent.config import load_config


@app.command("eval")
def eval_(
    target: str = typer.Argument(..., metavar="RUN:AGENT|DIR", help="an agent of a run, or a folder from `export`"),
    split: str = typer.Option("holdout", help="holdout (stored apart from the search score) | search (printed only)"),
    sandbox: str | None = typer.Option(None, help="auto | docker | local (default: the run's)"),
    model: str | None = typer.Option(None, help="the FM the agent calls (default: the run's)"),
    agent_fm: bool | None = typer.Option(
        None, "--agent-fm/--no-agent-fm", help="serve the FM to the agent (default: the run's evaluation.agent_fm)"
    ),
    config: Path | None = typer.Option(
        None, "--config", "-c", help="for a folder: YOUR TOML settings (FM, endpoint, key, sandbox, limits)"
    ),
    api_base: str | None = typer.Option(
        None, help="for a folder: OpenAI-compatible server URL for --model", callback=http_url
    ),
    api_key_env: str | None = typer.Option(None, help="for a folder: NAME of the env var holding the API key"),
    allow_modified: bool = typer.Option(
        False, "--allow-modified", help="evaluate a folder whose files differ from its manifest's genome_hash"
    ),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """Evaluate an agent on a split; a holdout score is stored apart and never reaches selection or prompts.

    A folder from `export` (yours or someone else's) decides only its benchmark, options, seed and whether its
    agent calls an FM; the FM, its endpoint and key, the sandbox and the limits are yours (defaults, --config,
    the flags). RUN:AGENT of a run kept in a shared database needs --store URL (a folder ignores it)."""
    from cambrian.meta_agent.search.holdout import evaluate_target

    user_config = load_config(config, overrides={"fm.api_base": api_base, "fm.api_key_env": api_key_env})
    # Checked here as `run` checks it: a bad --sandbox is the command line's, not the run's stored config's.
    load_config(overrides={"evaluation.sandbox": sandbox})
    outcome = evaluate_target(
        target,
        split=split,
        runs_dir=runs_dir,
        reporter=CliReporter().reporter(),
        sandbox=sandbox,
        model=model,
        agent_fm=agent_fm,
        allow_modified=allow_modified,
        user_config=user_config,
        store=store,
    )
    result = outcome.result
    table = Table("task", "score", "passed", "seconds", "feedback")
    for task in result.task_results:
        feedback = task.feedback.strip().splitlines()[0][:100] if task.feedback.strip() else ""
        table.add_row(
            task.task_id, f"{task.score:.4f}", "yes" if task.passed else "no", f"{task.duration_s:.2f}", feedback
        )
    console.print(table)
    passed = sum(task.passed for task in result.task_results)
    console.print(
        f"[bold]{outcome.target}[/bold] on {outcome.benchmark} {outcome.split}: "
        f"[bold]{fmt_score(outcome.score)}[/bold] ({passed}/{len(result.task_results)} tasks passed"
        f"{', ' + str(outcome.fm_calls) + ' FM calls' if outcome.fm_calls else ''})"
    )
    if not result.valid and result.invalid_reason:
        console.print(f"[red]no task executed:[/red] {result.invalid_reason}")
    console.print(fmt_scores(outcome.search_score, outcome.holdout_score))
    if outcome.stored_at is not None:
        console.print(f"stored in {outcome.stored_at}")
    else:
        console.print("printed only: a search-split evaluation never replaces the selection score")
