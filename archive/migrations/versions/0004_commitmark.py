"""Version 4: the commitmark table, where each PostgreSQL write transaction leaves a mark of its own.

After a COMMIT whose answer was lost, the mark says whether that transaction committed; its id could
not after a server crash. Readers never use it: a version-3 archive reads as it stands.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-25
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_tables, set_schema_version

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "commitmark" not in existing_tables():
        op.create_table(
            "commitmark",
            sa.Column("token", sa.String(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("token"),
        )
    set_schema_version(4)


def downgrade() -> None:
    op.drop_table("commitmark")
    set_schema_version(3)
