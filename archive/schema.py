"""The archive's schema version: what opening an archive creates, upgrades or refuses, through Alembic.

The migrations are Alembic revisions shipped in `cambrian.archive.migrations` (ids "0001", "0002", ...: the
schema versions), run on the archive's own connection with no alembic.ini. The version lives in the
database, the same on SQLite and PostgreSQL:

- `alembic_version` (Alembic's table) names the archive's revision: the version this code goes by;
- `schemaversion` (one row) repeats it as a number, because Cambrian releases before Alembic read
  only that: they then refuse a newer archive (ArchiveTooNew) instead of taking it for an
  unversioned one. Every revision from 2 on writes it.

Archives from before Alembic are mapped onto the revisions: one with a `schemaversion` row of N is
stamped at revision N, then upgraded; one from before versioning (tables, no version) is upgraded
from Alembic's base, where revision 0001 creates only the version-1 tables it lacks.

Opening an archive at the current revision runs no DDL and takes no write lock (two SELECTs).
Creating or upgrading one is a single guarded transaction: the write lock first (on SQLite BEGIN
IMMEDIATE, through the archive's `transaction(write=True)`; on PostgreSQL a transaction-scoped
advisory lock), then the version read again inside it, so of two processes opening the same new or
old archive at once one changes it and the other finds it current. Every migration runs inside that
transaction: on both stores DDL is transactional, so an upgrade applies whole or not at all, and no
table is ever rebuilt (revisions add tables and columns). A read-only open never changes the schema:
it reads an archive from READABLE_FROM on as it stands (later versions only added tables, which read
as empty) and refuses an older one (ArchiveOutdated, fixed by `cambrian db upgrade RUN|URL` or any
writable open), as every open refuses one newer than this code (ArchiveTooNew).

A new archive is made from models.py in one step (create_all, then stamped at the head revision);
tests/archive/test_migrations.py checks that the revisions from an empty database build the same schema.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from sqlalchemy import Connection, Table, func, insert, inspect, select, text
from sqlalchemy.exc import DBAPIError
from sqlmodel import SQLModel

from cambrian.archive.errors import ArchiveOutdated, ArchiveTooNew, NotAnArchive
from cambrian.archive.migrations import alembic_config, revision_of, version_of
from cambrian.archive.models import SchemaVersion, utcnow

__all__ = ["READABLE_FROM", "SCHEMA_VERSION", "UNVERSIONED", "SchemaReport", "open_schema", "read_version"]

#: The version this code creates and reads: the head revision of archive/migrations ("0008").
#: 1: the tables before versioning; 2: agent.repair_note; 3: the llmrequest table; 4: the commitmark table;
#: 5: the greedyanswer table; 6: agent.repeats, .score_spread, .behaves_as, .fm_seconds, evaluation.output_hash;
#: 7: agent.proposal_id and llmcall.proposal_id (FM calls linked to their agent by an explicit id);
#: 8: agent.island and the islandmigrant table (islands with migration).
SCHEMA_VERSION = 8
#: The oldest version a read-only open reads as it stands: the versions after it add nothing a reader
#: selects. Version 8 added an agent column that every read of an agent selects, so older archives need
#: `cambrian db upgrade` (or any writable open) first.
READABLE_FROM = 8
#: The version of an archive written before the version table existed.
UNVERSIONED = 1

_VERSION: Table = SchemaVersion.__table__  # type: ignore[attr-defined]  # SQLModel sets __table__ at runtime
#: Alembic's table naming the archive's revision.
ALEMBIC_TABLE = "alembic_version"
#: Tables every archive has had since version 1: how an unversioned archive is recognised.
_CORE_TABLES = frozenset({"run", "agent"})
#: How often a reader looks again for the schema of an archive being created, in seconds.
_CREATOR_POLL_S = 0.05
#: PostgreSQL advisory lock key that serialises schema changes of one database ("cambrian" in ASCII).
_PG_SCHEMA_LOCK = 0x63616D627269616E

#: One transaction on the archive's connection; write=True takes the write lock first.
Transaction = Callable[..., AbstractContextManager[Connection]]


@dataclass(frozen=True)
class SchemaReport:
    """What opening an archive found in its schema and what it did to it."""

    found: int | None  # the version found (under the write lock, when it changed anything); None: no schema
    version: int  # the version the archive has now
    changes: tuple[str, ...] = ()  # e.g. ("added column agent.repair_note",); empty: no DDL ran


@dataclass(frozen=True)
class _Found:
    """An archive's schema as stored: its version, and whether Alembic's table records it."""

    version: int | None  # None: an empty database
    alembic: bool  # False: written before Alembic (schemaversion only, or unversioned)


def read_version(connection: Connection, where: str) -> int | None:
    """The archive's schema version: its Alembic revision's, else the `schemaversion` row's (written before
    Alembic), UNVERSIONED for an archive from before versioning, None for an empty database.
    NotAnArchive for a database with other tables; ArchiveTooNew for a revision this code does not know."""
    return _inspect(connection, where).version


def _inspect(connection: Connection, where: str) -> _Found:
    tables = set(inspect(connection).get_table_names())
    if ALEMBIC_TABLE in tables:
        revisions = list(connection.execute(text(f"SELECT version_num FROM {ALEMBIC_TABLE}")).scalars())
        if len(revisions) != 1:
            raise NotAnArchive(
                f"{where}: Alembic's version table holds {len(revisions)} revisions ({', '.join(revisions)}), not one",
                fix="restore the archive from a copy, or start a new run",
            )
        version = version_of(revisions[0])
        if version is None:
            raise ArchiveTooNew(
                f"{where} is at Alembic revision {revisions[0]!r}, which this Cambrian does not know",
                fix="open it with the Cambrian (or tool) that wrote it; the archive is unchanged",
            )
        return _Found(version, alembic=True)
    if _VERSION.name in tables:
        version = connection.execute(select(_VERSION.c.version)).scalar()
        if version is None:
            raise NotAnArchive(
                f"{where}: the schema version table is empty", fix="restore the archive from a copy, or start a new run"
            )
        return _Found(int(version), alembic=False)
    if _CORE_TABLES <= tables:
        return _Found(UNVERSIONED, alembic=False)
    if tables:
        raise NotAnArchive(
            f"{where} is not a Cambrian archive (its tables: {', '.join(sorted(tables))})",
            fix="point at a run's archive.db or a Cambrian database (`cambrian runs` lists the runs)",
        )
    return _Found(None, alembic=False)


def open_schema(transaction: Transaction, *, readonly: bool, where: str, wait_for_creator_s: float) -> SchemaReport:
    """Check the archive's schema and, for a writable open, create or upgrade it in one guarded transaction.

    where: the archive's path or URL, for messages. wait_for_creator_s: how long (seconds) a
    read-only open of an empty database waits for a creator's schema to appear (a creator
    makes the file a moment before the transaction that fills it).
    """
    found = _read(transaction, where)
    deadline = time.monotonic() + wait_for_creator_s
    while readonly and found.version is None and time.monotonic() < deadline:
        time.sleep(_CREATOR_POLL_S)
        found = _read(transaction, where)
    version = found.version
    if version is not None and version > SCHEMA_VERSION:
        raise _too_new(version, where)
    if version == SCHEMA_VERSION and (found.alembic or readonly):
        return SchemaReport(version, SCHEMA_VERSION)
    if readonly and version is not None and version >= READABLE_FROM:
        return SchemaReport(version, version)  # read as it stands: what later versions added reads as absent
    if readonly:
        if version is None:
            raise NotAnArchive(
                f"{where} holds no archive: the database is empty",
                fix="check the path or URL; a writable open (`cambrian run`, or Archive(url) in Python) "
                "creates an archive",
            )
        raise ArchiveOutdated(
            f"{where} has schema version {version}; this Cambrian reads version {SCHEMA_VERSION}, "
            "and a read-only open never upgrades",
            found=version,
            needed=SCHEMA_VERSION,
            fix="upgrade it in place with `cambrian db upgrade RUN` (or `cambrian db upgrade URL`; every row is "
            "kept; any writable open, such as `cambrian resume RUN`, upgrades it too)",
        )
    try:
        # schema=True: no commit mark (the table may not exist yet); a COMMIT whose answer is lost raises,
        # and the version read below tells whether it took.
        with transaction(write=True, schema=True) as connection:
            if connection.dialect.name == "postgresql":
                connection.execute(select(func.pg_advisory_xact_lock(_PG_SCHEMA_LOCK)))
            # Again under the lock: another process may have created or upgraded it meanwhile.
            found = _inspect(connection, where)
            if found.version is not None and found.version > SCHEMA_VERSION:
                raise _too_new(found.version, where)
            changes = _bring_up_to_date(connection, found)
    except DBAPIError:
        # A backend whose lock a concurrent creator's DDL slipped past: its schema serves as well as ours.
        if _read(transaction, where) != _Found(SCHEMA_VERSION, alembic=True):
            raise
        return SchemaReport(SCHEMA_VERSION, SCHEMA_VERSION)
    return SchemaReport(found.version, SCHEMA_VERSION, tuple(changes))


def _read(transaction: Transaction, where: str) -> _Found:
    with transaction(write=False) as connection:
        return _inspect(connection, where)


def _too_new(found: int, where: str) -> ArchiveTooNew:
    return ArchiveTooNew(
        f"{where} has schema version {found}, newer than this Cambrian knows (version {SCHEMA_VERSION})",
        fix="upgrade Cambrian (update the checkout or package) to the release that wrote it; the archive is unchanged",
    )


def _bring_up_to_date(connection: Connection, found: _Found) -> list[str]:
    """Create the schema (empty database), or stamp an archive from before Alembic and run the revisions after it."""
    from alembic import command  # here: opening an archive at the current version needs no Alembic (0.14 s)

    if found == _Found(SCHEMA_VERSION, alembic=True):
        return []
    config = alembic_config(connection)
    if found.version is None:
        SQLModel.metadata.create_all(connection, checkfirst=False)  # under the lock, with no table there
        connection.execute(insert(_VERSION), {"id": 1, "version": SCHEMA_VERSION, "updated_at": utcnow()})
        command.stamp(config, revision_of(SCHEMA_VERSION))
        return [f"created the schema (version {SCHEMA_VERSION})"]
    changes = []
    if not found.alembic and found.version > UNVERSIONED:
        # Written by a Cambrian from before Alembic: its schemaversion row says which revision it is at.
        # (An unversioned archive starts from Alembic's base: revision 0001 creates what it lacks.)
        command.stamp(config, revision_of(found.version))
        changes.append(f"recorded its version {found.version} as Alembic revision {revision_of(found.version)}")
    before = _layout(connection)
    command.upgrade(config, revision_of(SCHEMA_VERSION))
    return changes + _changes(before, _layout(connection))


def _layout(connection: Connection) -> dict[str, list[str]]:
    """table -> its column names, in order (what an upgrade's report compares)."""
    inspector = inspect(connection)
    return {table: [c["name"] for c in inspector.get_columns(table)] for table in inspector.get_table_names()}


def _changes(before: dict[str, list[str]], after: dict[str, list[str]]) -> list[str]:
    """What the migrations changed, in words: tables created, then columns added."""
    created = [f"created table {table}" for table in after if table not in before and table != ALEMBIC_TABLE]
    added = [
        f"added column {table}.{column}"
        for table, columns in after.items()
        if table in before
        for column in columns
        if column not in before[table]
    ]
    return created + added
