"""The simulated scheduler's node lists of a job, kept as Slurm keeps a job's.

`jobs.excluded_nodes`: the nodes the job never runs on (Slurm's ExcNodeList), added to by
each restart and kept through every later pass; `jobs.required_nodes`: the nodes it runs on
or waits for (ReqNodeList), until released. Only the simulated scheduler reads them; `[]`
for every existing row, as before.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("excluded_nodes", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("required_nodes", sa.JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("required_nodes")
        batch.drop_column("excluded_nodes")
