"""The audit trail of the front door (`fleetctl api serve`): one row per write asked, allowed
or denied, with the authenticated subject; read by `fleetctl audit`, pruned by retention.

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "audit_requests",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("subject", sa.String, nullable=False),
        sa.Column("actor", sa.String, nullable=False),
        sa.Column("fleet", sa.String, nullable=False),
        sa.Column("command", sa.String, nullable=False),
        sa.Column("args", sa.JSON, nullable=False),
        sa.Column("nodes", sa.Text, nullable=False),
        sa.Column("decision", sa.String, nullable=False),
        sa.Column("role_needed", sa.String, nullable=False),
        sa.Column("role_held", sa.String, nullable=False),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
    )
    op.create_index("ix_audit_requests_at", "audit_requests", ["at"])
    op.create_index("ix_audit_requests_subject", "audit_requests", ["subject"])


def downgrade() -> None:
    op.drop_index("ix_audit_requests_subject", "audit_requests")
    op.drop_index("ix_audit_requests_at", "audit_requests")
    op.drop_table("audit_requests")
