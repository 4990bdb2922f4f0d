"""Repeats collapsed, as Kubernetes collapses its events: the automation's decisions about a
node (a refusal every sweep, a suspect judgement every sweep) grouped by node, kind and the
class of their reason, each group with its count and when it was first and last seen. Pure.

A reason's class is its words with the numbers taken out: "fleet limit: 3 of 40 already
unavailable" and "fleet limit: 4 of 40 already unavailable" are one repeat, counted twice;
"rack limit: ..." is another."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

_NUMBER = re.compile(r"\d+(?:\.\d+)?")


@dataclass(frozen=True)
class EventGroup:
    """Events of one node, kind and reason class: the latest's reason, how many, first and last."""

    node: str | None
    kind: str
    reason: str
    count: int
    first: datetime
    last: datetime

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "kind": self.kind,
            "reason": self.reason,
            "count": self.count,
            "first": self.first,
            "last": self.last,
        }


def reason_class(reason: str) -> str:
    """What a reason says without its figures (counts, percentages, ids)."""
    return _NUMBER.sub("#", reason.strip())


def collapse(events: Iterable[Mapping[str, Any]]) -> list[EventGroup]:
    """`events` (each with at, kind, node, reason; any order) as groups, the one seen last
    first; a group's reason is that of its latest event."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for e in events:
        groups.setdefault((e["node"], e["kind"], reason_class(e["reason"])), []).append(e)
    collapsed = []
    for members in groups.values():
        ordered = sorted(members, key=lambda e: e["at"])
        latest = ordered[-1]
        collapsed.append(
            EventGroup(latest["node"], latest["kind"], latest["reason"], len(ordered), ordered[0]["at"], latest["at"])
        )
    return sorted(collapsed, key=lambda g: (g.last, g.count), reverse=True)


def collapse_commands(commands: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Operator commands (each with at, node, trigger, to, actor, cause), one row per command
    given to many nodes: the same actor, trigger, target state and cause class. The row names
    its nodes as a host list and counts them; the latest first. An adoption of sixteen nodes
    is one row, not sixteen."""
    from fleetctl.inventory.hostlist import compress

    groups: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for c in commands:
        groups.setdefault((c["actor"], c["trigger"], c["to"], reason_class(c["cause"] or "")), []).append(c)
    rows = []
    for members in groups.values():
        latest = max(members, key=lambda c: c["at"])
        nodes = sorted({c["node"] for c in members})
        rows.append({**latest, "node": compress(nodes), "nodes": nodes, "count": len(members)})
    return sorted(rows, key=lambda r: r["at"], reverse=True)
