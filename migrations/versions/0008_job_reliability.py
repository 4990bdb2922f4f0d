"""Jobs as their schedulers report them, and the checkpoints the jobs report.

`jobs` gains what the scheduler says of every job fleetctl reconciles (its requeue count,
when fleetctl last saw it there); `job_checkpoints` holds each checkpoint a job reported
(`fleetctl job checkpoint`), one row per job and time, so a repeated call is one row.

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("restart_count", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("seen_at", sa.DateTime(timezone=True), nullable=True))
    op.create_table(
        "job_checkpoints",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.String, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.UniqueConstraint("job_id", "at", name="uq_job_checkpoints_job_at"),
    )
    op.create_index("ix_job_checkpoints_job_id", "job_checkpoints", ["job_id"])


def downgrade() -> None:
    op.drop_table("job_checkpoints")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("seen_at")
        batch.drop_column("restart_count")
