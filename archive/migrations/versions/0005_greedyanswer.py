"""Version 5: the greedyanswer table, the response cache's second key (a greedy question whatever its limit).

Only writers use it: a version-4 archive reads as it stands, and one without the table simply has no
greedy answers to reuse.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-26
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_tables, set_schema_version

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if "greedyanswer" not in existing_tables():
        op.create_table(
            "greedyanswer",
            sa.Column("answer_key", sa.String(), nullable=False),
            sa.Column("request_hash", sa.String(), nullable=False),
            sa.Column("completion_tokens", sa.Integer(), nullable=False),
            sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
            sa.PrimaryKeyConstraint("answer_key"),
        )
    set_schema_version(5)


def downgrade() -> None:
    op.drop_table("greedyanswer")
    set_schema_version(4)
