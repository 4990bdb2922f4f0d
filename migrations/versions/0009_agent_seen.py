"""When each node's agent was last heard.

`nodes.agent_seen_at`: the time `fleetctl events serve` last received the node's agent
heartbeat, written in one statement per second for every node heard in it (a column, not
an event per heartbeat: at 10,000 nodes a row per heartbeat would be the busiest table).
NULL: the node has no agent, and its silence is never judged.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.add_column(sa.Column("agent_seen_at", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("nodes") as batch:
        batch.drop_column("agent_seen_at")
