"""The archive's Alembic migrations (SQLite and PostgreSQL), shipped with the package and run from code.

`cambrian.archive.schema` drives them on the archive's own connection (no alembic.ini at run time):
`alembic_config(connection)` is the Config it hands to `alembic.command`; `env.py` runs the
migrations on that connection, inside the caller's transaction. Revision ids are the schema
versions, four digits ("0001", "0002", ...), so a revision names the version it brings:

- 0001: the tables before versioning (each created where missing: the oldest archives lack some);
- 0002: agent.repair_note and the schemaversion table;
- 0003: the llmrequest table (the messages of every FM call);
- 0004: the commitmark table; 0005: the greedyanswer table;
- 0006: agent.repeats, agent.score_spread, agent.behaves_as, agent.fm_seconds and evaluation.output_hash.
- 0007: agent.proposal_id and llmcall.proposal_id (old links kept once, as "legacy-<agent id>").
- 0008: agent.island and the islandmigrant table (islands with migration; old agents on no island).

Each revision also writes its version into the one-row `schemaversion` table, which Cambrian
releases from before Alembic read: they then refuse a newer archive instead of mistaking it for
an unversioned one. Writing a revision: copy the newest in versions/, bump the id, freeze the
DDL it needs (never import models.py there: the models move on, a revision must not), change
models.py to match, bump `cambrian.archive.schema.SCHEMA_VERSION`; tests/archive/test_migrations.py checks
that the revisions from an empty database build exactly what models.py declares, on both stores.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported where used: opening an archive at the current version needs no Alembic (0.14 s)
    from alembic.config import Config
    from alembic.script import ScriptDirectory

__all__ = ["MIGRATIONS_DIR", "alembic_config", "revision_of", "script_directory", "version_of"]

#: The folder holding env.py and versions/.
MIGRATIONS_DIR = Path(__file__).resolve().parent


def alembic_config(connection: Any = None, *, url: str | None = None) -> Config:
    """An Alembic Config for the archive's migrations: on `connection` (run inside its transaction) or `url`.

    For developers too: `alembic.command.history(alembic_config())` lists the revisions, and
    `alembic.command.revision(alembic_config(url=...), message=...)` starts a new one.
    """
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))  # configparser interpolates '%'
    config.attributes["connection"] = connection
    return config


def script_directory() -> ScriptDirectory:
    """The revisions shipped with this Cambrian."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory(str(MIGRATIONS_DIR))


def revision_of(version: int) -> str:
    """The Alembic revision id of schema `version`: 3 -> "0003"."""
    return f"{version:04d}"


def version_of(revision: str) -> int | None:
    """The schema version a revision id names ("0003" -> 3); None for an id that is not one of ours."""
    return int(revision) if revision.isdigit() else None
