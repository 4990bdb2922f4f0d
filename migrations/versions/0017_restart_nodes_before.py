"""A job restart's nodes before it was requeued, so that its replacements can be told.

`job_restarts.nodes_before`: the job's nodes when the restart requeued it (JSON list); the
replacements are its `new_nodes` less these (fleetctl.jobs.placement.replacements). `[]` for
the restarts recorded before, which then show every node the job ran on again, as they did.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("job_restarts") as batch:
        batch.add_column(sa.Column("nodes_before", sa.JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("job_restarts") as batch:
        batch.drop_column("nodes_before")
