"""Version 1: the tables Cambrian wrote before its schema was versioned.

Each table is created only where it is missing: an archive from before versioning is upgraded
from Alembic's base through this revision, and the oldest ones lack agentdescriptor and
llmresponse. The DDL is frozen here as version 1 had it (agent without repair_note).

Revision ID: 0001
Revises:
Create Date: 2025-01-01
"""

from __future__ import annotations

from collections.abc import Callable

import sqlalchemy as sa
from alembic import op

from cambrian.archive.migrations._helpers import existing_tables

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_RUN_STATUS = sa.Enum("running", "stopped", "finished", "failed", name="runstatus")
_AGENT_STATUS = sa.Enum("proposed", "evaluating", "evaluated", "invalid", "failed", name="agentstatus")


def _when() -> sa.Column:
    return sa.Column("created_at", sa.DateTime(timezone=True), nullable=False)


def _run() -> None:
    op.create_table(
        "run",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("benchmark", sa.String(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=False),
        sa.Column("config_json", sa.String(), nullable=False),
        sa.Column("status", _RUN_STATUS, nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("cambrian_version", sa.String(), nullable=False),
        _when(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_run_name", "run", ["name"], unique=True)


def _genome() -> None:
    op.create_table(
        "genome",
        sa.Column("hash", sa.String(), nullable=False),
        sa.Column("entry", sa.String(), nullable=False),
        sa.Column("n_files", sa.Integer(), nullable=False),
        sa.Column("n_bytes", sa.Integer(), nullable=False),
        _when(),
        sa.PrimaryKeyConstraint("hash"),
    )


def _genomefile() -> None:
    op.create_table(
        "genomefile",
        sa.Column("genome_hash", sa.String(), nullable=False),
        sa.Column("path", sa.String(), nullable=False),
        sa.Column("text", sa.String(), nullable=False),
        sa.ForeignKeyConstraint(["genome_hash"], ["genome.hash"]),
        sa.PrimaryKeyConstraint("genome_hash", "path"),
    )


def _llmresponse() -> None:
    op.create_table(
        "llmresponse",
        sa.Column("request_hash", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("text", sa.String(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        _when(),
        sa.PrimaryKeyConstraint("request_hash"),
    )


def _agent() -> None:
    op.create_table(
        "agent",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=False),
        sa.Column("genome_hash", sa.String(), nullable=True),
        sa.Column("parent_id", sa.Integer(), nullable=True),
        sa.Column("second_parent_id", sa.Integer(), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("operator", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column("status", _AGENT_STATUS, nullable=False),
        sa.Column("score", sa.Float(), nullable=True),
        sa.Column("holdout_score", sa.Float(), nullable=True),
        sa.Column("stage_reached", sa.Integer(), nullable=False),
        sa.Column("n_tasks", sa.Integer(), nullable=False),
        sa.Column("invalid_reason", sa.String(), nullable=True),
        sa.Column("feedback", sa.String(), nullable=True),
        sa.Column("eval_attempts", sa.Integer(), nullable=False),
        sa.Column("eval_seconds", sa.Float(), nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        _when(),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.ForeignKeyConstraint(["genome_hash"], ["genome.hash"]),
        sa.ForeignKeyConstraint(["parent_id"], ["agent.id"]),
        sa.ForeignKeyConstraint(["second_parent_id"], ["agent.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    for column in ("run_id", "genome_hash", "parent_id", "iteration", "status", "score"):
        op.create_index(f"ix_agent_{column}", "agent", [column])


def _llmcall() -> None:
    op.create_table(
        "llmcall",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("run_id", sa.Integer(), nullable=True),
        sa.Column("agent_id", sa.Integer(), nullable=True),
        sa.Column("iteration", sa.Integer(), nullable=True),
        sa.Column("purpose", sa.String(), nullable=False),
        sa.Column("model", sa.String(), nullable=False),
        sa.Column("prompt_tokens", sa.Integer(), nullable=False),
        sa.Column("completion_tokens", sa.Integer(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("request_hash", sa.String(), nullable=False),
        sa.Column("seed", sa.Integer(), nullable=True),
        sa.Column("cache_hit", sa.Boolean(), nullable=False),
        sa.Column("error", sa.String(), nullable=True),
        _when(),
        sa.ForeignKeyConstraint(["run_id"], ["run.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    for column in ("run_id", "agent_id", "iteration", "request_hash"):
        op.create_index(f"ix_llmcall_{column}", "llmcall", [column])


def _evaluation() -> None:
    op.create_table(
        "evaluation",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("agent_id", sa.Integer(), nullable=False),
        sa.Column("task_id", sa.String(), nullable=False),
        sa.Column("split", sa.String(), nullable=False),
        sa.Column("stage", sa.Integer(), nullable=False),
        sa.Column("score", sa.Float(), nullable=False),
        sa.Column("passed", sa.Boolean(), nullable=False),
        sa.Column("executed", sa.Boolean(), nullable=False),
        sa.Column("duration_s", sa.Float(), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("timed_out", sa.Boolean(), nullable=False),
        sa.Column("oom_killed", sa.Boolean(), nullable=False),
        sa.Column("output_truncated", sa.Boolean(), nullable=False),
        sa.Column("feedback", sa.String(), nullable=False),
        sa.Column("stdout_tail", sa.String(), nullable=False),
        sa.Column("stderr_tail", sa.String(), nullable=False),
        _when(),
        sa.ForeignKeyConstraint(["agent_id"], ["agent.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_evaluation_agent_id", "evaluation", ["agent_id"])


def _agentdescriptor() -> None:
    op.create_table(
        "agentdescriptor",
        sa.Column("agent_id", sa.Integer(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.ForeignKeyConstraint(["agent_id"], ["agent.id"]),
        sa.PrimaryKeyConstraint("agent_id", "name"),
    )


#: Every version-1 table and how to create it, parents before the tables that refer to them.
_TABLES: dict[str, Callable[[], None]] = {
    "run": _run,
    "genome": _genome,
    "genomefile": _genomefile,
    "llmresponse": _llmresponse,
    "agent": _agent,
    "llmcall": _llmcall,
    "evaluation": _evaluation,
    "agentdescriptor": _agentdescriptor,
}


def upgrade() -> None:
    existing = existing_tables()
    for name, create in _TABLES.items():
        if name not in existing:
            create()


def downgrade() -> None:
    for name in reversed(_TABLES):
        op.drop_table(name)
    if op.get_bind().dialect.name == "postgresql":
        _AGENT_STATUS.drop(op.get_bind(), checkfirst=True)
        _RUN_STATUS.drop(op.get_bind(), checkfirst=True)
