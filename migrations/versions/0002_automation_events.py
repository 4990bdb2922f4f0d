"""Automation events: capacity-guard grants and refusals, circuit-breaker trips and resets.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "automation_events",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("fleet", sa.String, nullable=False, server_default="default"),
        sa.Column("kind", sa.String, nullable=False),  # grant, deny, breaker_open, breaker_closed, force
        sa.Column("node_name", sa.String, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("actor", sa.String, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("idempotency_key", sa.String, nullable=False),
        sa.UniqueConstraint("idempotency_key"),
    )
    op.create_index("ix_automation_events_at", "automation_events", ["at"])


def downgrade() -> None:
    op.drop_table("automation_events")
