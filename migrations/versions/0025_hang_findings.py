"""Hung jobs' findings, and when a job's latest run started.

`hang_findings`: one row per late job's verdict of the HungJobs judge (hung, slow, or no
evidence), the nodes it blamed and how, the evidence in words, the job's last progress, first
and last seen; `resolved_at` once a tick no longer finds it.

`jobs.run_started_at`: the start of the job's latest run as the scheduler reports it while
the job runs (Slurm moves it at each of its own requeues; `started_at` keeps the first), so
a requeue resets the hang judge's clock as fleetctl's own restarts do.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "hang_findings",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("job_id", sa.String, nullable=False),
        sa.Column("state", sa.String, nullable=False),
        sa.Column("suspects", sa.JSON, nullable=False),
        sa.Column("localised", sa.String, nullable=False),
        sa.Column("evidence", sa.Text, nullable=False),
        sa.Column("progress_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("found_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("last_seen_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
    )
    op.create_index("ix_hang_findings_job_id", "hang_findings", ["job_id"])
    op.create_index("ix_hang_findings_resolved_at", "hang_findings", ["resolved_at"])
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("run_started_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("run_started_at")
    op.drop_table("hang_findings")
