"""Job restarts and the simulated scheduler's node state.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def _when(name: str, nullable: bool = True) -> sa.Column[datetime]:
    return sa.Column(name, sa.DateTime(timezone=True), nullable=nullable)


def upgrade() -> None:
    # A pending simulated job has no placement yet, so the count it needs is its own column.
    op.add_column("jobs", sa.Column("node_count", sa.Integer, nullable=False, server_default="1"))

    op.create_table(
        "sim_scheduler_nodes",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("drained", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("reason", sa.Text, nullable=True),
        _when("updated_at", nullable=False),
    )
    op.create_index("ix_sim_scheduler_nodes_node_name", "sim_scheduler_nodes", ["node_name"], unique=True)

    op.create_table(
        "job_restarts",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.String, nullable=False),
        sa.Column("scheduler", sa.String, nullable=False),
        sa.Column("bad_nodes", sa.JSON, nullable=False),
        sa.Column("cause", sa.Text, nullable=False),
        sa.Column("actor", sa.String, nullable=False),
        sa.Column("restart_id", sa.String, nullable=False),
        _when("fault_seen_at", nullable=False),
        _when("drained_at"),
        _when("requeued_at"),
        _when("running_at"),
        sa.Column("new_nodes", sa.JSON, nullable=False),
        sa.Column("status", sa.String, nullable=False, server_default="in_progress"),  # in_progress, succeeded, failed
        sa.Column("error", sa.Text, nullable=False, server_default=""),
        sa.Column("workflow_id", sa.String, nullable=False),  # job-restart/<job>/<restart>: the idempotency key
        sa.UniqueConstraint("workflow_id"),
    )
    op.create_index("ix_job_restarts_job_id", "job_restarts", ["job_id"])
    op.create_index("ix_job_restarts_status", "job_restarts", ["status"])


def downgrade() -> None:
    op.drop_table("job_restarts")
    op.drop_table("sim_scheduler_nodes")
    with op.batch_alter_table("jobs") as batch:  # SQLite cannot drop a column in place
        batch.drop_column("node_count")
