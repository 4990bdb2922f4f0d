"""What a runbook reacts to and what a drain says it is for: the closed set of event kinds and
the event itself, as the workflows carry it (`Event.to_dict`). Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import Any, assert_never

from fleetctl.remediation.drains import DrainKind, failure_label


class EventKind(str, Enum):
    """The kinds of event. The values travel in workflow payloads and stored runs: never
    rename one."""

    XID = "xid"  # an XID from the kernel log (code)
    CHECK = "check"  # a check result (check, status)
    STRAGGLER = "straggler"  # a production straggler (check: the metric that found it)
    MANUAL = "manual"  # a health event without a code, a runbook run by hand
    OPERATOR = "operator"  # an operator's drain for a fault it names no code or check of
    MAINTENANCE = "maintenance"  # an operator's drain for planned work: no fault


@dataclass(frozen=True)
class Event:
    """What a runbook reacts to: an XID from the kernel log, a check result, or an operator.
    A kind given as its value is taken as the EventKind; any other is a ValueError."""

    kind: EventKind
    code: int | None = None
    check: str | None = None
    status: str | None = None
    message: str = ""
    # A check failed not on the profile's floors but against the node's peers (a straggler):
    # remediated as the check's failure, counted as a rule of its own.
    against_peers: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", EventKind(self.kind))

    @property
    def summary(self) -> str:
        said = f": {self.message}" if self.message else ""
        match self.kind:
            case EventKind.XID:
                return f"XID {self.code}{said}"
            case EventKind.CHECK:
                return f"check {self.check} {self.status}{said}"
            case EventKind.STRAGGLER:
                return f"straggler on {self.check}{said}"
            case EventKind.MANUAL | EventKind.OPERATOR | EventKind.MAINTENANCE:
                return self.message or "operator request"
            case _:
                assert_never(self.kind)

    @property
    def critical(self) -> bool:
        """An XID whose catalog severity is critical: the capacity guard lets its drain use
        the reserve kept for such faults."""
        from fleetctl.checks.xid import xid_action  # when asked: parsing runbooks needs no Xid catalog

        return self.kind is EventKind.XID and self.code is not None and xid_action(self.code).severity == "critical"

    @property
    def failure(self) -> str:
        """The failure a drain for this event is counted as (fleetctl.reliability.metrics' cause label):
        `xid <code>`, `check <name>`, `straggler <check>` for a check a sweep passed well
        below the node's peers, `straggler <metric>` for a node behind its job's other nodes
        in production (each its own label: rule precision tells the rules apart), or `health`
        for a health event without a code."""
        match self.kind:
            case EventKind.XID:
                return failure_label(DrainKind.XID, self.code)
            case EventKind.CHECK:
                return failure_label(DrainKind.STRAGGLER if self.against_peers else DrainKind.CHECK, self.check)
            case EventKind.STRAGGLER:
                return failure_label(DrainKind.STRAGGLER, self.check)
            case EventKind.MAINTENANCE:
                return failure_label(DrainKind.MAINTENANCE)
            case EventKind.OPERATOR:
                return failure_label(DrainKind.OPERATOR)
            case EventKind.MANUAL:
                return failure_label(DrainKind.HEALTH)
            case _:
                assert_never(self.kind)

    @property
    def remediable(self) -> bool:
        """Whether a runbook may take this event on: planned work and an operator's fault
        without a code or check are the operator's to handle, not a runbook's fallback."""
        return self.kind not in (EventKind.MANUAL, EventKind.OPERATOR, EventKind.MAINTENANCE)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "kind": self.kind.value,
            "code": self.code,
            "check": self.check,
            "status": self.status,
            "message": self.message,
            "summary": self.summary,
        }
        # Only when set: events recorded before peers were judged keep their shape.
        return {**d, "against_peers": True} if self.against_peers else d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Event:
        return cls(
            EventKind(d.get("kind", EventKind.MANUAL.value)),
            d.get("code"),
            d.get("check"),
            d.get("status"),
            d.get("message", ""),
            d.get("against_peers") is True,
        )
