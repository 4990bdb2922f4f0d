"""Repeated minor faults sent once: a kernel Xid storm from a user program (thousands of the
same Xid a second) must not cost the node's workflow a signal each, nor Temporal's signal
budget of its run. Pure."""

from __future__ import annotations

from typing import Any

from fleetctl.checks.xid_policy import XidPolicy
from fleetctl.nodes.health import event_severity


def coalesce_minor(events: list[dict[str, Any]], policy: XidPolicy) -> list[dict[str, Any]]:
    """`events` (spooled, in order) with every minor event that repeats an earlier one of the
    list (the same source, code, signature, severity and GPU) folded into that one: one event with
    `repeat_count` and the times of the first and the last it stands for (`first_seen`,
    `last_seen`). A critical event is never folded (each is acted on), nor one with neither
    code nor signature (nothing says two of them are the same fault). The order of the events
    kept is the order of their first occurrence."""
    out: list[dict[str, Any]] = []
    kept: dict[tuple[str, int | None, str, str, str], int] = {}
    for ev in events:
        code, signature = ev["code"], ev.get("signature", "")
        if (code is None and not signature) or event_severity(
            ev.get("severity", ""), code, signature, policy=policy
        ) == "critical":
            out.append(ev)
            continue
        key = (ev["source"], code, signature, ev.get("severity", ""), ev.get("gpu", ""))
        if key not in kept:
            kept[key] = len(out)
            out.append(ev)
            continue
        first = out[kept[key]]
        out[kept[key]] = {
            **first,
            # The last one's id: a batch read again (a read position lost) brings the records
            # after the ones recorded under a new id, and sent again whole, the same id.
            "event_id": ev["event_id"],
            "repeat_count": first.get("repeat_count", 1) + ev.get("repeat_count", 1),
            "first_seen": min(first.get("first_seen") or first["at"], ev.get("first_seen") or ev["at"]),
            "last_seen": max(first.get("last_seen") or first["at"], ev.get("last_seen") or ev["at"]),
        }
    return out
