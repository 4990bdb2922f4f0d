"""A job names its scheduler: `jobs.scheduler` loses its server default ("sim").

The simulated scheduler was the only one whose jobs fleetctl stores, so the column
defaulted to it; a row without a scheduler must fail instead of becoming a simulated job.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:  # SQLite cannot change a column in place
        batch.alter_column("scheduler", existing_type=sa.String, existing_nullable=False, server_default=None)


def downgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.alter_column("scheduler", existing_type=sa.String, existing_nullable=False, server_default="sim")
