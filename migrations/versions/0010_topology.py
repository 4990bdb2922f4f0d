"""Topology: where a node sits in the fabric, and where a job's restart was placed.

`nodes` gains the inventory's leaf switch, island (InfiniBand island / NVLink domain) and
rack unit; `job_restarts` gains the job's island, where the restart asked the scheduler to
place it (`island`, `fleet`, or "" when not decided) with why and the nodes it named, and
where it landed. Every
existing row gets "" / NULL: nothing was known of topology before.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("switch", sa.String, nullable=False, server_default=""))
        batch.add_column(sa.Column("island", sa.String, nullable=False, server_default=""))
        batch.add_column(sa.Column("position", sa.Integer, nullable=True))
    with op.batch_alter_table("job_restarts") as batch:
        batch.add_column(sa.Column("island", sa.String, nullable=False, server_default=""))
        batch.add_column(sa.Column("placement", sa.String, nullable=False, server_default=""))
        batch.add_column(sa.Column("placement_detail", sa.Text, nullable=False, server_default=""))
        batch.add_column(sa.Column("placed_on", sa.JSON, nullable=False, server_default="[]"))
        batch.add_column(sa.Column("landed", sa.String, nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("job_restarts") as batch:
        for column in ("landed", "placed_on", "placement_detail", "placement", "island"):
            batch.drop_column(column)
    with op.batch_alter_table("nodes") as batch:
        for column in ("position", "island", "switch"):
            batch.drop_column(column)
