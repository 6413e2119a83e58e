"""`Database`: the database behind an `Archive`, and the retry policy every unit of work runs through.

It holds the engine (`_engine` opens it), the one Core connection the per-candidate path keeps open (a pool
checkout per call costs as much as the statement), the transactions and ORM sessions the archive's
collaborators work in, the check that settles a PostgreSQL COMMIT whose answer was lost (`_lost_commit`),
and the `Reconnector` (`_retry`). A unit of work is a function of one or a few transactions; `run(unit,
...)` calls it, and on PostgreSQL a disconnect reconnects and calls it again until the deadline. Nothing
is retried behind a caller's back: what runs through `run` is retried, what does not is not.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import ParamSpec, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError
from sqlmodel import Session

from cambrian.archive._engine import BUSY_TIMEOUT_S, COMMIT_KEY, CommitCheck, open_engine, unreachable
from cambrian.archive._lost_commit import committed, forget_old_marks
from cambrian.archive._retry import RECONNECT_S, Reconnector, corrupt, is_disconnect
from cambrian.archive.errors import ArchiveReadOnly
from cambrian.archive.schema import SchemaReport, open_schema

P = ParamSpec("P")
T = TypeVar("T")


class Database:
    """One archive's database: its engine, kept connection, transactions and sessions, and retry policy."""

    def __init__(self, url: str, *, readonly: bool = False, reconnect_s: float = RECONNECT_S) -> None:
        """Open the database at SQLAlchemy `url` and check (writable: create or upgrade) its schema.

        As `Archive(url, readonly=..., reconnect_s=...)`, which says what each means and raises.
        """
        self.readonly = readonly
        self.engine, self.where, sqlite = open_engine(url, readonly=readonly)
        self._postgresql = self.engine.dialect.name == "postgresql"
        self._reconnector = Reconnector(where=self.where, deadline_s=reconnect_s, enabled=not sqlite)
        # Write sessions take the SQLite write lock up front (BEGIN IMMEDIATE), so a
        # read-check-write such as a status transition cannot interleave with another process.
        self._write_engine = self.engine.execution_options(cambrian_write=True)
        # The Core path's own connection, kept open. The lock lets any thread use it, one transaction at a time.
        self._connection: Connection | None = None
        self._connection_lock = threading.RLock()
        try:
            self.schema: SchemaReport = open_schema(
                self.transaction, readonly=readonly, where=self.where, wait_for_creator_s=BUSY_TIMEOUT_S
            )
        except DBAPIError as error:
            self.close()
            if sqlite:
                damaged = corrupt(error, self.where)
                if damaged is None:
                    raise
                raise damaged from None
            raise unreachable(error, self.where) from None
        except BaseException:
            self.close()
            raise
        if self._postgresql and not readonly:
            try:
                self.run(forget_old_marks, self.transaction)
            except BaseException:
                self.close()
                raise

    def run(self, unit: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`unit(*args, **kwargs)` under the retry policy: on PostgreSQL a disconnect reconnects and runs it
        again, up to the reconnect deadline (then ArchiveUnreachable); on SQLite a damaged file is
        ArchiveCorrupt. So a unit writes in one transaction at most, after its reads: a lost COMMIT of it is
        settled by its commit mark, and it is never done twice (archive/_retry.py)."""
        return self._reconnector.call(unit, *args, **kwargs)

    @contextmanager
    def transaction(self, *, write: bool, schema: bool = False) -> Iterator[Connection]:
        """One Core transaction on the kept connection: commits on success, rolls back on any exception.

        `write=True` begins with the write lock taken (BEGIN IMMEDIATE on SQLite). `schema=True` (with
        write): the schema step's transaction, which leaves no commit mark on PostgreSQL. Not re-entrant:
        a unit of work inside a transaction applies what it needs to its connection, never opening another.
        """
        if write and self.readonly:
            raise self.refuse_write()
        with self._connection_lock:
            connection = self._connection
            if connection is None or connection.closed or connection.invalidated:
                connection = self._connection = self.engine.connect()
            connection.execution_options(cambrian_write="schema" if write and schema else write)
            if not (write and self._postgresql):
                with connection.begin():
                    yield connection
                return
            transaction = connection.begin()
            try:
                yield connection
            except BaseException:
                if transaction.is_active:
                    transaction.rollback()
                raise
            self._commit(transaction.commit, connection.info.pop(COMMIT_KEY, None))

    @contextmanager
    def read_session(self) -> Iterator[Session]:
        """An ORM session for reading (the rarely called reads keep the ORM for readability)."""
        with Session(self.engine, expire_on_commit=False) as session:
            yield session

    @contextmanager
    def write_session(self) -> Iterator[Session]:
        """One ORM transaction holding the write lock: commits on success, rolls everything back on any exception."""
        if self.readonly:
            raise self.refuse_write()
        with Session(self._write_engine, expire_on_commit=False) as session:
            if not self._postgresql:
                with session.begin():
                    yield session
                return
            session.begin()
            try:
                yield session
                check = session.connection().info.pop(COMMIT_KEY, None)
            except BaseException:
                session.rollback()
                raise
            self._commit(session.commit, check)

    def _commit(self, commit: Callable[[], None], check: CommitCheck | None) -> None:
        """Commit; when the connection breaks during COMMIT, find out from the server whether it committed.

        Committed: return as if nothing happened (the unit's result stands). Not committed: raise the
        disconnect, so `run` calls the unit again.
        """
        try:
            commit()
        except DBAPIError as error:
            if check is None or not is_disconnect(error):
                raise
            if not committed(
                self.engine, check, deadline_s=self._reconnector.deadline_s, gave_up=self._reconnector.gave_up
            ):
                raise

    def refuse_write(self) -> ArchiveReadOnly:
        return ArchiveReadOnly(
            f"the archive {self.where} is open read-only: it stores and changes nothing",
            fix="open it without readonly=True (in the CLI only `run`, `resume`, `eval` and `db upgrade` write)",
        )

    def close(self) -> None:
        """Close every connection (a later transaction would open new ones)."""
        with self._connection_lock:
            if self._connection is not None:
                self._connection.close()
                self._connection = None
        self.engine.dispose()
