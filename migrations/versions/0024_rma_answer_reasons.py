"""What an operator said when answering a held RMA (`rma confirm|reject --reason`).

`rma_records.decided_reason`: the reason typed with the answer ("driver 550.90 bug"), kept
beside who answered and when; null for the answers given before it was asked for.

Revision ID: 0024
Revises: 0022
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0024"
down_revision = "0022"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rma_records") as batch:
        batch.add_column(sa.Column("decided_reason", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rma_records") as batch:
        batch.drop_column("decided_reason")
