"""Remediation runs, RMA records, firmware baselines and roll-outs.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def _when(name: str, nullable: bool = False) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    op.create_table(
        "remediation_runs",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_key", sa.String, nullable=False),  # the Remediation workflow id
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("runbook", sa.String, nullable=False),
        sa.Column("event", sa.JSON, nullable=False),
        sa.Column("mode", sa.String, nullable=False, server_default="live"),  # live, dry_run, shadow
        sa.Column("status", sa.String, nullable=False, server_default="running"),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("actor", sa.String, nullable=False),
        _when("started_at"),
        _when("finished_at", nullable=True),
        sa.UniqueConstraint("run_key"),
    )
    op.create_index("ix_remediation_runs_node_name", "remediation_runs", ["node_name"])
    op.create_index("ix_remediation_runs_started_at", "remediation_runs", ["started_at"])

    op.create_table(
        "remediation_steps",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("run_key", sa.String, nullable=False),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("step_index", sa.Integer, nullable=False),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("action", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False),  # passed, failed, skipped, would_run
        sa.Column("params", sa.JSON, nullable=False),
        sa.Column("detail", sa.Text, nullable=False),
        _when("started_at"),
        _when("finished_at"),
        sa.UniqueConstraint("run_key", "step_index"),
    )
    op.create_index("ix_remediation_steps_run_key", "remediation_steps", ["run_key"])
    op.create_index("ix_remediation_steps_node_name", "remediation_steps", ["node_name"])

    op.create_table(
        "rma_records",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False, server_default="open"),  # open, closed
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("remediation_run", sa.String, nullable=True),
        sa.Column("evidence", sa.JSON, nullable=False),
        sa.Column("evidence_markdown", sa.Text, nullable=False),
        sa.Column("webhook_status", sa.String, nullable=True),
        sa.Column("opened_by", sa.String, nullable=False),
        _when("opened_at"),
        sa.Column("replaced", sa.Text, nullable=True),
        sa.Column("closed_by", sa.String, nullable=True),
        _when("closed_at", nullable=True),
        sa.Column("idempotency_key", sa.String, nullable=False),
        sa.UniqueConstraint("idempotency_key"),
    )
    op.create_index("ix_rma_records_node_name", "rma_records", ["node_name"])
    op.create_index("ix_rma_records_status", "rma_records", ["status"])

    op.create_table(
        "firmware_baselines",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String, nullable=False),
        sa.Column("document", sa.JSON, nullable=False),  # the validated baseline
        sa.Column("source", sa.Text, nullable=False),  # the YAML as the operator wrote it
        sa.Column("created_by", sa.String, nullable=False),
        _when("created_at"),
    )

    op.create_table(
        "firmware_rollouts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("rollout_id", sa.String, nullable=False),  # also the workflow id's suffix
        sa.Column("baseline_id", sa.Integer, nullable=False),
        sa.Column("status", sa.String, nullable=False, server_default="running"),  # running, halted, completed, aborted
        sa.Column("canary", sa.Integer, nullable=False),
        sa.Column("batch", sa.String, nullable=False),
        sa.Column("max_failures", sa.Integer, nullable=False),
        sa.Column("dry_run", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("total", sa.Integer, nullable=False, server_default="0"),
        sa.Column("done", sa.Integer, nullable=False, server_default="0"),
        sa.Column("failed", sa.Integer, nullable=False, server_default="0"),
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("created_by", sa.String, nullable=False),
        _when("created_at"),
        _when("updated_at"),
        sa.UniqueConstraint("rollout_id"),
    )
    op.create_index("ix_firmware_rollouts_status", "firmware_rollouts", ["status"])

    op.create_table(
        "firmware_rollout_nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("rollout_id", sa.String, nullable=False),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("batch_index", sa.Integer, nullable=False),
        sa.Column("status", sa.String, nullable=False),  # pending, updated, failed, skipped, would_update
        sa.Column("detail", sa.Text, nullable=False),
        sa.Column("components", sa.JSON, nullable=False),  # component -> [from, to]
        _when("updated_at"),
        sa.UniqueConstraint("rollout_id", "node_name"),
    )
    op.create_index("ix_firmware_rollout_nodes_rollout_id", "firmware_rollout_nodes", ["rollout_id"])


def downgrade() -> None:
    for table in (
        "firmware_rollout_nodes",
        "firmware_rollouts",
        "firmware_baselines",
        "rma_records",
        "remediation_steps",
        "remediation_runs",
    ):
        op.drop_table(table)
