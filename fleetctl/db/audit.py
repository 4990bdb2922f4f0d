"""Audit records of what operators asked for and were refused."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from fleetctl.db.models import AutomationEvent
from fleetctl.db.queries import insert_once

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


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
