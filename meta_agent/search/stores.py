"""Where a run's archive lives: its own SQLite file (RUNS_DIR/<name>/archive.db) or a database shared by
many runs (`--store URL`, recorded in RUNS_DIR/<name>/config.json), and opening an existing run by name.

The run's lock, `RUNS_DIR/<run>/run.lock` (`run_lock`): one process searches a run at a time.
Two `cambrian resume`s of one run (or a `run --name` of a run being searched) once both went on, crashed on
the agents they both claimed (`InvalidTransition`) and left the run marked failed. Now the second is refused,
naming the process that holds the run. The lock is an advisory `flock` on the file, so the kernel releases it
when its holder ends however it ends (killed included): a stale lock cannot outlive its process. It guards
the runs of one machine's runs folder; runs kept in a shared store are searched from one machine at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path

from sqlalchemy.engine import make_url

from cambrian.archive.errors import ArchiveOutdated, RunNotFound
from cambrian.archive.models import Run
from cambrian.archive.store import Archive
from cambrian.meta_agent.errors import ConfigError, RunBusy

__all__ = [
    "ARCHIVE_FILE",
    "LOCK_FILE",
    "RUN_FILES",
    "archive_path",
    "delete_run",
    "open_run",
    "run_lock",
    "shown_store",
    "store_in_use",
    "store_of_run",
]

ARCHIVE_FILE = "archive.db"


def archive_path(runs_dir: Path, name: str) -> Path:
    return Path(runs_dir) / name / ARCHIVE_FILE


def store_in_use(archive: Archive, runs_dir: Path, name: str) -> str | None:
    """The URL of the store `archive` is (shared by runs), None when it is the run's own RUNS_DIR/<name>/archive.db."""
    own = f"sqlite:///{archive_path(runs_dir, name).expanduser().resolve()}"
    return None if archive.url == own else archive.url


def shown_store(store: str) -> str:
    """A store URL as messages and suggested commands show it: never with its password."""
    return make_url(store).render_as_string(hide_password=True)


def store_of_run(runs_dir: Path, name: str) -> str | None:
    """The store a run started here keeps its archive in, as RUNS_DIR/<name>/config.json records it (a
    password masked as ***); None for a run in its own SQLite file."""
    try:
        store = json.loads((Path(runs_dir) / name / "config.json").read_text()).get("store")
    except (OSError, ValueError, AttributeError):
        return None
    return store if isinstance(store, str) else None


def open_run(runs_dir: Path, name: str, *, readonly: bool = False, store: str | None = None) -> tuple[Archive, Run]:
    """The archive and Run row of an existing run, by name: in `store` (a database URL shared by many
    runs) if given, else RUNS_DIR/<name>/archive.db (or the store that run's config.json names).

    readonly: for commands that only read: no DDL, no write lock, so a search writing the
    archive meanwhile is never disturbed; an archive from an older Cambrian is refused
    (ArchiveOutdated) instead of upgraded, with `cambrian db upgrade` as the fix. A writable
    open upgrades it.
    """
    path = archive_path(runs_dir, name)
    recorded = None if store or path.exists() else store_of_run(runs_dir, name)
    if recorded is not None and "***" in recorded:
        raise ConfigError(
            f"run {name!r} keeps its archive in {recorded}, whose password is not stored",
            fix=f"set CAMBRIAN_STORE='{recorded.replace('***', 'PASSWORD')}' in the environment (a password on "
            "the command line is refused), or keep the password in ~/.pgpass and pass the URL without it",
        )
    store = store or recorded
    if store is not None:
        return _open_in_store(store, name, readonly=readonly)
    if not path.exists():
        known = sorted(p.parent.name for p in Path(runs_dir).glob(f"*/{ARCHIVE_FILE}"))
        hint = f"known runs in {runs_dir}: {', '.join(known)}" if known else f"no runs in {runs_dir} yet"
        raise ConfigError(
            f"no run named {name!r} in {runs_dir}",
            fix=f"{hint}; `cambrian runs` lists them (use --runs-dir for another folder)",
        )
    try:
        archive = Archive.at(path, readonly=readonly)
    except ArchiveOutdated as outdated:
        outdated.fix = (
            f"upgrade it in place with `cambrian db upgrade {name} --runs-dir {runs_dir}` (every row is kept), "
            "then run this again"
        )
        raise
    try:
        return archive, archive.get_run(name)
    except BaseException:
        archive.close()
        raise


def _open_in_store(store: str, name: str, *, readonly: bool) -> tuple[Archive, Run]:
    shown = shown_store(store)
    try:
        archive = Archive(store, readonly=readonly)
    except ArchiveOutdated as outdated:
        outdated.fix = (
            f"upgrade it in place with `cambrian db upgrade {shown}` (every row is kept), then run this again"
        )
        raise
    try:
        return archive, archive.get_run(name)
    except RunNotFound as missing:
        missing.fix = f"`cambrian runs --store {shown}` lists the runs it holds"
        archive.close()
        raise
    except BaseException:
        archive.close()
        raise


#: What a run's own folder holds besides model server logs: removed with the run.
RUN_FILES = (ARCHIVE_FILE, f"{ARCHIVE_FILE}-wal", f"{ARCHIVE_FILE}-shm", "config.json", "sandbox.json", "run.lock")


def delete_run(runs_dir: Path, name: str, *, store: str | None = None, keep_logs: bool = False) -> int:
    """Delete run `name`: its rows (in its own archive file, which goes whole, or in `store`) and its folder's
    files; returns how many agents it had. keep_logs: leave the model server logs (a failed start's diagnosis)
    and so the folder if any remain. The caller holds the run's lock (`run_lock`)."""
    archive, run = open_run(runs_dir, name, store=store)
    with archive:
        agents = len(archive.agents(run.key))
        if store is not None or store_of_run(runs_dir, name) is not None:
            archive.delete_run(run.key)
    folder = Path(runs_dir) / name
    for file in RUN_FILES:
        (folder / file).unlink(missing_ok=True)
    if not keep_logs:
        for log in folder.glob("server*.log"):
            log.unlink()
    if folder.is_dir() and not any(folder.iterdir()):
        folder.rmdir()
    return agents


LOCK_FILE = "run.lock"


@contextlib.contextmanager
def run_lock(folder: Path, name: str) -> Iterator[None]:
    """Hold the lock of the run kept in `folder` (created if needed) while the block runs; RunBusy, naming the
    holder's pid and host, when another process holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    with open(path, "a+", encoding="utf-8") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise RunBusy(
                f"run {name!r} is being searched now, by {holder}",
                fix=f"let it finish, or stop it (Ctrl-C in its terminal, or `kill -INT PID`), then `cambrian resume "
                f"{name}`; `cambrian status {name}` shows its progress meanwhile",
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
