"""How many occurrences a recorded health event stands for.

A storm of one warning Xid is folded into one queued event (its `repeat_count`) by the agent,
the intake and the node's workflow, and recorded as one row. The escalation rule counts the
occurrences of a code in its window, so the row keeps the count: a later event of the code
counts the folded ones as often as they were seen, not once. 1 for every existing row, as
each stood for itself.

Revision ID: 0020
Revises: 0019
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0020"
down_revision = "0019"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("health_events") as batch:
        batch.add_column(sa.Column("repeat_count", sa.Integer, nullable=False, server_default="1"))


def downgrade() -> None:
    with op.batch_alter_table("health_events") as batch:
        batch.drop_column("repeat_count")
