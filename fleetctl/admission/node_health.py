"""A node's health as an in-job restart framework asks it (nvidia-resiliency-ext's or
torchrun elastic's rendezvous choosing where to run, `GET /nodes/NAME/health`): healthy or
not, and the reason, in one small JSON answer. Pure: fleetctl's own view, no check run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def node_health(name: str, state: str, critical_events: Sequence[str], open_findings: Sequence[str]) -> dict[str, Any]:
    """Unhealthy when fleetctl has the node out of production, a critical health event came
    since it entered production (its drain may be on the way), or it straggles in a job."""
    if state != "production":
        reason = f"{state} in fleetctl, not production"
    elif critical_events:
        reason = f"critical health event: {critical_events[0][:200]}"
    elif open_findings:
        reason = open_findings[0][:200]
    else:
        return {"node": name, "healthy": True, "state": state, "reason": ""}
    return {"node": name, "healthy": False, "state": state, "reason": reason}
