"""`cambrian runs`, `status`, `tree`, `show`, `diff`, `export`: read a run's lineage (the archive opened read-only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.syntax import Syntax
from rich.table import Table
from rich.tree import Tree

from cambrian.archive.errors import AgentNotFound, ArchiveCorrupt, ArchiveOutdated, ArchiveTooNew
from cambrian.archive.islands import island_summaries
from cambrian.archive.models import Agent, AgentStatus, IslandMigrant, Run
from cambrian.archive.store import Archive
from cambrian.meta_agent.cli._app import RunsDir, Store, app, console, err_console
from cambrian.meta_agent.errors import CambrianError, ConfigError
from cambrian.meta_agent.search.stores import open_run, shown_store

if TYPE_CHECKING:
    from cambrian.meta_agent.search.bandit import Arm

# ----- browsing ----------------------------------------------------------------------------------


def fmt_score(score: float | None) -> str:
    return "—" if score is None else f"{score:.4f}"


@app.command("runs")
def list_runs(runs_dir: Path = RunsDir, store: str | None = Store) -> None:
    """List the runs in the runs folder, or in a database (--store URL)."""
    table = Table("run", "benchmark", "status", "agents", "best", "created")
    if store is not None:
        with Archive(store, readonly=True) as archive:  # an older schema is refused with `cambrian db upgrade URL`
            _add_runs(table, archive)
            if not archive.list_runs():
                console.print(f"no runs in {shown_store(store)} yet: start one with `cambrian run BENCH --store URL`")
                return
        console.print(table)
        return
    if not Path(runs_dir).is_dir():  # a mistyped --runs-dir would otherwise read as a folder with no runs yet
        what = "is a file, not a folder" if Path(runs_dir).exists() else "does not exist"
        raise ConfigError(
            f"the runs folder {runs_dir} {what}",
            fix="pass --runs-dir the folder that holds your runs (env CAMBRIAN_RUNS_DIR), or start one with "
            "`cambrian run circle_packing` (it makes ./runs)",
        )
    paths = sorted(Path(runs_dir).glob("*/archive.db"))
    damaged: list[Path] = []
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
        except ArchiveCorrupt:
            damaged.append(path)
            table.add_row(path.parent.name, "", "damaged archive", "", "", "")
            continue
        try:
            with archive:
                _add_runs(table, archive)
        except ArchiveCorrupt:  # damaged past its first pages
            damaged.append(path)
            table.add_row(path.parent.name, "", "damaged archive", "", "", "")
    if not paths:
        console.print(f"no runs in {runs_dir} yet: start one with `cambrian run circle_packing`")
        return
    console.print(table)
    for path in damaged:
        err_console.print(
            f"[bold yellow]warning:[/bold yellow] {path} is damaged; `cambrian status "
            f"{path.parent.name}` says how to check and rescue it"
        )


def _add_runs(table: Table, archive: Archive) -> None:
    for r in archive.list_runs():
        best = archive.best(r.key, n=1)
        n_agents = len(archive.agents(r.key))
        table.add_row(
            r.name,
            r.benchmark,
            r.status.value,
            str(n_agents),
            fmt_score(best[0].score if best else None),
            r.created_at.strftime("%Y-%m-%d %H:%M"),
        )


@app.command()
def status(
    run_name: str = typer.Argument(..., metavar="RUN"), runs_dir: Path = RunsDir, store: str | None = Store
) -> None:
    """A run's state: agents by status, best and seed scores, FM tokens and cost, and its islands if it has any."""
    archive, r = open_run(runs_dir, run_name, readonly=True, store=store)
    with archive:
        agents = archive.agents(r.key)
        counts = {s.value: sum(1 for a in agents if a.status == s) for s in AgentStatus}
        best = archive.best(r.key, n=1)
        seed = next((a for a in agents if a.operator == "seed"), None)
        cost = archive.cost_summary(r.key)
        config = json.loads(r.config_json)
        console.print(
            f"[bold]{r.name}[/bold]  {r.benchmark}  status [bold]{r.status.value}[/bold]"
            + (f"  ({r.error})" if r.error else "")
        )
        console.print(
            f"iterations {archive.iterations_done(r.key)}/{config['budget']['iterations']}  "
            + "  ".join(f"{k} {v}" for k, v in counts.items())
        )
        console.print(
            f"best {fmt_score(best[0].score if best else None)}"
            + (f" (agent {best[0].id})" if best else "")
            + f"  seed {fmt_score(seed.score if seed else None)}"
        )
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
        _print_islands(archive, r, agents, config)
        _print_arms(agents, config)


def _print_islands(archive: Archive, run: Run, agents: list[Agent], config: dict) -> None:
    """Per island of a run with islands: its agents (those whose home it is), how many were evaluated, the
    agents that joined it by migration, and its best member (the seed and migrants included)."""
    count = island_count(config)
    if count <= 1:
        return
    search = config["search"]
    every, migrants = search.get("migration_every", 10), search.get("migrants", 1)
    console.print(f"islands: {count}; every {every} finished proposals, each island's best {migrants} join the next")
    table = Table("island", "agents", "evaluated", "migrants in", "best", box=None)
    for island in island_summaries(agents, archive.island_migrants(run.key), count):
        best = "—" if island.best_agent_id is None else f"{fmt_score(island.best_score)} (agent {island.best_agent_id})"
        table.add_row(str(island.island), str(island.home_agents), str(island.evaluated), str(island.migrants_in), best)
    console.print(table)


def island_count(config: dict) -> int:
    """The islands a run's stored config names (1 for runs made before islands)."""
    return int((config.get("search") or {}).get("islands", 1))


def _island_line(agent: Agent, migrants: list[IslandMigrant], count: int) -> str | None:
    """Which islands the agent is on, for `show` (None in a run without islands)."""
    if agent.island is None:
        return None if count <= 1 else f"on every island (0-{count - 1}): a seed"
    joined = [m for m in migrants if m.agent_id == agent.id]
    also = "; joined " + ", ".join(f"island {m.island} after {m.after_proposals} proposals" for m in joined)
    return f"island {agent.island} (home)" + (also if joined else "")


def _print_arms(agents: list[Agent], config: dict) -> None:
    """Per (model, operator): proposals, valid children, improvements, FM time, and what the bandit learnt
    (its value, improvement per FM minute, and how often it would choose each arm next), replayed from the
    archive as a resume would replay it."""
    from cambrian.meta_agent.config import BanditConfig
    from cambrian.meta_agent.search.arms import arm_history, restore_bandit
    from cambrian.meta_agent.search.bandit import Arm

    history = arm_history(agents)
    if not history:
        return
    settings = BanditConfig.model_validate(config["search"].get("bandit") or {"algorithm": "off"})
    weights = config["search"].get("operators") or {}
    arms = sorted({arm for arm, _, _ in history} | set(untried_arms(history, weights)))
    bandit = restore_bandit(settings, arms, agents, weights=weights)
    shares = dict(zip(bandit.arms, bandit.choice_shares())) if bandit is not None else {}
    title = f"operators and models (bandit: {settings.algorithm})"
    table = Table(title=title, title_justify="left", box=None, pad_edge=False)
    columns = ("model", "operator", "proposals", "valid", "improved", "mean gain", "FM s", "gain / FM min")
    for column in (*columns, *(("chosen next",) if shares else ())):
        table.add_column(column, justify="left" if column in ("model", "operator") else "right")
    made: dict[Arm, list[Agent]] = {}
    for agent in agents:
        if agent.iteration > 0:
            made.setdefault(Arm(agent.model or "", agent.operator), []).append(agent)
    rewards: dict[Arm, list[float]] = {}
    for arm, reward, _cost in history:
        if reward is not None:
            rewards.setdefault(arm, []).append(reward)
    for arm in arms:
        children, done = made.get(arm, []), rewards.get(arm, [])
        seconds = sum(child.fm_seconds for child in children)
        valid = sum(child.status == AgentStatus.evaluated for child in children)
        row = [
            arm.model or "-",
            arm.operator,
            str(len(children)),
            str(valid),
            str(sum(r > 0 for r in done)),
            f"{sum(done) / len(done):.4g}" if done else "-",
            f"{seconds:.0f}",
            f"{sum(done) / (seconds / 60):.4g}" if done and seconds > 0 else "-",
        ]
        if shares:
            row.append(f"{shares.get(arm, 0.0):.0%}")
        table.add_row(*row)
    console.print(table)


def untried_arms(history: list[tuple[Arm, float | None, float]], weights: dict[str, float]) -> list[Arm]:
    """The arms of the run's operators (positive weight) that no proposal used yet, on the models it used: the
    bandit may choose them next, so its shares are over them too."""
    from cambrian.meta_agent.operators import make_operator
    from cambrian.meta_agent.search.bandit import Arm

    models = sorted({arm.model for arm, _, _ in history if arm.model}) or [""]
    arms: list[Arm] = []
    for name, weight in weights.items():
        try:
            uses_fm = weight > 0 and make_operator(name).uses_fm
        except CambrianError:  # an operator plugin no longer installed: shown only through its history
            continue
        arms.extend(Arm(model if uses_fm else "", name) for model in (models if uses_fm else [""]) if weight > 0)
    return arms


def agent_of_run(archive: Archive, run: Run, agent_id: int, *, store: str | None) -> Agent:
    """Agent `agent_id` of `run`; AgentNotFound, naming its own run, for another run's agent (agent ids run
    across every run of a store)."""
    agent = archive.get_agent(agent_id)
    if agent.run_id != run.id:
        in_store = f" --store {shown_store(store)}" if store is not None else ""
        owner = archive.get_run(int(agent.run_id)).name
        raise AgentNotFound(
            f"agent {agent_id} is not in run {run.name}: it belongs to run {owner} in the same archive",
            fix=f"pick an agent of {run.name}: `cambrian tree {run.name}{in_store}` lists them",
        )
    return agent


def fmt_scores(search: float | None, holdout: float | None) -> str:
    """Both scores side by side: 'search 0.4000 | holdout 0.3500'."""
    return f"search {fmt_score(search)} | holdout {fmt_score(holdout)}"


def _label(agent: Agent) -> str:
    colour = {"evaluated": "green", "invalid": "red", "failed": "magenta"}.get(agent.status.value, "yellow")
    score = f"[bold]{fmt_score(agent.score)}[/bold]"
    if agent.holdout_score is not None:
        score = f"[bold]{fmt_score(agent.score)}[/bold] | holdout {fmt_score(agent.holdout_score)}"
    return f"#{agent.id} {score} {agent.operator} [{colour}]{agent.status.value}[/{colour}]"


@app.command()
def tree(
    run_name: str = typer.Argument(..., metavar="RUN"),
    best_path: bool = typer.Option(False, "--best-path", help="only the chain from the seed to the best agent"),
    max_depth: int = typer.Option(50, min=1, help="deepest level shown (1: the seed)"),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """The lineage tree: score, operator and status of every agent."""
    archive, r = open_run(runs_dir, run_name, readonly=True, store=store)
    with archive:
        agents = archive.best_path(r.key) if best_path else archive.agents(r.key)
    shown = {a.key for a in agents}
    children: dict[int | None, list[Agent]] = {}
    for a in agents:
        parent = a.parent_id if a.parent_id in shown else None
        children.setdefault(parent, []).append(a)
    root = Tree(f"[bold]{r.name}[/bold] ({r.benchmark})")

    def add(node: Tree, agent: Agent, depth: int) -> None:
        branch = node.add(_label(agent))
        if depth >= max_depth:
            return
        for child in children.get(agent.key, []):
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
    store: str | None = Store,
) -> None:
    """One agent: scores, lineage, feedback, per-task results and code."""
    archive, r = open_run(runs_dir, run_name, readonly=True, store=store)
    with archive:
        agent = agent_of_run(archive, r, agent_id, store=store)
        lineage = [a.id for a in reversed(archive.ancestors(agent_id))] + [agent.id]
        console.print(_label(agent))
        console.print(
            f"{fmt_scores(agent.score, agent.holdout_score)}  (search score drives selection; "
            f"holdout never does)  stage {agent.stage_reached}  tasks {agent.n_tasks}"
        )
        console.print(
            f"lineage {' -> '.join(str(i) for i in lineage)}  operator {agent.operator}  "
            f"model {agent.model or '—'}  iteration {agent.iteration}"
        )
        console.print(
            f"tokens {agent.prompt_tokens} + {agent.completion_tokens}  cost ${agent.cost_usd:.4f}  "
            f"genome {agent.genome_hash or '—'}"
        )
        count = island_count(json.loads(r.config_json))
        islands = _island_line(agent, archive.island_migrants(r.key) if agent.island is not None else [], count)
        if islands is not None:
            console.print(islands)
        if agent.invalid_reason:
            console.print(f"[red]invalid:[/red] {agent.invalid_reason}")
        if agent.feedback:
            console.print(f"[bold]feedback[/bold]\n{agent.feedback}")
        evaluations = archive.evaluations(agent_id)
        if evaluations:
            table = Table("task", "split", "stage", "score", "passed", "seconds", "exit", "notes")
            for e in evaluations:
                notes = ", ".join(
                    n
                    for n, on in (("timeout", e.timed_out), ("oom", e.oom_killed), ("output cap", e.output_truncated))
                    if on
                )
                table.add_row(
                    e.task_id,
                    e.split,
                    str(e.stage),
                    f"{e.score:.4f}",
                    "yes" if e.passed else "no",
                    f"{e.duration_s:.2f}",
                    str(e.exit_code),
                    notes,
                )
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
    store: str | None = Store,
) -> None:
    """The unified diff between two agents' code."""
    from cambrian.archive.export import unified_diff

    archive, r = open_run(runs_dir, run_name, readonly=True, store=store)
    with archive:
        files = []
        for agent in (agent_of_run(archive, r, a, store=store), agent_of_run(archive, r, b, store=store)):
            if not agent.genome_hash:
                raise typer.BadParameter(f"agent {agent.id} has no code ({agent.invalid_reason})")
            files.append(archive.get_genome(agent.genome_hash)[0])
    text = unified_diff(files[0], files[1], f"agent{a}", f"agent{b}")
    console.print(Syntax(text, "diff") if text else "(no differences)")


@app.command()
def export(
    run_name: str = typer.Argument(..., metavar="RUN"),
    to: Path = typer.Option(..., "--to", help="destination folder (one sub-folder per agent)"),
    best: int = typer.Option(1, "--best", min=1, help="export the N best agents"),
    agent: int | None = typer.Option(None, "--agent", help="export this agent instead"),
    runs_dir: Path = RunsDir,
    store: str | None = Store,
) -> None:
    """Export agents as standalone folders: files, manifest.json and the diff chain from the seed."""
    from cambrian.archive.export import export_agents

    if agent is not None and best != 1:
        raise typer.BadParameter("give --agent or --best, not both", param_hint="--best")
    archive, r = open_run(runs_dir, run_name, readonly=True, store=store)
    with archive:
        if agent is not None:
            agent_of_run(archive, r, agent, store=store)  # names the owner run and its --store
        folders = export_agents(archive, r, to, best=best, agent=agent)
        for dest in folders:
            exported = archive.get_agent(int(dest.name.removeprefix("agent-")))
            console.print(
                f"exported agent {exported.key} ({fmt_scores(exported.score, exported.holdout_score)}) to {dest}"
            )
        console.print(f"score an export on the holdout split: cambrian eval {folders[0]} --split holdout")
