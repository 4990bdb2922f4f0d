"""The failure a transition records, as data (fleetctl.remediation.events.Event.failure), instead of
being read back out of the cause's words by the report.

Rows written before it are classified once, here, by the rules the report used until now:
the cause names an XID ("XID 79"), a check ("recheck <suite>: <check>: ..." or "active check
<suite>: <check>: ..."), or a health event ("health: ...").

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_XID = re.compile(r"\bXID (\d+)", re.IGNORECASE)
_CHECK = re.compile(r"^(?:drained: )?(?:recheck|active check) [^:]*: ([\w.-]+):")


def failure_of(cause: str) -> str:
    if match := _XID.search(cause):
        return f"xid {match[1]}"
    if match := _CHECK.match(cause):
        return f"check {match[1]}"
    return "health" if cause.startswith("health:") else ""


def upgrade() -> None:
    with op.batch_alter_table("node_events") as batch:
        batch.add_column(sa.Column("failure", sa.Text, nullable=False, server_default=""))
    events = sa.table(
        "node_events",
        sa.column("id", sa.Integer),
        sa.column("cause", sa.Text),
        sa.column("from_state", sa.String),
        sa.column("to_state", sa.String),
        sa.column("failure", sa.Text),
    )
    bind = op.get_bind()
    # Only exits from production are failures; they are few (one per fault), so row by row.
    rows = bind.execute(
        sa.select(events.c.id, events.c.cause).where(
            events.c.from_state == "production", events.c.to_state != "production"
        )
    ).all()
    for row_id, cause in rows:
        if failure := failure_of(cause or ""):
            bind.execute(events.update().where(events.c.id == row_id).values(failure=failure))


def downgrade() -> None:
    with op.batch_alter_table("node_events") as batch:
        batch.drop_column("failure")
