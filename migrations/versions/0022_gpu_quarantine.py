"""GPU-level quarantine: one GPU out of its node's scheduler, the node left in service.

`gpu_quarantines`: each GPU fleetctl took out (its node, PCI address, the Xid, why, who),
open until released; `node show`, `node list` and fleet status read the open ones, and the
capacity guard counts each as 1/N of its node. `sim_scheduler_nodes.gpus_out`: the GPUs the
simulated scheduler no longer places work on (its GRES), `[]` for every existing row.

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-05
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gpu_quarantines",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("node_name", sa.String, nullable=False),
        sa.Column("gpu", sa.String, nullable=False),
        sa.Column("code", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=False),
        sa.Column("actor", sa.String, nullable=False),
        sa.Column("quarantined_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("released_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("release_reason", sa.Text, nullable=False, server_default=""),
        sa.Column("idempotency_key", sa.String, nullable=False),
        sa.UniqueConstraint("idempotency_key"),
    )
    op.create_index("ix_gpu_quarantines_node_name", "gpu_quarantines", ["node_name"])
    op.create_index("ix_gpu_quarantines_released_at", "gpu_quarantines", ["released_at"])
    with op.batch_alter_table("sim_scheduler_nodes") as batch:
        batch.add_column(sa.Column("gpus_out", sa.JSON, nullable=False, server_default="[]"))


def downgrade() -> None:
    with op.batch_alter_table("sim_scheduler_nodes") as batch:
        batch.drop_column("gpus_out")
    op.drop_index("ix_gpu_quarantines_released_at", "gpu_quarantines")
    op.drop_index("ix_gpu_quarantines_node_name", "gpu_quarantines")
    op.drop_table("gpu_quarantines")
