"""The failure a job restart is counted under, as data (`job_restarts.failure`), instead of
being read back out of the cause's words by the report.

Rows written before it are classified once, here, by the rules the report used until now:
the cause names an XID ("XID 79"), a check ("<recheck|active check|prolog> <suite>: <check>:
...", a straggler when ": straggler:" follows the check), a production straggler
("straggler <metric> in job ..."), a health event ("health: ...") or an operator
("operator..."); any other cause is "" (the report's `other`).

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

_XID = re.compile(r"\bXID (\d+)", re.IGNORECASE)
_CHECK = re.compile(r"^(?:drained: )?(?:recheck|active check|prolog) [^:]*: ([\w.-]+):( straggler:)?")
_PRODUCTION_STRAGGLER = re.compile(r"^straggler ([\w.-]+) in job ")


def failure_of(cause: str) -> str:
    if match := _XID.search(cause):
        return f"xid {match[1]}"
    if match := _CHECK.match(cause):
        return f"{'straggler' if match[2] else 'check'} {match[1]}"
    if match := _PRODUCTION_STRAGGLER.match(cause):
        return f"straggler {match[1]}"
    if cause.startswith("health:"):
        return "health"
    return "operator" if cause.startswith("operator") else ""


def upgrade() -> None:
    with op.batch_alter_table("job_restarts") as batch:
        batch.add_column(sa.Column("failure", sa.Text, nullable=False, server_default=""))
    restarts = sa.table(
        "job_restarts", sa.column("id", sa.Integer), sa.column("cause", sa.Text), sa.column("failure", sa.Text)
    )
    bind = op.get_bind()
    # One row per restart of a job off a bad node: few, so row by row.
    for row_id, cause in bind.execute(sa.select(restarts.c.id, restarts.c.cause)).all():
        if failure := failure_of(cause or ""):
            bind.execute(restarts.update().where(restarts.c.id == row_id).values(failure=failure))


def downgrade() -> None:
    with op.batch_alter_table("job_restarts") as batch:
        batch.drop_column("failure")
