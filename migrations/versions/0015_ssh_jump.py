"""The SSH jump host (bastion) a node is reached through, from the inventory's `jump` field.

`nodes.jump_host`: `[user@]host[:port]` of the bastion; NULL: the node is reached directly,
or through the fleet-wide `ssh_jump_host` setting when one is set.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("jump_host", sa.String, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("jump_host")
