"""Riding out a database server that goes away: reconnect and run the archive's unit of work again, losing nothing.

A PostgreSQL server that restarts (or a network that drops) breaks every open connection. The archive's work
comes in units of one or a few transactions, each run explicitly through `Database.run` (archive/_database.py;
a public method of `Archive` runs one, `write_batch` one or more), so the unit of retry is the unit of work: on
a disconnect the `Reconnector` waits with backoff (0.1 s doubling to 5 s) until the server answers, reconnects
and calls the unit again, up to a deadline (`Archive(reconnect_s=...)`, 5 minutes by default), logging one
warning per outage and one line when it is over. The search loop, which calls the archive, simply waits
meanwhile. SQLite has no server: its errors are raised at once.

Why calling again cannot lose or double a write:
- A disconnect before COMMIT leaves nothing behind: the server rolls back an open transaction whose
  connection is gone. Running the unit again is the first time its write happens.
- A disconnect *during* COMMIT is the one ambiguous case: the server may have committed before the
  answer was lost (with a crash right after the commit record reached the WAL, it has). Running the
  unit again would then insert a second agent or ledger row, or trip a status guard
  (`finish_evaluation` after evaluating -> evaluated already committed). So on PostgreSQL every write
  transaction inserts a mark of its own (a random token in the commitmark table) and reads its
  transaction id, both at BEGIN in the same round trip, and a COMMIT that fails on a disconnect is
  resolved by asking the server, once it answers again: while `txid_status(xid)` says the id is in
  progress it waits; then the mark decides: there means the unit's work is done and its result
  (computed inside the transaction) is returned as is; absent means nothing happened and the unit runs
  again. (`Database.transaction` and `write_session`, and `_lost_commit.committed`.) So a unit writes in
  one transaction at most, after its reads. The id alone would not do: a server that
  crashed may hand an id it never wrote to its WAL to a new transaction, and if another process commits
  that one before the check, a lost write would read as committed; the mark cannot be another's.
  Measured by tests/archive/test_archive_faults.py, which restarts and crash-restarts the server under a
  writer, and replays a lost COMMIT whose id another transaction committed. A connection's next write
  deletes its previous mark; marks older than a day (killed processes) go at a writable open.
- Guarded statements keep a second run honest anyway: agent status changes are UPDATEs whose WHERE
  names the allowed source statuses, and genomes, cached responses and requests are INSERT ... ON
  CONFLICT DO NOTHING under content-hash keys, so a repeat of those is a no-op.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sqlalchemy.exc import DBAPIError

from cambrian.archive.errors import ArchiveCorrupt, ArchiveUnreachable

_log = logging.getLogger("archive")

#: Seconds an archive keeps trying to reach a database that went away before giving up.
RECONNECT_S = 300.0
#: First and longest pause between attempts, in seconds.
_FIRST_PAUSE_S, _LONGEST_PAUSE_S = 0.1, 5.0

T = TypeVar("T")


def is_disconnect(error: BaseException) -> bool:
    """True for an error that means the server or the connection went away (or aborted us: a deadlock),
    after which the whole transaction can run again: SQLAlchemy's invalidated connection, or a psycopg
    OperationalError."""
    if not isinstance(error, DBAPIError):
        return False
    if error.connection_invalidated:
        return True
    try:
        import psycopg
    except ImportError:  # without the [postgres] extra no PostgreSQL archive opens, so this error is none of its
        return False
    return isinstance(error.orig, psycopg.OperationalError)


class Reconnector:
    """Runs an archive's units of work, calling one again after a disconnect until `deadline_s` has passed.

    A unit called inside a unit runs straight through: the outermost one is retried as a whole (its
    transaction died with the connection). enabled=False (SQLite) runs every unit straight through.
    """

    def __init__(self, *, where: str, deadline_s: float = RECONNECT_S, enabled: bool = True) -> None:
        self.where = where
        self.deadline_s = deadline_s
        self.enabled = enabled
        self._inside = threading.local()  # per thread: inside a call already (nested calls are not retried)

    def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        if not self.enabled:  # SQLite: no server to wait for, but a damaged file to name
            try:
                return function(*args, **kwargs)
            except DBAPIError as error:
                damaged = corrupt(error, self.where)
                if damaged is None:
                    raise
                raise damaged from error
        if getattr(self._inside, "active", False):
            return function(*args, **kwargs)
        self._inside.active = True
        try:
            return self._retrying(function, *args, **kwargs)
        finally:
            self._inside.active = False

    def _retrying(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        first_failure: float | None = None
        pause = _FIRST_PAUSE_S
        while True:
            try:
                result = function(*args, **kwargs)
            except DBAPIError as error:
                if not is_disconnect(error):
                    raise
                now = time.monotonic()
                if first_failure is None:
                    first_failure = now
                    _log.warning(
                        "the archive %s went away (%s); reconnecting and retrying for up to %.0f s",
                        self.where,
                        first_line(error),
                        self.deadline_s,
                    )
                elif now - first_failure > self.deadline_s:
                    raise self.gave_up(error) from error
                time.sleep(pause)
                pause = min(pause * 2, _LONGEST_PAUSE_S)
                continue
            if first_failure is not None:
                _log.warning("the archive %s is back after %.1f s", self.where, time.monotonic() - first_failure)
            return result

    def gave_up(self, error: BaseException) -> ArchiveUnreachable:
        return ArchiveUnreachable(
            f"the archive {self.where} has not answered for {self.deadline_s:.0f} s: {first_line(error)}",
            fix="start the database server again (or fix the network), then `cambrian resume RUN --store URL`: "
            "everything committed is kept",
        )


#: What SQLite says of a file that is not (or no longer) a whole database.
_DAMAGED = ("file is not a database", "database disk image is malformed", "malformed database schema")


def corrupt(error: BaseException, where: str) -> ArchiveCorrupt | None:
    """The ArchiveCorrupt naming the file and the fix, when `error` is SQLite finding `where` damaged."""
    text = first_line(error)
    if not any(words in text for words in _DAMAGED):
        return None
    return ArchiveCorrupt(
        f"the archive {where} is damaged: {text}",
        reason=text,
        fix=f"check it with `sqlite3 {where} 'PRAGMA integrity_check'`; `sqlite3 {where} .recover | sqlite3 NEW.db` "
        "rescues the rows that can still be read (then put NEW.db in its place); other runs are not affected",
    )


def first_line(error: BaseException) -> str:
    text = str(getattr(error, "orig", None) or error).strip()
    return text.splitlines()[0] if text else type(error).__name__
