"""The archive's schema version: what opening an archive creates, upgrades or refuses.

The version lives in the database (the one-row `schemaversion` table), so it works the same
on every backend. Opening an archive at the current version runs no DDL and takes no write
lock. Creating or upgrading one is a single guarded transaction: the write lock first (on
SQLite BEGIN IMMEDIATE, through the archive's `transaction(write=True)`), then the version
read again inside it, so of two processes opening the same new or old archive at once one
changes it and the other finds it current. A read-only open never changes the schema: it
reads an archive from READABLE_FROM on as it stands (later versions only added tables, which read
as empty) and refuses an older one (ArchiveOutdated), as every open refuses one newer than this code
(ArchiveTooNew).

Changing a table in models.py means: bump SCHEMA_VERSION and add to `_MIGRATIONS` the step
that brings an archive of the previous version to it. Steps are additive (new columns, new
tables) and add only what is missing, since an earlier step may have created a table from the
current models already.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy import Connection, Table, delete, insert, inspect, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.schema import CreateColumn
from sqlmodel import SQLModel

from archive.errors import ArchiveOutdated, ArchiveTooNew, NotAnArchive
from archive.models import Agent, SchemaVersion, utcnow

__all__ = ["READABLE_FROM", "SCHEMA_VERSION", "UNVERSIONED", "SchemaReport", "open_schema", "read_version"]

#: The version this code creates and reads. 1: the tables before versioning; 2: agent.repair_note;
#: 3: the llmrequest table (the messages of every FM call).
SCHEMA_VERSION = 3
#: The oldest version a read-only open reads as it stands: the versions after it only added tables a
#: reader does without (3: llmrequest, so the calls of a version-2 archive read as "prompt not recorded").
#: Older archives lack columns readers select, and need `cambrian db upgrade`.
READABLE_FROM = 2
#: The version of an archive written before the version table existed.
UNVERSIONED = 1

_VERSION: Table = SchemaVersion.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
_AGENT: Table = Agent.__table__  # type: ignore[attr-defined]  # as above
#: Tables every archive has had since version 1: how an unversioned archive is recognised.
_CORE_TABLES = frozenset({"run", "agent"})
#: How often a reader looks again for the schema of an archive being created, in seconds.
_CREATOR_POLL_S = 0.05

#: One transaction on the archive's connection; write=True takes the write lock first.
Transaction = Callable[..., AbstractContextManager[Connection]]


@dataclass(frozen=True)
class SchemaReport:
    """What opening an archive found in its schema and what it did to it."""

    found: int | None  # the version found (under the write lock, when it changed anything); None: no schema
    version: int  # the version the archive has now
    changes: tuple[str, ...] = ()  # e.g. ("added column agent.repair_note",); empty: no DDL ran


def read_version(connection: Connection, where: str) -> int | None:
    """The archive's schema version: the stored one, UNVERSIONED for an archive from before
    versioning, None for an empty database. NotAnArchive for a database with other tables."""
    tables = set(inspect(connection).get_table_names())
    if _VERSION.name in tables:
        version = connection.execute(select(_VERSION.c.version)).scalar()
        if version is None:
            raise NotAnArchive(
                f"{where}: the schema version table is empty", fix="restore the archive from a copy, or start a new run"
            )
        return int(version)
    if _CORE_TABLES <= tables:
        return UNVERSIONED
    if tables:
        raise NotAnArchive(
            f"{where} is not a Cambrian archive (its tables: {', '.join(sorted(tables))})",
            fix="point at a run's archive.db (`cambrian runs` lists the runs)",
        )
    return None


def open_schema(transaction: Transaction, *, readonly: bool, where: str, wait_for_creator_s: float) -> SchemaReport:
    """Check the archive's schema and, for a writable open, create or upgrade it in one guarded transaction.

    where: the archive's path or URL, for messages. wait_for_creator_s: how long (seconds) a
    read-only open of an empty database waits for a creator's schema to appear (a creator
    makes the file a moment before the transaction that fills it).
    """
    found = _read_version(transaction, where)
    deadline = time.monotonic() + wait_for_creator_s
    while readonly and found is None and time.monotonic() < deadline:
        time.sleep(_CREATOR_POLL_S)
        found = _read_version(transaction, where)
    if found == SCHEMA_VERSION:
        return SchemaReport(found, SCHEMA_VERSION)
    if found is not None and found > SCHEMA_VERSION:
        raise _too_new(found, where)
    if readonly and found is not None and found >= READABLE_FROM:
        return SchemaReport(found, found)  # read as it stands: what later versions added reads as absent
    if readonly:
        if found is None:
            raise NotAnArchive(
                f"{where} holds no archive: the database is empty",
                fix="check the path; a writable open (`cambrian run`, or Archive(url) in Python) creates an archive",
            )
        raise ArchiveOutdated(
            f"{where} has schema version {found}; this Cambrian reads version {SCHEMA_VERSION}, "
            "and a read-only open never upgrades",
            found=found,
            needed=SCHEMA_VERSION,
            fix="upgrade it in place with `cambrian db upgrade RUN` (every row is kept; any writable open, "
            "such as `cambrian resume RUN`, upgrades it too)",
        )
    try:
        with transaction(write=True) as connection:
            # Again under the lock: another process may have created or upgraded it meanwhile.
            found = read_version(connection, where)
            if found is not None and found > SCHEMA_VERSION:
                raise _too_new(found, where)
            changes = _bring_up_to_date(connection, found)
    except DBAPIError:
        # Backends without a lock taken up front (SQLite has one) let a concurrent creator's DDL
        # win between our read and ours: its schema serves as well as ours would have.
        if _read_version(transaction, where) != SCHEMA_VERSION:
            raise
        return SchemaReport(SCHEMA_VERSION, SCHEMA_VERSION)
    return SchemaReport(found, SCHEMA_VERSION, tuple(changes))


def _read_version(transaction: Transaction, where: str) -> int | None:
    with transaction(write=False) as connection:
        return read_version(connection, where)


def _too_new(found: int, where: str) -> ArchiveTooNew:
    return ArchiveTooNew(
        f"{where} has schema version {found}, newer than this Cambrian knows (version {SCHEMA_VERSION})",
        fix="upgrade Cambrian (update the checkout or package) to the release that wrote it; the archive is unchanged",
    )


def _bring_up_to_date(connection: Connection, found: int | None) -> list[str]:
    """Create the schema (found None) or run the migrations after `found`; then store SCHEMA_VERSION."""
    if found == SCHEMA_VERSION:
        return []
    if found is None:
        SQLModel.metadata.create_all(connection, checkfirst=False)  # under the lock, with no table there
        changes = [f"created the schema (version {SCHEMA_VERSION})"]
    else:
        changes = []
        for version in range(found + 1, SCHEMA_VERSION + 1):
            changes += _MIGRATIONS[version](connection)
    connection.execute(delete(_VERSION))
    connection.execute(insert(_VERSION), {"id": 1, "version": SCHEMA_VERSION, "updated_at": utcnow()})
    return changes


def _create_missing_tables(connection: Connection) -> list[str]:
    existing = set(inspect(connection).get_table_names())
    missing = [table for table in SQLModel.metadata.sorted_tables if table.name not in existing]
    SQLModel.metadata.create_all(connection, tables=missing)
    return [f"created table {table.name}" for table in missing]


def _add_column(connection: Connection, table: Table, name: str) -> list[str]:
    """ALTER TABLE ... ADD COLUMN `name` as models.py declares it, unless the table has it already."""
    if name in {column["name"] for column in inspect(connection).get_columns(table.name)}:
        return []
    table_sql = connection.dialect.identifier_preparer.format_table(table)
    column_sql = CreateColumn(table.c[name]).compile(dialect=connection.dialect)
    connection.exec_driver_sql(f"ALTER TABLE {table_sql} ADD COLUMN {column_sql}")
    return [f"added column {table.name}.{name}"]


def _to_version_2(connection: Connection) -> list[str]:
    """1 -> 2: the tables every open of version 1 created when missing (now also the version table),
    and agent.repair_note."""
    return _create_missing_tables(connection) + _add_column(connection, _AGENT, "repair_note")


def _to_version_3(connection: Connection) -> list[str]:
    """2 -> 3: the llmrequest table. Calls made before it have no request row: "not recorded"."""
    return _create_missing_tables(connection)


#: version -> the step that brings an archive of the version before it up to it.
_MIGRATIONS: dict[int, Callable[[Connection], list[str]]] = {2: _to_version_2, 3: _to_version_3}
