"""Audit records: what operators asked for and were refused (a race lost), and every write
asked of the front door (the audit_requests table, `fleetctl audit`)."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlmodel import Session, col, select

from fleetctl.db.models import AuditRequest, AutomationEvent
from fleetctl.db.queries import insert_once
from fleetctl.durations import as_utc

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

# The command an imported gateway refusal is recorded as: `temporal-gateway SignalWorkflowExecution`.
GATEWAY_COMMAND = "temporal-gateway"


def record_rejection(engine: Engine, *, fleet: str, node: str, actor: str, trigger: str, reason: str) -> None:
    """A refused command is recorded with its actor, so a race between two operators (or an
    operator and automation) shows both: the winner's transition and the loser's refusal."""
    key = f"rejected/{uuid.uuid4()}"
    insert_once(
        engine,
        AutomationEvent(
            fleet=fleet,
            kind="rejected",
            node_name=node,
            actor=actor,
            reason=f"{trigger}: {reason}",
            idempotency_key=key,
        ),
        AutomationEvent.idempotency_key,
        key,
    )


def record_request(
    engine: Engine,
    *,
    subject: str,
    actor: str,
    fleet: str,
    command: str,
    args: Sequence[str],
    nodes: Sequence[str],
    allowed: bool,
    role_needed: str,
    role_held: str,
    reason: str,
) -> int:
    """One write asked of the front door, written before the command runs (so a command that
    never ends is still on record); its id, for record_exit."""
    row = AuditRequest(
        subject=subject,
        actor=actor,
        fleet=fleet,
        command=command,
        args=list(args),
        nodes=f" {' '.join(nodes)} ",
        decision="allowed" if allowed else "denied",
        role_needed=role_needed,
        role_held=role_held,
        reason=reason,
    )
    with Session(engine, expire_on_commit=False) as session:
        session.add(row)
        session.commit()
        assert row.id is not None
        return row.id


def record_refusals(engine: Engine, fleet: str, refusals: Sequence[Any]) -> tuple[int, int]:
    """The Temporal gateway's refusals (fleetctl.authz.gateway.Refusal) as denied rows of the
    audit trail, each once: a refusal whose request id is already recorded is skipped (a log
    imported twice, or read again after rotation). Returns (added, already recorded)."""
    if not refusals:
        return 0, 0
    earliest = min(r.at for r in refusals)
    with Session(engine) as session:
        recorded = session.exec(
            select(AuditRequest.args).where(
                col(AuditRequest.command).startswith(GATEWAY_COMMAND), AuditRequest.at >= earliest
            )
        ).all()
        seen = {args[-1] for args in recorded if args}
        added = 0
        for r in refusals:
            if r.request_id in seen:
                continue
            seen.add(r.request_id)
            session.add(
                AuditRequest(
                    at=r.at,
                    subject=r.subject,
                    fleet=fleet,
                    command=f"{GATEWAY_COMMAND} {r.method.rpartition('/')[2]}",
                    args=[r.method, r.request_id],
                    decision="denied",
                    role_needed=r.needed,
                    role_held=r.caller,
                    reason=r.reason,
                )
            )
            added += 1
        session.commit()
    return added, len(refusals) - added


def record_exit(engine: Engine, request_id: int, exit_code: int) -> None:
    with Session(engine) as session:
        row = session.get(AuditRequest, request_id)
        if row is not None:
            row.exit_code = exit_code
            session.add(row)
            session.commit()


def audit_requests(
    engine: Engine,
    *,
    node: str | None = None,
    subject: str | None = None,
    denied_only: bool = False,
    since: datetime | None = None,
    limit: int = 1000,
) -> list[dict[str, Any]]:
    """The most recent `limit` requests matching every filter given, oldest first."""
    query = select(AuditRequest)
    if node is not None:
        query = query.where(col(AuditRequest.nodes).like(f"% {node} %"))
    if subject is not None:
        query = query.where(AuditRequest.subject == subject)
    if denied_only:
        query = query.where(AuditRequest.decision == "denied")
    if since is not None:
        query = query.where(AuditRequest.at >= since)
    query = query.order_by(col(AuditRequest.id).desc()).limit(limit)
    with Session(engine) as session:
        rows = session.exec(query).all()
    return [_as_dict(row) for row in reversed(rows)]


def _as_dict(row: AuditRequest) -> dict[str, Any]:
    return {
        "at": as_utc(row.at).isoformat(),
        "subject": row.subject,
        "actor": row.actor,
        "fleet": row.fleet,
        "command": row.command,
        "args": row.args,
        "nodes": row.nodes.split(),
        "decision": row.decision,
        "role_needed": row.role_needed,
        "role_held": row.role_held,
        "reason": row.reason,
        "exit_code": row.exit_code,
    }
