"""The library API: a search from Python, and its run read back as plain data.

    import cambrian

    run = cambrian.search("knapsack", iterations=20, sandbox="local")
    print(run.seed_score, run.best(1)[0].score)
    run.export("best-agents", best=3)

`search` is what `cambrian run` does (the same session, the same defaults, the same archive), blocking until
the budget is spent; `search_async` is its twin for code that has an event loop (a notebook, a server), and
cancelling it stops the search as a first Ctrl-C does. `open_run` reads a run the CLI or another process
made. Heavy parts (the loop, the sandbox, the model server) are imported only when a search starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cambrian.errors import CambrianError

if TYPE_CHECKING:
    from cambrian.archive.models import Agent as AgentRow
    from cambrian.archive.store import Archive
    from cambrian.meta_agent.search import LoopEvent, Reporter
    from cambrian.meta_agent.search.holdout import EvalOutcome

log = logging.getLogger("cambrian")

#: Where runs go unless told and CAMBRIAN_RUNS_DIR is unset (the CLI's default too).
DEFAULT_RUNS_DIR = Path("runs")


def _runs_dir(value: str | Path | None) -> Path:
    """`value`, or as the CLI: the folder CAMBRIAN_RUNS_DIR names, else ./runs."""
    if value is not None:
        return Path(value)
    return Path(os.environ.get("CAMBRIAN_RUNS_DIR") or DEFAULT_RUNS_DIR)


def _store(value: str | None) -> str | None:
    """`value`, or as the CLI: the database URL CAMBRIAN_STORE names (where a password belongs), else None
    (each run's own archive.db). InvalidStoreURL, before anything runs, for one that is no URL (a path such as
    "runs.db")."""
    store = value if value is not None else (os.environ.get("CAMBRIAN_STORE") or None)
    if store is not None:
        from cambrian.archive.store import parse_store_url

        parse_store_url(store, given_as="store=" if value is not None else "CAMBRIAN_STORE")
    return store


@dataclass(frozen=True)
class Agent:
    """One agent of a run, as plain data.

    score: its search-split score (what selection saw); holdout_score: its score on the holdout split, kept
    apart (None until `Run.evaluate(agent, split="holdout")` or `cambrian eval` measured it). parent and
    second_parent: the ids it was made from (None for the seed; second_parent only for crossover). files:
    relative path -> text of its program (empty for a proposal that never became a program); entry: the file
    its benchmark runs. island: its home island in a run with islands (`search.islands`), None for the seed
    (on every island) and in a run without islands.
    """

    id: int
    score: float | None
    holdout_score: float | None
    operator: str
    model: str | None
    parent: int | None
    second_parent: int | None
    iteration: int
    status: str
    files: Mapping[str, str]
    entry: str | None
    invalid_reason: str | None = None
    island: int | None = None


class Run:
    """A run in an archive, read when asked (never cached: a search in another process may be writing it).

    Made by `search`, `search_async` or `open_run`.
    """

    def __init__(self, name: str, *, runs_dir: str | Path | None = None, store: str | None = None) -> None:
        self.name = name
        self.runs_dir = _runs_dir(runs_dir)
        self.store = _store(store)
        with self._archive():
            pass  # RunNotFound (with its fix) now rather than at the first read

    def __repr__(self) -> str:
        return f"Run({self.name!r}, runs_dir={str(self.runs_dir)!r})"

    @contextlib.contextmanager
    def _archive(self) -> Iterator[tuple[Archive, int]]:
        from cambrian.meta_agent.search.stores import open_run as open_archive

        archive, row = open_archive(self.runs_dir, self.name, readonly=True, store=self.store)
        with archive:
            yield archive, row.key

    @property
    def status(self) -> str:
        """running | stopped (Ctrl-C, a cancelled `search_async`) | finished | failed; a run killed mid-search
        stays `running` until it is resumed."""
        with self._archive() as (archive, run_id):
            return str(archive.get_run(run_id).status.value)

    @property
    def config(self) -> dict[str, Any]:
        """The run's frozen configuration, as `cambrian run` resolved it."""
        import json

        with self._archive() as (archive, run_id):
            return dict(json.loads(archive.get_run(run_id).config_json or "{}"))

    @property
    def seed_score(self) -> float | None:
        """The seed program's search score (None while it is not evaluated, or when it failed)."""
        with self._archive() as (archive, run_id):
            seeds = [a for a in archive.agents(run_id) if a.operator == "seed"]
        return seeds[0].score if seeds else None

    def best(self, n: int = 1) -> list[Agent]:
        """Up to `n` evaluated agents, best search score first (ties: the older agent first), with their code."""
        with self._archive() as (archive, run_id):
            return [_agent(archive, row) for row in archive.best(run_id, n)]

    def agent(self, agent_id: int) -> Agent:
        """One agent of this run, with its code; AgentNotFound (a CambrianError) for an id of another run."""
        with self._archive() as (archive, run_id):
            row = archive.get_agent(agent_id)
            if row.run_id != run_id:
                raise CambrianError(
                    f"agent {agent_id} is not an agent of run {self.name}",
                    fix="take an id from this run's lineage() or best()",
                )
            return _agent(archive, row)

    def lineage(self) -> list[dict[str, Any]]:
        """Every agent of the run, oldest first, as plain dicts (no code): id, parent, second_parent,
        iteration, operator, model, status, score, holdout_score, invalid_reason, fm_seconds, cost_usd,
        island (the home island; None without islands), created_at. The tree is the parent links."""
        with self._archive() as (archive, run_id):
            return [_lineage_row(row) for row in archive.agents(run_id)]

    def to_pandas(self) -> Any:
        """`lineage()` as a pandas DataFrame indexed by agent id (pandas is not a Cambrian dependency)."""
        try:
            import pandas
        except ImportError:
            raise CambrianError(
                "Run.to_pandas() needs pandas, which is not installed", fix="pip install pandas"
            ) from None
        return pandas.DataFrame(self.lineage()).set_index("id")

    def export(self, to: str | Path, *, best: int = 1, agent: int | None = None) -> list[Path]:
        """Write the `best` best agents (or the one `agent`) as standalone folders `to/agent-<id>` (files,
        manifest.json, the diff chain from the seed), as `cambrian export` does; returns the folders."""
        from cambrian.archive.export import export_agents

        with self._archive() as (archive, run_id):
            return export_agents(archive, archive.get_run(run_id), Path(to), best=best, agent=agent)

    def evaluate(self, agent: int | Agent, *, split: str = "holdout", sandbox: str | None = None) -> EvalOutcome:
        """Score one agent on `split` (default: the holdout tasks, never seen by selection) and store the
        result apart from its search score, as `cambrian eval RUN:AGENT` does. sandbox: auto | docker | local
        (default: the run's)."""
        from cambrian.meta_agent.search.holdout import evaluate_target

        agent_id = agent.id if isinstance(agent, Agent) else int(agent)
        return evaluate_target(
            f"{self.name}:{agent_id}",
            split=split,
            runs_dir=self.runs_dir,
            reporter=_reporter(None),
            sandbox=sandbox,
            store=self.store,
        )

    def report(self, to: str | Path, *, best: int = 3) -> Path:
        """Write one self-contained HTML file of the run (plots, tree, the `best` agents' code and diffs),
        as `cambrian report` does; returns its path."""
        from cambrian.ui import write_report

        return write_report(self.runs_dir, self.name, Path(to), best=best, store=self.store)


def open_run(name_or_path: str | Path, *, runs_dir: str | Path | None = None, store: str | None = None) -> Run:
    """A run by name, or by the path of its folder (the one holding archive.db). RunNotFound, with the runs
    there, when there is none.

    runs_dir: where runs are (default, as the CLI: the folder CAMBRIAN_RUNS_DIR names, else ./runs); store: a
    database URL holding runs (default: CAMBRIAN_STORE, else each run's own archive.db).
    """
    path = Path(name_or_path)
    if runs_dir is None and store is None and (path / "archive.db").is_file():
        return Run(path.name, runs_dir=path.parent)
    return Run(str(name_or_path), runs_dir=runs_dir, store=store)


def search(
    benchmark: str = "circle_packing",
    *,
    model: str | None = None,
    iterations: int | None = None,
    sandbox: str | None = None,
    runs_dir: str | Path | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    store: str | None = None,
    on_event: Callable[[LoopEvent], None] | None = None,
) -> Run:
    """Search `benchmark` to its budget, as `cambrian run` does, and return the run.

    model: a local model name, a .gguf path or a litellm model string (default: the config's, the local
    qwen2.5-coder-1.5b). iterations: proposals to make. sandbox: auto | docker | local. runs_dir and store:
    where the run is kept, as for `open_run`. name: the run's name (default: BENCHMARK-TIMESTAMP). config:
    any other settings as nested keys, e.g. `{"search": {"strategy": "greedy"}, "fm": {"concurrency": 2}}`
    (the keyword arguments win over it).
    on_event: called with each loop event (a proposal, an evaluation). Messages go to the `cambrian` logger.
    Raises the same errors the CLI shows (each a CambrianError with its fix). From inside a running event
    loop (a notebook), the search runs in a worker thread and this call still blocks; use `search_async` to
    keep the loop free.
    """
    settings = _settings(benchmark, model, iterations, sandbox, runs_dir, name, config, store)
    if not _in_event_loop():
        return _search(settings, on_event, None)
    result: list[Run] = []
    failure: list[BaseException] = []

    def work() -> None:
        try:
            result.append(_search(settings, on_event, None))
        except BaseException as exc:  # noqa: BLE001 - handed to the calling thread as it is
            failure.append(exc)

    worker = threading.Thread(target=work, name="cambrian-search")
    worker.start()
    worker.join()
    if failure:
        raise failure[0]
    return result[0]


async def search_async(
    benchmark: str = "circle_packing",
    *,
    model: str | None = None,
    iterations: int | None = None,
    sandbox: str | None = None,
    runs_dir: str | Path | None = None,
    name: str | None = None,
    config: Mapping[str, Any] | None = None,
    store: str | None = None,
    on_event: Callable[[LoopEvent], None] | None = None,
) -> Run:
    """`search` for an event loop: the search runs in a worker thread while the loop goes on. Cancelling the
    task stops the search as a first Ctrl-C does (no new proposals; evaluations running finish and are
    stored; children proposed and not yet evaluated stay queued for `cambrian resume`), waits for that, and
    re-raises the cancellation; `open_run` then reads what was done (status "stopped")."""
    settings = _settings(benchmark, model, iterations, sandbox, runs_dir, name, config, store)
    stop = _Stopper()
    task = asyncio.ensure_future(asyncio.to_thread(_search, settings, on_event, stop))
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        stop("cancelled by the caller (search_async)")
        with contextlib.suppress(BaseException):
            await task
        raise


def _in_event_loop() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


class _Stopper:
    """Holds the running search's stop function; a stop asked for before the search started waits for it."""

    def __init__(self) -> None:
        self._stop: Callable[[str], None] | None = None
        self._asked: str | None = None
        self._lock = threading.Lock()

    def started(self, stop: Callable[[str], None]) -> None:
        with self._lock:
            self._stop = stop
            asked = self._asked
        if asked is not None:
            _quietly(stop, asked)

    def __call__(self, reason: str) -> None:
        with self._lock:
            self._asked = reason
            stop = self._stop
        if stop is not None:
            _quietly(stop, reason)


def _quietly(stop: Callable[[str], None], reason: str) -> None:
    with contextlib.suppress(RuntimeError):  # the search's event loop already closed: it has ended anyway
        stop(reason)


def _settings(
    benchmark: str,
    model: str | None,
    iterations: int | None,
    sandbox: str | None,
    runs_dir: str | Path | None,
    name: str | None,
    config: Mapping[str, Any] | None,
    store: str | None,
) -> Any:
    from cambrian.meta_agent.config import load_config

    overrides = dict(_dotted(config or {}))
    overrides.update(
        {
            "benchmark": benchmark,
            "name": name,
            "runs_dir": _runs_dir(runs_dir),
            "store": _store(store),
            "fm.model": model,
            "evaluation.sandbox": sandbox,
            "budget.iterations": iterations,
        }
    )
    return load_config(overrides=overrides).with_default_name()


def _dotted(values: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Nested settings as dotted keys; a mapping under search.operators or search.params stays one value."""
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and dotted not in ("search.operators", "search.params", "fm.models"):
            yield from _dotted(value, dotted + ".")
        else:
            yield dotted, value


def _search(settings: Any, on_event: Callable[[LoopEvent], None] | None, stop: _Stopper | None) -> Run:
    from cambrian.meta_agent.search import start_run

    name, _ = start_run(settings, _reporter(on_event, stop))
    return Run(name, runs_dir=settings.runs_dir, store=settings.store)


def _reporter(on_event: Callable[[LoopEvent], None] | None, stop: _Stopper | None = None) -> Reporter:
    from cambrian.meta_agent.search import Reporter

    def event(happened: LoopEvent) -> None:
        if happened.kind == "note":
            log.info("%s", happened.message)
        if on_event is not None:
            on_event(happened)

    return Reporter(
        info=lambda message: log.info("%s", message),
        warn=lambda message: log.warning("%s", message),
        event=event,
        progress=lambda done, total: contextlib.nullcontext(),
        started=None if stop is None else stop.started,
    )


def _agent(archive: Archive, row: AgentRow) -> Agent:
    files, entry = archive.get_genome(row.genome_hash) if row.genome_hash else ({}, None)
    return Agent(
        id=row.key,
        score=row.score,
        holdout_score=row.holdout_score,
        operator=row.operator,
        model=row.model,
        parent=row.parent_id,
        second_parent=row.second_parent_id,
        iteration=row.iteration,
        status=str(row.status.value),
        files=files,
        entry=entry,
        invalid_reason=row.invalid_reason,
        island=row.island,
    )


def _lineage_row(row: AgentRow) -> dict[str, Any]:
    created: datetime = row.created_at
    return {
        "id": row.key,
        "parent": row.parent_id,
        "second_parent": row.second_parent_id,
        "iteration": row.iteration,
        "operator": row.operator,
        "model": row.model,
        "status": str(row.status.value),
        "score": row.score,
        "holdout_score": row.holdout_score,
        "invalid_reason": row.invalid_reason,
        "fm_seconds": row.fm_seconds,
        "cost_usd": row.cost_usd,
        "island": row.island,
        "created_at": created.isoformat(),
    }
