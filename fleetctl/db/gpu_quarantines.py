"""The GPUs fleetctl took out of their nodes' schedulers, as the database records them
(fleetctl.nodes.gpu_quarantine decides which)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from fleetctl.db.models import AutomationEvent, GpuQuarantine, utcnow

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def record_quarantine(
    engine: Engine, node: str, gpu: str, code: int | None, reason: str, actor: str, idempotency_key: str
) -> bool:
    """Record `gpu` of `node` out; False when it is out already (an open row for it) or this
    key was recorded before (a retried activity)."""
    with Session(engine) as session:
        if session.exec(
            select(GpuQuarantine.id).where(
                GpuQuarantine.node_name == node, GpuQuarantine.gpu == gpu, col(GpuQuarantine.released_at).is_(None)
            )
        ).first():
            return False
        session.add(
            GpuQuarantine(
                node_name=node, gpu=gpu, code=code, reason=reason, actor=actor, idempotency_key=idempotency_key
            )
        )
        try:
            session.commit()
        except IntegrityError:
            return False
        return True


def open_quarantines(engine: Engine, nodes: Sequence[str] | None = None) -> list[GpuQuarantine]:
    """The GPUs out now (of `nodes`, or of every node), by node then GPU."""
    with Session(engine) as session:
        query = select(GpuQuarantine).where(col(GpuQuarantine.released_at).is_(None))
        if nodes is not None:
            query = query.where(col(GpuQuarantine.node_name).in_(list(nodes)))
        return list(session.exec(query.order_by(col(GpuQuarantine.node_name), col(GpuQuarantine.gpu))))


def gpus_out(engine: Engine, node: str) -> list[str]:
    """The keys of `node`'s GPUs out now."""
    return [q.gpu for q in open_quarantines(engine, [node])]


def record_release(engine: Engine, node: str, gpu: str, reason: str) -> bool:
    """`gpu` of `node` is back in its scheduler; False when it was not out."""
    with Session(engine) as session:
        row = session.exec(
            select(GpuQuarantine).where(
                GpuQuarantine.node_name == node, GpuQuarantine.gpu == gpu, col(GpuQuarantine.released_at).is_(None)
            )
        ).first()
        if row is None:
            return False
        row.released_at, row.release_reason = utcnow(), reason
        session.add(row)
        session.commit()
        return True


# The automation event a failed return records, and its key's prefix per quarantine: the
# failures of one quarantine are counted, never those of the GPU's earlier ones.
RETURN_FAILED = "gpu_return_failed"


def return_key(quarantine_id: int, run: str) -> str:
    return f"gpu-return/{quarantine_id}/{run}"


def failed_returns(engine: Engine, quarantine_id: int) -> int:
    """The failed returns recorded for the quarantine `quarantine_id`."""
    with Session(engine) as session:
        return len(
            session.exec(
                select(AutomationEvent.id).where(
                    AutomationEvent.kind == RETURN_FAILED,
                    col(AutomationEvent.idempotency_key).startswith(return_key(quarantine_id, "")),
                )
            ).all()
        )
