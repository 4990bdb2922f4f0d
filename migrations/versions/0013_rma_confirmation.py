"""RMAs held for an operator: automation holds the RMA of a node in a correlated burst
(critical events on more nodes than the guard's storm limit) as `awaiting_confirmation`
until `fleetctl rma confirm` opens it or `fleetctl rma reject` ends it.

`rma_records` gains `held_reason` (why it was held), `decided_by` and `decided_at` (the
operator's answer). Existing records were never held: all three stay empty.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("rma_records") as batch:
        batch.add_column(sa.Column("held_reason", sa.Text, nullable=True))
        batch.add_column(sa.Column("decided_by", sa.String, nullable=True))
        batch.add_column(sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("rma_records") as batch:
        batch.drop_column("decided_at")
        batch.drop_column("decided_by")
        batch.drop_column("held_reason")
