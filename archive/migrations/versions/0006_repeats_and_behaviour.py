"""Version 6: scores that mean what they say. agent.repeats and agent.score_spread (an agent scored by the mean
of several evaluations, and their standard deviation), agent.behaves_as (the parent whose outputs a child
repeats on every task: a behavioural no-op), evaluation.output_hash (what a task run returned, hashed) and
agent.fm_seconds (the wall time of the FM calls that made the agent: what the operator bandit pays).

ADD COLUMN appends, so an upgraded table ends with these columns exactly like a new one. Old rows read as
evaluated once, with no spread, no no-op verdict and no output hash.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-27
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_columns, set_schema_version

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    agent = existing_columns("agent")
    if "repeats" not in agent:
        op.add_column("agent", sa.Column("repeats", sa.Integer(), nullable=False, server_default="1"))
    if "score_spread" not in agent:
        op.add_column("agent", sa.Column("score_spread", sa.Float(), nullable=True))
    if "behaves_as" not in agent:
        op.add_column("agent", sa.Column("behaves_as", sa.Integer(), nullable=True))
    if "fm_seconds" not in agent:
        op.add_column("agent", sa.Column("fm_seconds", sa.Float(), nullable=False, server_default="0"))
    if "output_hash" not in existing_columns("evaluation"):
        op.add_column("evaluation", sa.Column("output_hash", sa.String(), nullable=True))
    set_schema_version(6)


def downgrade() -> None:
    op.drop_column("evaluation", "output_hash")
    op.drop_column("agent", "fm_seconds")
    op.drop_column("agent", "behaves_as")
    op.drop_column("agent", "score_spread")
    op.drop_column("agent", "repeats")
    set_schema_version(5)
