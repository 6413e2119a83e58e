"""Version 8: islands. agent.island (the agent's home island: the island its proposal drew its parents from) and
the islandmigrant table (an agent that joined another island by migration: which island, from which, and at
which migration round, named by the run's finished proposals).

Old rows read as a run without islands: every agent's island is NULL (a seed's is NULL in any run: it belongs
to every island), and no agent ever migrated.

ADD COLUMN appends, so an upgraded agent table ends with this column exactly like a new one.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_columns, existing_tables, set_schema_version

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "island" not in existing_columns("agent"):
        op.add_column("agent", sa.Column("island", sa.Integer(), nullable=True))
    if "islandmigrant" not in existing_tables():
        op.create_table(
            "islandmigrant",
            sa.Column("agent_id", sa.Integer(), nullable=False),
            sa.Column("island", sa.Integer(), nullable=False),
            sa.Column("run_id", sa.Integer(), nullable=False),
            sa.Column("from_island", sa.Integer(), nullable=False),
            sa.Column("after_proposals", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.ForeignKeyConstraint(["agent_id"], ["agent.id"]),
            sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
            sa.PrimaryKeyConstraint("agent_id", "island"),
        )
        op.create_index("ix_islandmigrant_run_id", "islandmigrant", ["run_id"])
    set_schema_version(8)


def downgrade() -> None:
    op.drop_index("ix_islandmigrant_run_id", "islandmigrant")
    op.drop_table("islandmigrant")
    op.drop_column("agent", "island")
    set_schema_version(7)
