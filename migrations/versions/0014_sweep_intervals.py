"""Each active-check sweep schedule's interval, as `fleetctl schedule` made it.

`sweep_intervals` has one row per active-check sweep schedule (its Temporal schedule id):
the fleet it sweeps, how often, and whether it is paused. How old a node's evidence may be
before it reads `Unchecked` is its fleet's shortest unpaused interval (fleetctl.nodes.conditions.
unchecked_since); `node list` reads it here in one query instead of describing every
schedule in Temporal. Empty at upgrade: the schedules made before it are recorded by the
next `fleetctl schedule list` (until then, as before, no interval is known and nothing is
judged by age).

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sweep_intervals",
        sa.Column("schedule_id", sa.String, primary_key=True),
        sa.Column("fleet", sa.String, nullable=False),
        sa.Column("every_s", sa.Float, nullable=False),
        sa.Column("paused", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_sweep_intervals_fleet", "sweep_intervals", ["fleet"])


def downgrade() -> None:
    op.drop_index("ix_sweep_intervals_fleet", "sweep_intervals")
    op.drop_table("sweep_intervals")
