"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import set_schema_version

revision = ${repr(up_revision)}
down_revision = ${repr(down_revision)}
branch_labels = None
depends_on = None


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}
    set_schema_version(int(revision))


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}
    set_schema_version(int(revision) - 1)
