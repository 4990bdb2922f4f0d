"""Health events: what an XID means for the node, and when repeats escalate. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from checks.xid import xid_action

DAY_S = 24 * 3600.0
# How far a sender's clock may be from the server's before its times are not believed: NTP
# keeps real machines within seconds, so minutes apart is a wrong clock or a sleeping laptop.
MAX_SENDER_SKEW_S = 300.0


@dataclass(frozen=True)
class EscalationPolicy:
    # The same XID this many times within the window drains the node even when each
    # occurrence alone is only worth a warning (a GPU that keeps resetting is a bad GPU).
    repeats: int = 3
    window_s: float = DAY_S


@dataclass(frozen=True)
class EventVerdict:
    severity: str  # info | warning | critical
    action: str  # ignore | restart_app | reset_gpu | reboot | rma
    drain_now: bool
    escalated: bool
    reason: str


def plausible_time(sent_at: float, received_at: float, max_skew_s: float = MAX_SENDER_SKEW_S) -> float:
    """When an event happened, for windows and latencies: the sender's own time when it is
    close to the time the server received it, else the receive time. A CLI whose clock is
    days off, or an event that sat on a sleeping laptop, cannot move the event out of (or
    into) an escalation window, nor make a restart look minutes long or negative."""
    if sent_at and abs(sent_at - received_at) <= max_skew_s:
        return sent_at
    return received_at


def judge_health_event(code: int, earlier_same_code: list[float], now: float,
              policy: EscalationPolicy = EscalationPolicy()) -> EventVerdict:
    """`earlier_same_code`: times of earlier events with this XID on this node."""
    act = xid_action(code)
    if act.severity == "critical":
        return EventVerdict(act.severity, act.action, True, False, f"XID {code}: {act.action} (critical)")
    in_window = sum(1 for t in earlier_same_code if now - policy.window_s <= t <= now) + 1
    # Info-level XIDs are the application's own errors: repeats say nothing about the node.
    if act.severity == "warning" and in_window >= policy.repeats:
        return EventVerdict(act.severity, act.action, True, True,
                            f"XID {code} seen {in_window} times in {policy.window_s / 3600:.0f} h: escalated")
    return EventVerdict(act.severity, act.action, False, False, f"XID {code}: {act.action} ({in_window} in window)")
