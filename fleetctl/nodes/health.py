"""Health events: what an XID means for the node, and when repeats escalate: NVIDIA's catalog as
the site's policy (checks.xid_policy) amends it. Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from fleetctl.checks.result import SEVERITIES
from fleetctl.checks.signatures import signatures
from fleetctl.checks.xid_catalog import xid_action
from fleetctl.checks.xid_policy import FaultScope, XidPolicy, fault_scope

DAY_S = 24 * 3600.0
# How far a sender's clock may be from the server's before its times are not believed: NTP
# keeps real machines within seconds, so minutes apart is a wrong clock or a sleeping laptop.
MAX_SENDER_SKEW_S = 300.0
# How old a logged record's own time may be and still be believed: an agent spools its events
# while Temporal is unreachable, so a kernel line from an hour ago can arrive now and be real.
# Older than a week is a node clock that is wrong or a replayed archive, not a delivery delay.
MAX_RECORD_AGE_S = 7 * DAY_S


def health_event_id(*parts: object) -> str:
    """The one id of a health event, derived from what makes it that event (the node and where
    it was read, or what the sender said): the same parts give the same id, which the node's
    workflow records once."""
    return hashlib.sha256("/".join(map(str, parts)).encode()).hexdigest()[:32]


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


def plausible_time(
    sent_at: float,
    received_at: float,
    from_record: bool = False,
    max_skew_s: float = MAX_SENDER_SKEW_S,
    max_record_age_s: float = MAX_RECORD_AGE_S,
) -> float:
    """When an event happened, for windows and latencies.

    A sender's clock reading (`from_record` False: the CLI stamps an event with the moment it
    sends it) is believed only within `max_skew_s` of the receive time: a CLI whose clock is
    days off cannot move the event out of (or into) an escalation window, nor make a restart
    look minutes long or negative. A logged record's own time (`from_record`: the kernel log
    line, the alert's start) is when the fault happened, however long the event waited in a
    spool; it is kept when it lies in the past, up to `max_record_age_s`. A time in the future
    (beyond the skew), or none, is replaced by the receive time."""
    if not sent_at or sent_at > received_at + max_skew_s:
        return received_at
    if from_record and sent_at >= received_at - max_record_age_s:
        return sent_at
    return sent_at if sent_at >= received_at - max_skew_s else received_at


def checked_severity(severity: str) -> str:
    """A sender's severity word, or ValueError naming the allowed ones ("" is none given)."""
    if severity not in ("", *SEVERITIES):
        shown = severity if len(severity) <= 24 else severity[:20] + "..."
        raise ValueError(f"severity {shown!r} is not one of {', '.join(SEVERITIES)}")
    return severity


def xid_severity(code: int, policy: XidPolicy) -> str:
    """A code's severity: the site policy's where it sets one, else the catalog's."""
    rule = policy.xids.get(code)
    return rule.severity if rule is not None and rule.severity else xid_action(code).severity


def catalog_severity(code: int | None, signature: str = "", *, policy: XidPolicy) -> str:
    """What the catalog, as the site's policy amends it, says a fault is: the code's severity,
    the signature's (checks/catalog), the graver of the two; "" when it knows neither (an
    operator's report without a code, a sampled finding, another tool's drain)."""
    known = [xid_severity(code, policy)] if code is not None else []
    if signature in signatures():
        rule = policy.signatures.get(signature)
        known.append(rule.severity if rule is not None and rule.severity else signatures()[signature].severity)
    return max(known, key=SEVERITIES.index, default="")


def event_severity(said: str, code: int | None = None, signature: str = "", *, policy: XidPolicy) -> str:
    """The severity a health event travels with: what the sender said when that is graver than
    the policy's word for its code or signature, else the policy's. A sender may say more
    than the policy (an operator who knows the node is bad), never less: an XID 79 sent as a
    warning would wait in the node's queue behind a drain it should cut short. Only the site's
    policy file may demote a code. ValueError for a word that is none of SEVERITIES."""
    checked_severity(said)
    return max((said, catalog_severity(code, signature, policy=policy)), key=lambda s: SEVERITIES.index(s) if s else -1)


# Occurrences one recorded event (a folded storm) counts toward an escalation rule at most:
# every rule's count is far below it, and a storm folded to a million repeats must not build a
# million-entry list of times.
REPEATS_COUNTED = 1000


def occurrences(at: float, repeat_count: int) -> list[float]:
    """The times an event that stands for `repeat_count` folded repeats counts as: its time,
    once per repeat (at least once, at most REPEATS_COUNTED)."""
    return [at] * min(max(1, repeat_count), REPEATS_COUNTED)


def judge_health_event(
    code: int,
    earlier_same_code: list[float],
    now: float,
    *,
    policy: XidPolicy,
    escalation: EscalationPolicy = EscalationPolicy(),
) -> EventVerdict:
    """`earlier_same_code`: times of earlier events with this XID on this node. The code's
    severity and its count-in-window rule are the site policy's where it sets them; else a
    warning drains after `escalation`'s repeats and an info never does."""
    act = xid_action(code)
    severity = xid_severity(code, policy)
    rule = policy.xids.get(code)
    if severity == "critical":
        return EventVerdict(severity, act.action, True, False, f"XID {code}: {act.action} (critical)")
    threshold = rule.drain_after if rule is not None else None
    repeats, window_s = (
        (threshold.count, threshold.window_s) if threshold else (escalation.repeats, escalation.window_s)
    )
    in_window = sum(1 for t in earlier_same_code if now - window_s <= t <= now) + 1
    # Info-level XIDs are the application's own errors: repeats say nothing about the node,
    # unless the site's policy counts them.
    if (severity == "warning" or threshold is not None) and in_window >= repeats:
        return EventVerdict(
            severity,
            act.action,
            True,
            True,
            f"XID {code} seen {in_window} times in {_window_words(window_s)}: escalated",
        )
    return EventVerdict(severity, act.action, False, False, f"XID {code}: {act.action} ({in_window} in window)")


def _window_words(window_s: float) -> str:
    return f"{window_s / 3600:g} h" if window_s >= 3600 else f"{window_s / 60:g} min"


@dataclass(frozen=True)
class PolicyRow:
    """One row of the effective Xid/signature table (`fleetctl check xid-policy`)."""

    kind: str  # xid | signature
    key: str  # the code, or the signature's name
    name: str  # NVIDIA's mnemonic, or the signature's description
    catalog: str  # the catalog's severity
    severity: str  # the effective one
    drains: str  # when it drains the node (or only the GPU): at once, after N in a window, never
    source: str  # "catalog", or the site file that set a field of the row


def effective_table(policy: XidPolicy, escalation: EscalationPolicy = EscalationPolicy()) -> list[PolicyRow]:
    """Every catalog code and signature, and any code only the site names, as the policy makes them."""
    from fleetctl.checks.xid_catalog import xid_catalog

    rows = []
    for code in sorted(set(xid_catalog()) | set(policy.xids)):
        act, rule = xid_action(code), policy.xids.get(code)
        severity = xid_severity(code, policy)
        threshold = rule.drain_after if rule is not None else None
        if severity == "critical":
            drains = "at once"
        elif threshold is not None:
            drains = f"after {threshold.count} in {_window_words(threshold.window_s)}"
        elif severity == "warning":
            drains = f"after {escalation.repeats} in {_window_words(escalation.window_s)}"
        else:
            drains = "never"
        if drains != "never" and fault_scope(policy, code) is FaultScope.GPU:
            drains += ": its GPU only (when the event names it)"
        source = policy.source if rule is not None else "catalog"
        rows.append(PolicyRow("xid", str(code), act.mnemonic, act.severity, severity, drains, source))
    for name, sig in sorted(signatures().items()):
        severity = catalog_severity(None, name, policy=policy)
        # A signature without an Xid is judged by its severity alone (events keep no signature to count).
        drains = "at once" if severity == "critical" else "never"
        source = policy.source if name in policy.signatures else "catalog"
        rows.append(PolicyRow("signature", name, sig.description, sig.severity, severity, drains, source))
    return rows
