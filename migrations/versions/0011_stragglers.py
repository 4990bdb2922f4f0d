"""Stragglers in production: one row per finding of the ProductionStragglers judge.

A finding is one node of one running job that a metric (`sm_clock`, `nvlink_tx`, ...) puts
beyond the job's other nodes, with its evidence in words and as numbers. It stays `open`
until the node is back in line (`cleared`), or drained through the capacity guard once its
job checkpointed (`drained`), or its node left production some other way (`closed`);
`detail` says why, and the guard's refusal while it is held.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "straggler_findings",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.String, nullable=False),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("metric", sa.String, nullable=False),
        sa.Column("status", sa.String, nullable=False, server_default="open"),
        sa.Column("evidence", sa.Text, nullable=False),
        sa.Column("value", sa.Float, nullable=True),
        sa.Column("median", sa.Float, nullable=True),
        sa.Column("robust_z", sa.Float, nullable=True),
        sa.Column("job_restart_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("found_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
    )
    op.create_index("ix_straggler_findings_job_id", "straggler_findings", ["job_id"])
    op.create_index("ix_straggler_findings_node_name", "straggler_findings", ["node_name"])
    op.create_index("ix_straggler_findings_status", "straggler_findings", ["status"])


def downgrade() -> None:
    op.drop_table("straggler_findings")
