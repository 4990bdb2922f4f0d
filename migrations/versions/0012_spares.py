"""Hot spares: the pool of nodes each island holds out of normal scheduling, and which spares
a job's restart took.

`spares` has one row per held node (fleetctl.jobs.spares); `job_restarts` gains `spares_taken`.
Existing restarts took none: nothing was held before.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "spares",
        sa.Column("node_name", sa.String, primary_key=True),
        sa.Column("island", sa.String, nullable=False),
        sa.Column("held_at", sa.DateTime, nullable=False),
    )
    op.create_index("ix_spares_island", "spares", ["island"])
    with op.batch_alter_table("job_restarts") as batch:
        batch.add_column(sa.Column("spares_taken", sa.JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("job_restarts") as batch:
        batch.drop_column("spares_taken")
    op.drop_index("ix_spares_island", "spares")
    op.drop_table("spares")
