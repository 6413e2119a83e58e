"""Opening the database behind an `Archive`: the engine, SQLite's pragmas and locking, read-only opens.

SQLite runs in WAL mode with synchronous=NORMAL and foreign keys on; writers take the write lock
up front (BEGIN IMMEDIATE) so a read-check-write cannot interleave with another process; a
read-only open uses SQLite's mode=ro and never creates, converts or locks the file.

PostgreSQL (`postgresql+psycopg://user[:password]@host[:port]/database`; a bare `postgresql://` means
psycopg too) gets pool_pre_ping (a connection the server dropped is replaced at checkout, not handed
out), a 10 s connect timeout, and for a read-only open sessions that the server itself keeps
read-only (default_transaction_read_only). A URL that cannot be opened, or a server that cannot be
reached, is an ArchiveError naming the cause and the fix; passwords are never shown.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from sqlalchemy import Engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError
from sqlalchemy.pool import StaticPool
from sqlmodel import create_engine

from cambrian.archive.errors import ArchiveNotFound, ArchiveUnreachable, InvalidStoreURL, NotAnArchive

#: How long a connection waits for another's lock, and a reader for a creator's schema, in seconds.
BUSY_TIMEOUT_S = 10.0


def open_engine(url: str, *, readonly: bool) -> tuple[Engine, str, bool]:
    """(engine, where it is for messages, whether it is SQLite) for SQLAlchemy `url`.

    For SQLite a writable open creates the parent folder; an in-memory database keeps one shared
    connection; `readonly` opens with mode=ro (ArchiveNotFound when the file does not exist).
    """
    parsed = parse_store_url(url)
    sqlite = parsed.get_backend_name() == "sqlite"
    where = parsed.render_as_string(hide_password=True)
    options: dict[str, Any] = {}
    if parsed.get_backend_name() == "postgresql":
        options["pool_pre_ping"] = True
        connect_args: dict[str, Any] = {"connect_timeout": 10}
        if readonly:
            connect_args["options"] = "-c default_transaction_read_only=on"
        options["connect_args"] = connect_args
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
    try:
        engine: Engine = create_engine(parsed, **options)
    except (NoSuchModuleError, ModuleNotFoundError) as error:
        if parsed.get_backend_name() == "postgresql":
            raise InvalidStoreURL(
                f"the archive on PostgreSQL ({where}) needs psycopg, which is not installed: {error}",
                fix="pip install 'cambrian[postgres]'",
            ) from None
        raise InvalidStoreURL(
            f"no database driver for {where}: {error}",
            fix="use sqlite:///PATH or postgresql+psycopg://USER@HOST/DATABASE (with pip install 'cambrian[postgres]')",
        ) from None
    if sqlite:
        _configure_sqlite(engine, readonly=readonly)
    elif engine.dialect.name == "postgresql":
        _configure_postgresql(engine)
    return engine, where, sqlite


#: Where a PostgreSQL write transaction leaves its `CommitCheck` (connection.info): what `Database` asks
#: the server about when the connection breaks during COMMIT (archive/_retry.py).
COMMIT_KEY = "cambrian_commit"
#: Where a connection keeps the token of its last write transaction's mark, deleted by its next one.
_LAST_MARK_KEY = "cambrian_last_mark"


@dataclass(frozen=True)
class CommitCheck:
    """How to tell whether a PostgreSQL write transaction committed: its id (whose status says whether it
    is still in progress) and the token of the mark it inserted (commitmark: present once it committed)."""

    xid: int
    mark: str


def _configure_postgresql(engine: Engine) -> None:
    """BEGIN issued by us, as on SQLite. A write transaction begins, in one round trip (psycopg's own BEGIN
    costs the same), with `BEGIN`, the deletion of this connection's previous commit mark, the insertion of
    its own (a random token) and `SELECT txid_current()`, leaving a `CommitCheck` in connection.info. A
    schema transaction (execution option cambrian_write="schema") begins with BEGIN alone: the commitmark
    table may not exist yet.

    The archive's own read transactions (cambrian_write=False, set by `Database.transaction`) send no BEGIN,
    so no COMMIT either: each statement runs as its own transaction and sees what it would see inside one
    under PostgreSQL's default READ COMMITTED (each statement its own snapshot), and a read costs two round
    trips less (the parent's context read of every candidate among them). Any other connection of the
    engine (a bulk tool's `archive.engine.begin()`, an ORM session) begins with BEGIN as before."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.autocommit = True  # psycopg still sends COMMIT/ROLLBACK for a transaction we began

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        import psycopg

        mode = connection.get_execution_options().get("cambrian_write")
        if mode is False:
            return  # the archive's read: autocommit statements (see above)
        driver = connection.connection.driver_connection
        write = mode is True
        statement = "BEGIN"
        if write:
            mark = secrets.token_hex(16)  # hex only: safe inside the statement's text
            last = connection.info.get(_LAST_MARK_KEY)
            forget = f"DELETE FROM commitmark WHERE token = '{last}'; " if last else ""
            statement = (
                f"BEGIN; {forget}INSERT INTO commitmark (token, created_at) VALUES ('{mark}', now()); "
                "SELECT txid_current()"
            )
        try:
            cursor = driver.execute(statement)  # no parameters: one simple-protocol query
            if write:
                while cursor.nextset():
                    pass  # to the last result: the id
                connection.info[COMMIT_KEY] = CommitCheck(int(cursor.fetchone()[0]), mark)
                connection.info[_LAST_MARK_KEY] = mark
        except psycopg.Error as error:
            # SQLAlchemy wraps what the driver raises in a statement, not in this event: do it here, and
            # drop a connection the server closed, so the next transaction gets a fresh one.
            broken = bool(driver.broken or driver.closed)
            if broken:
                connection.invalidate(error)
            raise DBAPIError.instance(statement, None, error, psycopg.Error, connection_invalidated=broken) from error


def parse_store_url(url: str, *, given_as: str | None = None) -> URL:
    """`url` parsed (a bare postgresql:// takes the psycopg driver Cambrian ships); InvalidStoreURL if it is none,
    naming how it was given where the caller says (`given_as`: --store, CAMBRIAN_STORE, the config's store)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise InvalidStoreURL(
            f"{url!r}{f' ({given_as})' if given_as else ''} is not a database URL",
            fix="write sqlite:///PATH/archive.db or postgresql+psycopg://USER[:PASSWORD]@HOST[:PORT]/DATABASE",
        ) from None
    if parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def unreachable(error: DBAPIError, where: str) -> ArchiveUnreachable:
    """The user-facing form of a failure to connect to the database at `where` (a URL without its password)."""
    cause = str(error.orig or error).strip().splitlines()
    text = " ".join(line.strip() for line in cause[:2])
    lowered = text.lower()
    if "does not exist" in lowered and "database" in lowered:
        name = make_url(where).database
        fix = f"create it (`createdb {name}`, or CREATE DATABASE {name}), or point --store at one that exists"
    elif "password" in lowered or "authentication" in lowered or "role" in lowered:
        fix = "check the user and password in the URL (postgresql+psycopg://USER:PASSWORD@HOST/DATABASE)"
    else:
        fix = (
            "check that the PostgreSQL server is running and reachable at that host and port "
            "(`pg_isready -h HOST -p PORT`), and that the URL is right"
        )
    return ArchiveUnreachable(f"cannot connect to the archive {where}: {text}", fix=fix)


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
