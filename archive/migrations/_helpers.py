"""What the revisions share: which tables exist, and the schemaversion row older Cambrians read."""

from __future__ import annotations

from datetime import datetime, timezone

import sqlalchemy as sa
from alembic import op

_SCHEMA_VERSION = sa.table(
    "schemaversion",
    sa.column("id", sa.Integer),
    sa.column("version", sa.Integer),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)


def existing_tables() -> set[str]:
    """The tables of the database being migrated."""
    return set(sa.inspect(op.get_bind()).get_table_names())


def existing_columns(table: str) -> set[str]:
    return {column["name"] for column in sa.inspect(op.get_bind()).get_columns(table)}


def set_schema_version(version: int) -> None:
    """Write `version` into the schemaversion table (Cambrian releases before Alembic read only that)."""
    if "schemaversion" not in existing_tables():
        return  # version 1 had no such table
    op.execute(_SCHEMA_VERSION.delete())
    op.execute(_SCHEMA_VERSION.insert().values(id=1, version=version, updated_at=datetime.now(timezone.utc)))
