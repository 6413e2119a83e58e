"""Opening the database behind an `Archive`: the engine, SQLite's pragmas and locking, read-only opens.

SQLite runs in WAL mode with synchronous=NORMAL and foreign keys on; writers take the write lock
up front (BEGIN IMMEDIATE) so a read-check-write cannot interleave with another process; a
read-only open uses SQLite's mode=ro and never creates, converts or locks the file. Any other
SQLAlchemy URL (PostgreSQL) opens as given.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.pool import StaticPool
from sqlmodel import create_engine

from archive.errors import ArchiveNotFound, NotAnArchive

#: How long a connection waits for another's lock, and a reader for a creator's schema, in seconds.
BUSY_TIMEOUT_S = 10.0


def open_engine(url: str, *, readonly: bool) -> tuple[Engine, str, bool]:
    """(engine, where it is for messages, whether it is SQLite) for SQLAlchemy `url`.

    For SQLite a writable open creates the parent folder; an in-memory database keeps one shared
    connection; `readonly` opens with mode=ro (ArchiveNotFound when the file does not exist).
    """
    parsed = make_url(url)
    sqlite = parsed.get_backend_name() == "sqlite"
    where = parsed.render_as_string(hide_password=True)
    options: dict[str, Any] = {}
    if sqlite:
        database = parsed.database or ""
        in_memory = database in ("", ":memory:") or parsed.query.get("mode") == "memory"
        if not in_memory and not database.startswith("file:"):
            where = str(Path(database).expanduser())
        if readonly:
            # SQLite enforces it too; elsewhere (PostgreSQL) the archive's own guard does.
            parsed = _read_only_sqlite_url(parsed, in_memory=in_memory)
        elif in_memory:
            # One shared connection, or each connection would see its own empty database.
            options["poolclass"] = StaticPool
        elif not database.startswith("file:"):
            Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        options["connect_args"] = {"check_same_thread": False}
    engine: Engine = create_engine(parsed, **options)
    if sqlite:
        _configure_sqlite(engine, readonly=readonly)
    return engine, where, sqlite


def _configure_sqlite(engine: Engine, *, readonly: bool) -> None:
    """Per-connection pragmas, and BEGIN issued by us so writers can take the lock up front.

    A reader's connections set only the busy timeout: journal_mode=WAL would be a write on a
    file not yet in WAL mode, and the writer sets it anyway.
    """
    busy_timeout = f"busy_timeout={int(BUSY_TIMEOUT_S * 1000)}"
    writer = ("journal_mode=WAL", "synchronous=NORMAL", "foreign_keys=ON")
    pragmas = (busy_timeout,) if readonly else (busy_timeout, *writer)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # The driver's own implicit BEGIN would start transactions only at the first write,
        # after our status checks had read: isolation_level=None hands BEGIN to `_on_begin`.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        for pragma in pragmas:
            _pragma(cursor, pragma)
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        write = connection.get_execution_options().get("cambrian_write", False)
        # Straight to the driver: SQLAlchemy's statement machinery would double the cost
        # of a short transaction, and BEGIN needs none of it.
        connection.connection.driver_connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")


def _pragma(cursor: Any, pragma: str) -> None:
    """Run one PRAGMA, retrying while another process holds the lock it needs, up to the busy timeout.

    `journal_mode=WAL` on a file another process is creating needs that process's lock, and SQLite
    answers "database is locked" at once rather than calling the busy handler (measured: one of three
    processes opening a new archive together failed this way about once in six rounds).
    """
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    while True:
        try:
            cursor.execute(f"PRAGMA {pragma}")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def _read_only_sqlite_url(url: URL, *, in_memory: bool) -> URL:
    """`url` opened with SQLite's mode=ro; ArchiveNotFound when its file does not exist.

    Why mode=ro rather than PRAGMA query_only: SQLite then cannot write the file at all
    (query_only still lets `PRAGMA journal_mode=DELETE` change it, and a query_only connection
    closing last checkpoints the WAL into it), and it refuses a missing file instead of creating
    one. Measured against a live WAL writer (committing continuously, closing and reopening, and
    creating the file while readers polled it): zero errors on either side. A mode=ro reader may
    create an empty -wal/-shm beside the file (the WAL index must live somewhere); it never
    takes the write lock.
    """
    if in_memory:
        raise NotAnArchive(
            "an in-memory database opened read-only is always empty",
            fix="open an archive file read-only, or open the in-memory database without readonly=True",
        )
    database = url.database or ""
    if database.startswith("file:"):  # already a URI filename (uri=true): add the mode
        return url.update_query_dict({"mode": "ro"})
    path = Path(database).expanduser().resolve()
    if not path.is_file():
        raise ArchiveNotFound(
            f"no archive file at {path}",
            fix="check the path: a run's archive is RUNS_DIR/<run>/archive.db (`cambrian runs` lists them); "
            "a read-only open never creates one, a writable open (`cambrian run`) does",
        )
    return url.set(database=f"file:{quote(str(path))}", query={**url.query, "mode": "ro", "uri": "true"})
