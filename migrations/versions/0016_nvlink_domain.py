"""The multi-node NVLink domain a node is in, from the inventory's `nvlink_domain` field.

`nodes.nvlink_domain`: the domain's name (a GB200 NVL72 rack: 18 compute trays whose 72
GPUs share the rack's NVLink switch trays); "" for every existing row and for HGX nodes,
whose NVLink ends at the chassis.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("nvlink_domain", sa.String, nullable=False, server_default=""))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("nvlink_domain")
