"""Finding and opening runs read-only, and the one-line summary of a run the runs page lists.

A run lives at `<runs_dir>/<name>/archive.db`, or, given a store (a database URL such as
postgresql+psycopg://user@host/db), in that database beside other runs, under its name. Every open
here is read-only (`Archive(..., readonly=True)`): no DDL, no write lock, nothing written; a search
may be writing the same archive. An archive that
cannot be read (missing, not an archive, outdated, too new, corrupt) comes back as an
`Unreadable` the pages show with its fix, never as a traceback.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import Table, func, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError

from cambrian.archive.errors import (
    ArchiveCorrupt,
    ArchiveError,
    ArchiveNotFound,
    ArchiveOutdated,
    ArchiveTooNew,
    NotAnArchive,
    RunNotFound,
)
from cambrian.archive.models import Agent, AgentStatus, Run, RunStatus
from cambrian.archive.store import Archive
from cambrian.ui._columns import posix_seconds

ARCHIVE_FILE = "archive.db"

_AGENT: Table = Agent.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime


class Unreadable(ArchiveError):
    """A run that exists but cannot be read: the cause, its fix, and the HTTP status a page answers with."""

    def __init__(self, run: str, message: str, fix: str, status_code: int = 500, kind: str = "unreadable archive"):
        super().__init__(message, fix=fix)
        self.run = run
        self.message = message
        self.status_code = status_code
        self.kind = kind  # a few words for the page's title, e.g. "corrupt archive"


def run_path(runs_dir: Path, name: str) -> Path:
    """`<runs_dir>/<name>/archive.db`; RunNotFound for a name that is not a plain folder name or has no archive."""
    plain = name not in ("", ".", "..") and not any(ch in name for ch in "/\\\x00")
    path = Path(runs_dir) / name / ARCHIVE_FILE
    if not plain or not path.is_file():
        raise RunNotFound(
            f"no run named {name!r} in {Path(runs_dir).resolve()}",
            fix=f"the runs page lists the runs in this folder; `cambrian runs --runs-dir {runs_dir}` lists them "
            "too; a run's archive is RUNS_DIR/<run>/archive.db",
        )
    return path


def run_names(runs_dir: Path, store: str | None = None) -> list[str]:
    """The names of the folders in runs_dir holding an archive.db, or of the runs in `store`, sorted."""
    if store is None:
        return sorted(path.parent.name for path in Path(runs_dir).glob(f"*/{ARCHIVE_FILE}") if path.is_file())
    try:
        with _open_store(store) as archive:
            return sorted(run.name for run in archive.list_runs())
    except (Unreadable, DBAPIError):
        return []


def shown_store(store: str) -> str:
    """The store's URL as pages show it: never with its password."""
    return make_url(store).render_as_string(hide_password=True)


class _OpenStores:
    """One read-only `Archive` per store URL, opened on first use and kept: a page asks several endpoints,
    and opening a database server's archive (connect, log in, check the schema) costs ~20 ms, 25 times a
    query. One that fails while in use is closed and opened afresh on the next request (the server
    restarted, the database was dropped); `close_all` when the UI stops."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: dict[str, Archive] = {}

    @contextmanager
    def using(self, store: str) -> Iterator[Archive]:
        with self._lock:
            archive = self._open.get(store)
            if archive is None:
                try:
                    archive = Archive(store, readonly=True)
                except (ArchiveError, DBAPIError) as error:
                    raise unreadable(shown_store(store), error) from error
                self._open[store] = archive
        try:
            yield archive
        except Exception as error:
            if isinstance(error, DBAPIError) or isinstance(error.__cause__, DBAPIError):  # Unreadable wraps one
                self._forget(store, archive)
            raise

    def _forget(self, store: str, archive: Archive) -> None:
        with self._lock:
            if self._open.get(store) is archive:
                del self._open[store]
        archive.close()

    def close_all(self) -> None:
        with self._lock:
            archives, self._open = list(self._open.values()), {}
        for archive in archives:
            archive.close()


_STORES = _OpenStores()
close_stores = _STORES.close_all


def _open_store(store: str) -> AbstractContextManager[Archive]:
    """The store's read-only archive (kept open between requests); Unreadable (named after the store) when it
    cannot be opened."""
    return _STORES.using(store)


def unreadable(name: str, error: BaseException) -> Unreadable:
    """The page-ready form of an error met while opening or reading a run's archive."""
    if isinstance(error, (ArchiveOutdated, ArchiveTooNew, NotAnArchive)):
        kind = {ArchiveOutdated: "archive from an older Cambrian", ArchiveTooNew: "archive from a newer Cambrian"}
        return Unreadable(name, str(error), error.fix, 409, kind.get(type(error), "not an archive"))
    if isinstance(error, ArchiveCorrupt):  # the archive named the damaged file and how to rescue it
        message = f"the archive of run {name!r} cannot be read: {error.reason}"
        return Unreadable(name, message, error.fix, 500, "corrupt archive")
    if isinstance(error, ArchiveError):
        return Unreadable(name, str(error), error.fix, 500)
    return Unreadable(
        name,
        f"the archive of run {name!r} cannot be read: {_first_line(error)}",
        "the file is damaged or not an SQLite database: restore it from a copy, or check it with "
        "`sqlite3 RUNS_DIR/<run>/archive.db 'PRAGMA integrity_check'`",
        500,
        "corrupt archive",
    )


def _first_line(error: BaseException) -> str:
    text = str(getattr(error, "orig", None) or error)
    return text.splitlines()[0] if text else type(error).__name__


@contextmanager
def open_run(runs_dir: Path, name: str, store: str | None = None) -> Iterator[tuple[Archive, Run]]:
    """The run's archive opened read-only and its Run row, closed on exit: from runs_dir, or from `store`.

    RunNotFound when there is no such run; Unreadable for an archive that cannot be read,
    whether opening it or reading it later fails.
    """
    if store is not None:
        with _open_store(store) as archive:
            try:
                run = archive.get_run(name) if name.strip() else None
            except RunNotFound:
                run = None
            except DBAPIError as error:
                raise unreadable(name, error) from error
            if run is None or run.name != name:
                raise RunNotFound(
                    f"no run named {name!r} in {shown_store(store)}",
                    fix=f"the runs page lists the runs it holds; so does `cambrian runs --store {shown_store(store)}`",
                )
            try:
                yield archive, run
            except DBAPIError as error:
                raise unreadable(name, error) from error
        return
    path = run_path(runs_dir, name)
    try:
        archive = Archive.at(path, readonly=True)
    except ArchiveNotFound as missing:  # removed between the check and the open
        raise RunNotFound(str(missing), fix=missing.fix) from missing
    except (ArchiveError, DBAPIError, sqlite3.DatabaseError) as error:
        raise unreadable(name, error) from error
    try:
        with archive:
            try:
                runs = archive.list_runs()
            except (DBAPIError, sqlite3.DatabaseError) as error:
                raise unreadable(name, error) from error
            run = next((r for r in runs if r.name == name), runs[0] if len(runs) == 1 else None)
            if run is None:
                raise RunNotFound(
                    f"the archive {path} holds no run named {name!r}",
                    fix="open one of the runs it holds: " + ", ".join(r.name for r in runs) if runs else "start one",
                )
            yield archive, run
    except (DBAPIError, sqlite3.DatabaseError) as error:
        raise unreadable(name, error) from error


def check_run(runs_dir: Path, name: str, store: str | None = None) -> None:
    """Nothing when the run exists and its archive reads; RunNotFound or Unreadable (both with a fix) otherwise."""
    with open_run(runs_dir, name, store):
        pass


def run_config(run: Run) -> dict[str, Any]:
    """The run's frozen config as a dict ({} when it is not valid JSON)."""
    try:
        config = json.loads(run.config_json)
    except ValueError:
        return {}
    return config if isinstance(config, dict) else {}


def config_models(config: dict[str, Any]) -> list[str]:
    """The models a run proposes with: fm.model, then fm.models, without repeats."""
    fm = config.get("fm") or {}
    named = [fm.get("model"), *(fm.get("models") or [])]
    return list(dict.fromkeys(str(m) for m in named if m))


@dataclass(frozen=True)
class RunSummary:
    """What the runs page shows of one run. Scores are search-split unless named holdout; cost in USD."""

    name: str
    benchmark: str
    strategy: str
    models: list[str]
    state: str  # RunStatus value: running | stopped | finished | failed
    error: str | None
    agents: int
    counts: dict[str, int]  # AgentStatus value -> agents
    iterations_done: int
    iterations_budget: int | None
    seed_id: int | None
    seed_score: float | None
    seed_holdout: float | None
    best_id: int | None
    best_score: float | None
    best_holdout: float | None
    prompt_tokens: int
    completion_tokens: int
    llm_calls: int
    cost_usd: float
    created: float  # POSIX seconds
    updated: float  # POSIX seconds of the latest change to the run or any of its agents
    last_agent_id: int
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


def summarize_run(archive: Archive, run: Run) -> RunSummary:
    """The run's summary in a handful of aggregate queries (no per-agent objects)."""
    c = _AGENT.c
    with archive.engine.connect() as connection:
        counts = {
            str(getattr(status, "value", status)): int(n)
            for status, n in connection.execute(
                select(c.status, func.count()).where(c.run_id == run.key).group_by(c.status)
            )
        }
        last_id, last_update = connection.execute(
            select(func.max(c.id), func.max(c.updated_at)).where(c.run_id == run.key)
        ).one()
        seed = connection.execute(
            select(c.id, c.score, c.holdout_score).where(c.run_id == run.key, c.iteration == 0).order_by(c.id).limit(1)
        ).first()
    best = archive.best(run.key, 1)
    cost = archive.cost_summary(run.key)
    config = run_config(run)
    budget = (config.get("budget") or {}).get("iterations")
    return RunSummary(
        name=run.name,
        benchmark=run.benchmark,
        strategy=str((config.get("search") or {}).get("strategy", "")),
        models=config_models(config),
        state=RunStatus(run.status).value,
        error=run.error,
        agents=sum(counts.values()),
        counts={s.value: counts.get(s.value, 0) for s in AgentStatus},
        iterations_done=archive.iterations_done(run.key),
        iterations_budget=int(budget) if isinstance(budget, int) else None,
        seed_id=None if seed is None else int(seed[0]),
        seed_score=None if seed is None else seed[1],
        seed_holdout=None if seed is None else seed[2],
        best_id=best[0].id if best else None,
        best_score=best[0].score if best else None,
        best_holdout=best[0].holdout_score if best else None,
        prompt_tokens=cost.prompt_tokens,
        completion_tokens=cost.completion_tokens,
        llm_calls=cost.calls,
        cost_usd=cost.cost_usd,
        created=posix_seconds(run.created_at),
        updated=max(posix_seconds(run.updated_at), posix_seconds(last_update)),
        last_agent_id=int(last_id or 0),
        config=config,
    )


def list_runs(runs_dir: Path, store: str | None = None) -> list[RunSummary | Unreadable]:
    """Every run in runs_dir (or in `store`), by name: its summary, or why its archive cannot be read."""
    if store is not None:
        try:
            with _open_store(store) as archive:
                return [summarize_run(archive, run) for run in sorted(archive.list_runs(), key=lambda r: r.name)]
        except Unreadable as problem:
            return [problem]
        except DBAPIError as error:
            return [unreadable(shown_store(store), error)]
    found: list[RunSummary | Unreadable] = []
    for name in run_names(runs_dir):
        try:
            with open_run(runs_dir, name) as (archive, run):
                found.append(summarize_run(archive, run))
        except Unreadable as problem:
            found.append(problem)
        except RunNotFound as missing:
            found.append(Unreadable(name, str(missing), missing.fix, 404, "no run"))
    return found
