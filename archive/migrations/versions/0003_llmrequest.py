"""Version 3: the llmrequest table, the messages of every FM call keyed by request hash.

Calls made before it have no request row: their prompts read as "not recorded".

Revision ID: 0003
Revises: 0002
Create Date: 2025-11-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_tables, set_schema_version

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "llmrequest" not in existing_tables():
        op.create_table(
            "llmrequest",
            sa.Column("request_hash", sa.String(), nullable=False),
            sa.Column("model", sa.String(), nullable=False),
            sa.Column("messages", sa.String(), nullable=False),
            sa.Column("params", sa.String(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("request_hash"),
        )
    set_schema_version(3)


def downgrade() -> None:
    op.drop_table("llmrequest")
    set_schema_version(2)
