"""Version 2: agent.repair_note (what the static check repaired in a child) and the schemaversion table.

ADD COLUMN appends, so an upgraded agent table ends with repair_note exactly like a new one.

Revision ID: 0002
Revises: 0001
Create Date: 2025-06-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_columns, existing_tables, set_schema_version

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "repair_note" not in existing_columns("agent"):
        op.add_column("agent", sa.Column("repair_note", sa.String(), nullable=True))
    if "schemaversion" not in existing_tables():
        op.create_table(
            "schemaversion",
            sa.Column("id", sa.Integer(), nullable=False),
            sa.Column("version", sa.Integer(), nullable=False),
            sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("id"),
        )
    set_schema_version(2)


def downgrade() -> None:
    op.drop_table("schemaversion")
    op.drop_column("agent", "repair_note")
