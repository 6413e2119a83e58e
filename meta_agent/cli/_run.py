"""`cambrian run`, `resume` and `db upgrade`: start a search, continue one, bring an older archive up to date."""

from __future__ import annotations

import contextlib
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from cambrian.archive.lineage import improves
from cambrian.archive.selection import STRATEGY_NAMES
from cambrian.archive.store import Archive
from cambrian.meta_agent.cli._app import RunsDir, Store, app, console, err_console, http_url, store_url
from cambrian.meta_agent.config import load_config
from cambrian.meta_agent.search.stores import archive_path, open_run, shown_store, store_in_use

if TYPE_CHECKING:  # imported by the commands that run a search (`cambrian status` needs none of it)
    from rich.progress import Progress, TaskID

    from cambrian.meta_agent.search import LoopEvent, LoopOutcome, Reporter

db_app = typer.Typer(help="An archive: upgrade one written by an older Cambrian.", no_args_is_help=True)
app.add_typer(db_app, name="db")


# ----- run / resume ----------------------------------------------------------------------------


class CliReporter:
    """Progress bar and messages for a search, built on rich."""

    def __init__(self) -> None:
        self.progress: Progress | None = None
        self.task_id: TaskID | None = None
        self.seed_score: float | None = None
        self.total = 0  # the run's iterations, for the plain lines (not a terminal)

    def info(self, message: str) -> None:
        console.print(f"[dim]{message}[/dim]")

    def warn(self, message: str) -> None:
        err_console.print(f"[yellow]warning:[/yellow] {message}")

    def event(self, event: LoopEvent) -> None:
        if event.kind == "note":
            self.info(event.message)
            return
        if event.kind == "evaluated" and event.iteration == 0:
            self.seed_score = event.score
        if not console.is_terminal:
            self._line(event)  # no bar to redraw (a log, a pipe): one line per proposal instead
            return
        if self.progress is None or self.task_id is None:
            return
        advance = 1 if event.kind in ("proposed", "rejected") else 0
        best = "—" if event.best_score is None else f"{event.best_score:.4f}"
        seed = "" if self.seed_score is None else f" (seed {self.seed_score:.4f})"
        self.progress.update(self.task_id, advance=advance, description=f"best {best}{seed}")

    def _line(self, event: LoopEvent) -> None:
        """One plain line when a proposal ends (refused, or scored), or the seed is scored. Numbered by its
        iteration, which a resumed run keeps (proposals end out of order when several run at once)."""
        if event.kind not in ("rejected", "evaluated", "invalid"):
            return
        best = "-" if event.best_score is None else f"{event.best_score:.4f}"
        if event.iteration == 0:
            console.print(f"seed #{event.agent_id}: {event.score:.4f}", markup=False, highlight=False)
            return
        what = (
            "refused" if event.kind == "rejected" else "invalid" if event.score is None else f"scored {event.score:.4f}"
        )
        first = (event.message or "").strip().split("\n", 1)[0]
        why = f": {textwrap.shorten(first, 160, placeholder=' ...')}" if first else ""
        line = f"iteration {event.iteration}/{self.total}: {event.operator} on #{event.parent_id} -> #{event.agent_id}"
        console.print(f"{line} {what}{why}; best {best}", markup=False, highlight=False, soft_wrap=True)

    @contextlib.contextmanager
    def progress_bar(self, completed: int, total: int) -> Iterator[None]:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.total = total
        if not console.is_terminal:
            yield
            return
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
        from cambrian.meta_agent.search import Reporter

        return Reporter(info=self.info, warn=self.warn, event=self.event, progress=self.progress_bar)


def _gain(best: float, seed: float) -> str:
    """The best's gain over the seed as printed: "no gain" within rounding (`improves`), else signed, in as many
    digits as it needs (a gain of 3e-06 is not "+0.0000")."""
    if not improves(best, seed):
        return "no gain"
    delta = best - seed
    return f"{delta:+.4f}" if abs(delta) >= 1e-4 else f"{delta:+.2e}"


def _print_outcome(name: str, outcome: LoopOutcome, runs_dir: Path, store: str | None = None) -> None:
    colour = {"finished": "green", "stopped": "yellow"}.get(outcome.status.value, "red")
    console.print(f"\n[bold {colour}]run {name} {outcome.status.value}[/]: {outcome.reason}")
    if outcome.fix:
        console.print(f"[bold]fix:[/bold] {outcome.fix}")
    if outcome.best_score is not None:
        gain = ""
        if outcome.seed_score is not None:
            gain = f" (seed {outcome.seed_score:.4f}, {_gain(outcome.best_score, outcome.seed_score)})"
        console.print(f"best score [bold]{outcome.best_score:.4f}[/bold] by agent {outcome.best_agent_id}{gain}")
    from cambrian.meta_agent.search import summarize_run

    archive, run_row = open_run(runs_dir, name, readonly=True, store=store)
    with archive:
        for line in summarize_run(archive, run_row.key).lines(name):
            console.print(line, markup=False, highlight=False)
        used = store_in_use(archive, runs_dir, name)
    in_store = None if used is None else shown_store(used)
    console.print(
        f"this session: {outcome.proposals} proposals, {outcome.evaluated} evaluated, {outcome.invalid} invalid; "
        f"FM cost ${outcome.cost_usd:.4f} in all"
    )
    if outcome.infra_faults:
        console.print(
            f"infrastructure faults: {outcome.infra_faults} task runs were lost with a Ray node and ran again "
            "elsewhere (not counted against any agent)"
        )
    flag = "" if runs_dir == Path("runs") else f" --runs-dir {runs_dir}"
    if in_store is not None:
        flag = f" --store {in_store}"
    console.print(f"stored in {in_store or runs_dir / name / 'archive.db'}", soft_wrap=True)
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
    from cambrian.meta_agent.search import INTERRUPTED

    if outcome.status.value == "failed":
        raise typer.Exit(1)
    if outcome.reason.startswith(INTERRUPTED):
        raise typer.Exit(130)


@app.command()
def run(
    benchmark: str = typer.Argument("circle_packing", help="benchmark name (`cambrian benchmarks`)"),
    config: Path | None = typer.Option(None, "--config", "-c", help="TOML config file"),
    name: str | None = typer.Option(None, help="run name (default: BENCHMARK-TIMESTAMP)"),
    model: str | None = typer.Option(None, help="local model name, .gguf path, or litellm model string"),
    api_base: str | None = typer.Option(None, help="OpenAI-compatible server URL for --model", callback=http_url),
    api_key_env: str | None = typer.Option(None, help="NAME of the env var holding the API key"),
    sandbox: str | None = typer.Option(None, help="auto (Docker when available) | docker | local"),
    strategy: str | None = typer.Option(None, help=" | ".join(STRATEGY_NAMES) + " | an installed plugin"),
    iterations: int | None = typer.Option(None, help="proposals to make"),
    budget_usd: float | None = typer.Option(None, help="stop proposing at this FM spend"),
    wall_seconds: float | None = typer.Option(None, help="stop after this many seconds"),
    seed: int | None = typer.Option(None, help="run seed (selection, FM sampling)"),
    fm_concurrency: int | None = typer.Option(None, help="concurrent FM calls"),
    eval_concurrency: int | None = typer.Option(None, help="concurrent evaluations (with --executor ray: per node)"),
    executor: str | None = typer.Option(
        None, help="local (this machine's sandbox) | ray (tasks spread over the cluster of RAY_ADDRESS)"
    ),
    ray_address: str | None = typer.Option(None, help="with --executor ray: HEAD:PORT or auto (default: RAY_ADDRESS)"),
    set_: list[str] = typer.Option([], "--set", help="any config key, e.g. --set search.params.alpha0=1.5"),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """Start a search on BENCHMARK and run it to its budget."""
    cfg = load_config(
        config,
        sets=set_,
        overrides={
            "benchmark": benchmark,
            "name": name,
            "runs_dir": runs_dir,
            "store": store,
            "fm.model": model,
            "fm.api_base": api_base,
            "fm.api_key_env": api_key_env,
            "fm.concurrency": fm_concurrency,
            "evaluation.sandbox": sandbox,
            "evaluation.concurrency": eval_concurrency,
            "evaluation.executor": executor,
            "evaluation.ray_address": ray_address,
            "search.strategy": strategy,
            "budget.iterations": iterations,
            "budget.usd": budget_usd,
            "budget.wall_seconds": wall_seconds,
            "seed": seed,
        },
    ).with_default_name()
    if cfg.store is not None and store is None:  # from a --set or the config file, which --store's check never saw
        typed = any(item.partition("=")[0].strip() == "store" for item in set_)
        store_url(cfg.store, given_as="--set store" if typed else f"store in {config}")
    console.print(
        f"[bold]cambrian[/bold] run [cyan]{cfg.name}[/cyan]: {cfg.benchmark}, model {cfg.fm.model}, "
        f"strategy {cfg.search.strategy}, {cfg.budget.iterations} iterations"
    )
    from cambrian.meta_agent.search import start_run

    name_, outcome = start_run(cfg, CliReporter().reporter())
    _print_outcome(name_, outcome, runs_dir, cfg.store)
    _exit_for(outcome)


@app.command()
def resume(
    run_name: str = typer.Argument(..., metavar="RUN"),
    iterations: int | None = typer.Option(None, help="new total iteration budget"),
    budget_usd: float | None = typer.Option(None, help="new FM spend limit"),
    wall_seconds: float | None = typer.Option(None, help="stop after this many seconds"),
    sandbox: str | None = typer.Option(None, help="switch the sandbox backend: auto | docker | local"),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """Continue a run: re-queue unfinished agents and make the missing proposals."""
    from cambrian.meta_agent.search import resume_run

    budget = {"iterations": iterations, "usd": budget_usd, "wall_seconds": wall_seconds}
    # Checked here as `run` checks them: a bad value is the command line's, not the run's stored config's.
    load_config(overrides={**{f"budget.{key}": value for key, value in budget.items()}, "evaluation.sandbox": sandbox})
    outcome = resume_run(runs_dir, run_name, budget, CliReporter().reporter(), sandbox=sandbox, store=store)
    _print_outcome(run_name, outcome, runs_dir, store)
    _exit_for(outcome)


@app.command("rm")
def remove(
    run_name: str = typer.Argument(..., metavar="RUN"),
    yes: bool = typer.Option(False, "--yes", "-y", help="delete without asking"),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """Delete a run: its agents, evaluations and FM ledger, and its folder (refused while it is being searched)."""
    from cambrian.meta_agent.search.stores import delete_run, run_lock

    archive, run = open_run(runs_dir, run_name, readonly=True, store=store)  # RunNotFound, with its fix
    with archive:
        agents = len(archive.agents(run.key))
    where = shown_store(store) if store is not None else str(archive_path(runs_dir, run_name).parent)
    with run_lock(Path(runs_dir) / run_name, run_name):  # RunBusy while a search holds it
        if not yes:
            if not sys.stdin.isatty():
                raise typer.BadParameter(f"deleting run {run_name} needs a yes: pass --yes", param_hint="--yes")
            typer.confirm(f"Delete run {run_name} ({agents} agents, in {where})? It cannot be undone", abort=True)
        delete_run(runs_dir, run_name, store=store)
    console.print(f"deleted run {run_name} ({agents} agents) from {where}")


# ----- archive schema ----------------------------------------------------------------------------


@db_app.command("upgrade")
def db_upgrade(
    target: str = typer.Argument(..., metavar="RUN|URL", help="a run's name, or a database URL (all its runs)"),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """Upgrade an archive (a run's, or a whole database's) to this Cambrian's schema in one transaction,
    keeping every row (Alembic migrations)."""
    if "://" in target:  # a whole database: every run it holds
        archive, path = Archive(target), shown_store(target)
    else:
        archive, _ = open_run(runs_dir, target, store=store)  # a writable open upgrades (archive/schema.py)
        used = store_in_use(archive, runs_dir, target)
        path = str(archive_path(runs_dir, target)) if used is None else shown_store(used)
    with archive:
        report = archive.schema
    if report.found is None:
        console.print(f"{path} was empty: created an archive at schema version {report.version}")
        return
    if not report.changes:
        console.print(f"{path}: schema version {report.version}, already current")
        return
    console.print(
        f"upgraded {path} from schema version {report.found} to {report.version}: " + "; ".join(report.changes)
    )
