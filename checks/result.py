"""The one result type every check returns: a status, numbers, what is wrong, and why."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

# How bad a GPU fault is (the Xid and signature catalogs, health events): critical drains
# the node now. Here, with the result types, so that what only validates a word (the CLI's
# `node event --severity`) does not load a parser or a catalog.
SEVERITIES = ("info", "warning", "critical")


class Status(str, Enum):
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"  # the output could not be judged: empty, truncated, or not the tool's format


@dataclass
class Finding:
    what: str
    where: str | None = None  # "GPU 3", "mlx5_0 port 1", a PCI address; None when node-wide
    severity: str = "fail"  # "info", "warn" or "fail"


@dataclass
class CheckResult:
    status: Status
    metrics: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    reason: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "status": self.status.value,
            "metrics": _json_safe(self.metrics),
            "findings": [asdict(f) for f in self.findings],
            "reason": self.reason,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CheckResult:
        return cls(
            status=Status(data["status"]),
            metrics=dict(data.get("metrics", {})),
            findings=[Finding(**f) for f in data.get("findings", [])],
            reason=data.get("reason", ""),
        )


def _json_safe(value: Any) -> Any:
    """NaN and infinity are not JSON; tuples become lists so from_dict(to_dict()) round-trips."""
    if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
        return None
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value
