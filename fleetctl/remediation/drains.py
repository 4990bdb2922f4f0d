"""What a drain is for: the closed set of drain kinds, and a move out of production judged
planned work or a fault. Pure. Read by the workflows (what a drain records), `node show`
and `node history`, the lemon rule and the report.

What a drain is travels in the failure label it records (node_events.failure,
fleetctl.remediation.events.Event.failure): `<kind>` or `<kind> <subject>` (`xid 79`,
`check nccl-allreduce`, `straggler nvlink_rx`, `health`, `operator`), or `maintenance` for
an operator's planned work. An operator's drain that records nothing (before drains said
what they were) is planned work too.
"""

from __future__ import annotations

from enum import Enum

from fleetctl.nodes.lifecycle import NodeState


class DrainKind(str, Enum):
    """What took a node out of production, as the report and the exporter class it (the
    exporter's `cause` label): planned work, or the kind of fault its failure label names.
    The values are stored (the first word of node_events.failure) and exported: never rename one."""

    MAINTENANCE = "maintenance"  # an operator's planned work: no fault
    XID = "xid"  # an XID: `xid <code>`
    CHECK = "check"  # a check failed on the profile's floors: `check <name>`
    STRAGGLER = "straggler"  # below the node's peers, in a sweep or in production: `straggler <check or metric>`
    HEALTH = "health"  # a health event without a code
    OPERATOR = "operator"  # an operator's drain for a fault it names no code or check of
    AUTOMATION = "automation"  # an automated drain that records no failure (before drains said)
    OTHER = "other"  # no drain for planned work or a fault (an operator's retirement, ...)


# The failure label a planned drain records: the drain kind itself, with no subject.
PLANNED = DrainKind.MAINTENANCE.value


def failure_label(kind: DrainKind, subject: object = None) -> str:
    """The failure a drain records: its kind, then what it names (a code, a check, a metric)."""
    return kind.value if subject is None else f"{kind.value} {subject}"


def drain_kind(failure: str) -> DrainKind:
    """The kind a recorded failure label names; ValueError for a label that names none."""
    word = failure.split(" ", 1)[0]
    try:
        return DrainKind(word)
    except ValueError:
        raise ValueError(f"failure {failure!r} names no drain kind ({', '.join(k.value for k in DrainKind)})") from None


def is_planned_drain(from_state: str, to_state: str, failure: str, actor_kind: str) -> bool:
    """A move out of production for planned work, not for a fault."""
    if from_state != NodeState.PRODUCTION.value or to_state == NodeState.PRODUCTION.value:
        return False
    return failure == PLANNED or (not failure and actor_kind == "operator")


def what_a_drain_is(from_state: str, to_state: str, failure: str, actor_kind: str, trigger: str = "") -> str:
    """A move out of production in words for `node show` and the history: `maintenance`,
    `failure: <label>` (the label the report counts it under), or "" for any other move."""
    if from_state != NodeState.PRODUCTION.value or to_state == NodeState.PRODUCTION.value:
        return ""
    if is_planned_drain(from_state, to_state, failure, actor_kind):
        return PLANNED
    if failure:
        return f"failure: {failure}"
    automated = actor_kind == "automation" and trigger == "drain"
    return f"failure: {DrainKind.AUTOMATION.value}" if automated else ""
