"""The one constructor of a health event (`health_event`): every sender builds its events
here (`fleetctl node event`, the agent and the intake through TemporalTransport, the worker's
watch of external drains, the demo), so each travels with the severity the catalog gives its
code or signature as the site's Xid policy amends it (fleetctl.nodes.health.event_severity,
checks.xid_policy: every sender passes the policy its settings name), or a graver one its
sender said.

The node's workflow orders its queue by that word (a critical event first, ending any wait)
and must not read the catalog itself (a replay decides only from its history): so the
severity is settled where the event is made, once, the same for every sender. Pure: the
catalog is data packaged with checks/."""

from __future__ import annotations

from fleetctl.checks.xid_policy import XidPolicy
from fleetctl.nodes.health import event_severity
from fleetctl.workflows.api import HealthEventInput


def health_event(
    node: str,
    source: str,
    *,
    policy: XidPolicy,
    code: int | None = None,
    message: str = "",
    actor: str = "",
    event_id: str = "",
    at: float = 0.0,
    severity: str = "",
    at_from_record: bool = False,
    signature: str = "",
    repeat_count: int = 1,
    first_seen: float = 0.0,
    last_seen: float = 0.0,
    gpu: str = "",
) -> HealthEventInput:
    """The event, its severity the policy's (the catalog's, as the site's file amends it) or the
    sender's `severity` when graver (ValueError for a word that is no severity)."""
    return HealthEventInput(
        node=node,
        source=source,
        code=code,
        message=message,
        actor=actor,
        event_id=event_id,
        at=at,
        severity=event_severity(severity, code, signature, policy=policy),
        at_from_record=at_from_record,
        signature=signature,
        repeat_count=repeat_count,
        first_seen=first_seen,
        last_seen=last_seen,
        gpu=gpu,
    )
