"""When a simulated node's BMC last rebooted it, so its boot id changes as a real node's does.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sim_boots",
        sa.Column("node_name", sa.String, primary_key=True),
        sa.Column("booted_at", sa.Float, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("sim_boots")
