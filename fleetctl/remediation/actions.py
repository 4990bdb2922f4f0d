"""What a runbook step may do: each action's parameters, how each is checked when the runbook
loads, which actions touch the hardware, and the state change a `set_state` step asks for.
Pure.

A string parameter may be a Jinja2 template (fleetctl.remediation.sandbox): a duration that
is one is checked after it is rendered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from fleetctl.durations import parse_seconds
from fleetctl.nodes.lifecycle import RULES, NodeState

CHECK_STATUSES = ("pass", "warn", "fail", "error")


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError(f"expected text, got {type(v).__name__}")
    return v


def _duration(v: Any) -> Any:
    if isinstance(v, str) and "{{" in v:
        return v  # checked after rendering
    parse_seconds(v)
    return v


def check_statuses(v: Any) -> list[str]:
    values = [v] if isinstance(v, str) else v
    if not isinstance(values, list) or not values or any(s not in CHECK_STATUSES for s in values):
        raise ValueError(f"expected check statuses from {', '.join(CHECK_STATUSES)}, got {v!r}")
    return values


def _state(v: Any) -> str:
    if not isinstance(v, str) or v not in {s.value for s in NodeState} or v == NodeState.RETIRED.value:
        raise ValueError(f"unknown or operator-only state {v!r}")
    return v


def _gpu(v: Any) -> Any:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"expected a GPU index, got {v!r}")
    return v


@dataclass(frozen=True)
class Param:
    check: Callable[[Any], Any]
    required: bool = False
    default: Any = None


ACTIONS: dict[str, dict[str, Param]] = {
    "drain": {"reason": Param(_str, default="runbook {{ runbook }}: {{ event.summary }}")},
    "restart_jobs": {},
    "gpu_reset": {"gpu": Param(_gpu), "idle_timeout": Param(_duration, default="30m")},
    "reboot": {"timeout": Param(_duration, default="15m"), "reset_type": Param(_str, default="ForceRestart")},
    "run_check": {"check": Param(_str, required=True), "expect": Param(check_statuses, default=["pass"])},
    "run_suite": {"suite": Param(_str, required=True), "expect": Param(check_statuses, default=["pass"])},
    "wait": {"duration": Param(_duration, required=True)},
    "set_state": {"state": Param(_state, required=True), "cause": Param(_str, default="runbook {{ runbook }}")},
    "rma": {"reason": Param(_str, default="runbook {{ runbook }}: {{ event.summary }}")},
    "notify": {"message": Param(_str, required=True), "severity": Param(_str, default="info")},
}

# Actions that touch the hardware: the node must be out of service (maintenance) first.
DISRUPTIVE = frozenset({"gpu_reset", "reboot", "run_check", "run_suite"})
# Actions done through the node's BMC (fleetctl.bmc): on a node without one they fail.
BMC_ACTIONS = frozenset({"reboot"})


def trigger_towards(current: str, target: str) -> str | None:
    """The automation trigger that moves a node from `current` straight to `target`, if any."""
    for trigger, rule in RULES.items():
        if rule.target.value == target and NodeState(current) in rule.sources and not rule.operator_only:
            return trigger.value
    return None
