"""Initial schema: nodes, node events, check runs, health events, jobs, simulated faults.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("address", sa.String, nullable=False),
        sa.Column("bmc_address", sa.String, nullable=True),
        sa.Column("ssh_user", sa.String, nullable=True),
        sa.Column("rack", sa.String, nullable=False, server_default=""),
        sa.Column("profile", sa.String, nullable=False),
        sa.Column("scheduler", sa.String, nullable=False, server_default="none"),
        sa.Column("labels", sa.JSON, nullable=False),
        sa.Column("state", sa.String, nullable=False, server_default="new"),
        sa.Column("state_version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_nodes_name", "nodes", ["name"], unique=True)
    op.create_index("ix_nodes_rack", "nodes", ["rack"])
    op.create_index("ix_nodes_state", "nodes", ["state"])

    op.create_table(
        "node_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("from_state", sa.String, nullable=False),
        sa.Column("to_state", sa.String, nullable=False),
        sa.Column("trigger", sa.String, nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
        sa.Column("actor", sa.String, nullable=False),
        sa.Column("actor_kind", sa.String, nullable=False, server_default="operator"),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("workflow_id", sa.String, nullable=False, server_default=""),
        sa.Column("run_id", sa.String, nullable=False, server_default=""),
        sa.Column("state_version", sa.Integer, nullable=False, server_default="0"),
        sa.Column("idempotency_key", sa.String, nullable=False),
        sa.UniqueConstraint("idempotency_key"),
    )
    op.create_index("ix_node_events_node_name", "node_events", ["node_name"])
    op.create_index("ix_node_events_at", "node_events", ["at"])

    op.create_table(
        "check_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("check_name", sa.String, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("suite", sa.String, nullable=False, server_default=""),
        sa.Column("status", sa.String, nullable=False),
        sa.Column("metrics", sa.JSON, nullable=False),
        sa.Column("findings", sa.JSON, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("raw_output", sa.Text, nullable=False),
        sa.Column("output_truncated", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("error_kind", sa.String, nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("workflow_id", sa.String, nullable=False, server_default=""),
        sa.Column("idempotency_key", sa.String, nullable=False),
        sa.UniqueConstraint("idempotency_key"),
    )
    op.create_index("ix_check_runs_node_name", "check_runs", ["node_name"])
    op.create_index("ix_check_runs_status", "check_runs", ["status"])
    op.create_index("ix_check_runs_finished_at", "check_runs", ["finished_at"])

    op.create_table(
        "health_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("source", sa.String, nullable=False),
        sa.Column("code", sa.Integer, nullable=True),
        sa.Column("severity", sa.String, nullable=False, server_default="info"),
        sa.Column("action", sa.String, nullable=False, server_default=""),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("idempotency_key", sa.String, nullable=False),
        sa.UniqueConstraint("idempotency_key"),
    )
    op.create_index("ix_health_events_node_name", "health_events", ["node_name"])
    op.create_index("ix_health_events_at", "health_events", ["at"])

    op.create_table(
        "jobs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.String, nullable=False),
        sa.Column("name", sa.String, nullable=False, server_default=""),
        sa.Column("scheduler", sa.String, nullable=False, server_default="sim"),
        sa.Column("state", sa.String, nullable=False, server_default="pending"),
        sa.Column("nodes", sa.JSON, nullable=False),
        sa.Column("gpus_per_node", sa.Integer, nullable=False, server_default="8"),
        sa.Column("submitted_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_checkpoint_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_jobs_job_id", "jobs", ["job_id"], unique=True)

    op.create_table(
        "sim_faults",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("kind", sa.String, nullable=False),
        sa.Column("gpu", sa.Integer, nullable=True),
        sa.Column("not_before", sa.Float, nullable=False, server_default="0"),
        sa.Column("rate_per_hour", sa.Float, nullable=True),
        sa.Column("seed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_sim_faults_node_name", "sim_faults", ["node_name"])


def downgrade() -> None:
    for table in ("sim_faults", "jobs", "health_events", "check_runs", "node_events", "nodes"):
        op.drop_table(table)
