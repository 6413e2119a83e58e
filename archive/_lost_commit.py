"""A PostgreSQL COMMIT whose answer was lost: did it commit?

Every write transaction on PostgreSQL begins by inserting a mark of its own (a random token) and reading its
transaction id (archive/_engine.py leaves both in a `CommitCheck`). When the connection breaks during
COMMIT, `committed` asks the server on a fresh connection; `Database` then returns as if nothing happened
(committed) or runs the unit of work again (archive/_retry.py). `forget_old_marks` deletes the marks that killed
processes left behind.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import timedelta

from sqlalchemy import Connection, Engine, delete, text
from sqlalchemy.exc import DBAPIError
from sqlmodel import col, select

from cambrian.archive._engine import CommitCheck
from cambrian.archive._retry import is_disconnect
from cambrian.archive.models import CommitMark, utcnow

#: Whether a transaction is still in progress, and whether it committed (its commit mark is there).
_TXID_STATUS = text("SELECT txid_status(:xid)")
_MARK_FOUND = text("SELECT 1 FROM commitmark WHERE token = :token")
#: Commit marks older than this are taken for those of killed processes (a lost COMMIT is resolved within
#: the reconnect deadline, minutes): a writable open on PostgreSQL deletes them.
MARK_RETENTION_S = 86_400


def committed(
    engine: Engine, check: CommitCheck, *, deadline_s: float, gave_up: Callable[[BaseException], Exception]
) -> bool:
    """Whether the write transaction of `check` committed, asking (on a fresh connection) until the server
    answers: once its id is no longer in progress, by whether its commit mark is there. The id alone could
    lie: a server that crashed may hand an id it never logged to a new transaction, which may commit before
    this asks. Past `deadline_s`, raises what `gave_up` makes of the last failure."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            with engine.connect() as connection:
                try:
                    status = connection.execute(_TXID_STATUS, {"xid": check.xid}).scalar()
                except DBAPIError as error:
                    if "in the future" in str(error.orig):
                        return False  # a crashed server never logged the id: it left nothing behind
                    raise
                if status != "in progress":
                    return connection.execute(_MARK_FOUND, {"token": check.mark}).first() is not None
        except DBAPIError as error:
            if not is_disconnect(error) or time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise gave_up(RuntimeError(f"transaction {check.xid} still in progress"))
        time.sleep(0.1)


def forget_old_marks(transaction: Callable[..., AbstractContextManager[Connection]]) -> None:
    """Delete the commit marks of write transactions older than MARK_RETENTION_S (left by killed processes or
    broken connections; a live connection deletes its own with its next write), in the archive's
    `transaction`s. Looked for first: an open with none to delete writes nothing."""
    old = col(CommitMark.created_at) < utcnow() - timedelta(seconds=MARK_RETENTION_S)
    with transaction(write=False) as connection:
        if connection.execute(select(CommitMark.token).where(old).limit(1)).first() is None:
            return
    with transaction(write=True) as connection:
        connection.execute(delete(CommitMark).where(old))
