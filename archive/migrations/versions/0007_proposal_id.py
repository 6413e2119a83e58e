"""Version 7: an explicit proposal id. agent.proposal_id names the proposal that made an agent, and
llmcall.proposal_id the proposal an FM call was made for (its repairs, a diagnosis and a parent agent writing
its child included), so the lineage joins a child to its FM calls by that id, not by "the run's unattributed
calls of this iteration" (a rule that depended on when the calls and the child were written).

Old rows keep the link that rule gave them, once, here: every agent that made FM calls gets the proposal id
"legacy-<agent id>", and so do the calls linked to it, except its own calls under evaluation (purpose
"agent"), which belong to no proposal. Calls the old rule never linked (a run killed between a proposal's
calls and its child) keep no proposal: nothing links them later.

ADD COLUMN appends, so an upgraded table ends with these columns exactly like a new one.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_columns, set_schema_version

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

#: The prefix of the proposal ids given at upgrade to links the old rule made.
LEGACY_PREFIX = "legacy-"
#: FM calls an agent makes itself while it is evaluated: linked by agent id, part of no proposal.
_AGENT_PURPOSES = ("agent",)


def upgrade() -> None:
    if "proposal_id" not in existing_columns("agent"):
        op.add_column("agent", sa.Column("proposal_id", sa.String(), nullable=True))
        op.create_index("ix_agent_proposal_id", "agent", ["proposal_id"])
    if "proposal_id" not in existing_columns("llmcall"):
        op.add_column("llmcall", sa.Column("proposal_id", sa.String(), nullable=True))
        op.create_index("ix_llmcall_proposal_id", "llmcall", ["proposal_id"])
    agent = sa.table("agent", sa.column("id", sa.Integer), sa.column("proposal_id", sa.String))
    call = sa.table(
        "llmcall",
        sa.column("agent_id", sa.Integer),
        sa.column("purpose", sa.String),
        sa.column("proposal_id", sa.String),
    )
    legacy = sa.literal(LEGACY_PREFIX) + sa.cast(call.c.agent_id, sa.String)
    proposal_calls = sa.and_(call.c.agent_id.is_not(None), call.c.purpose.not_in(_AGENT_PURPOSES))
    op.execute(call.update().where(proposal_calls, call.c.proposal_id.is_(None)).values(proposal_id=legacy))
    linked = sa.select(call.c.agent_id).where(proposal_calls)
    op.execute(
        agent.update()
        .where(agent.c.id.in_(linked), agent.c.proposal_id.is_(None))
        .values(proposal_id=sa.literal(LEGACY_PREFIX) + sa.cast(agent.c.id, sa.String))
    )
    set_schema_version(7)


def downgrade() -> None:
    op.drop_index("ix_llmcall_proposal_id", "llmcall")
    op.drop_column("llmcall", "proposal_id")
    op.drop_index("ix_agent_proposal_id", "agent")
    op.drop_column("agent", "proposal_id")
    set_schema_version(6)
