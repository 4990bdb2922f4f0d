"""The node's queued health events, critical first and in bursts: which events the node's
workflow records next, and recording them a burst per activity.

A flood of minor events (2,000 Xid 13 lines in a second) recorded one activity each kept a
critical event behind them for over a minute. Now every critical event queued is taken
first, and minor ones are taken up to a burst at a time, so a critical event waits for at
most one burst's activity. Within each kind the order of arrival is kept: escalation counts
(the same warning Xid N times in a window) depend on which events of a code came first, and
a code is always of one kind.

Repeats of a minor event are queued once (`queue_health_event`): the same source, code or
signature and severity as one queued and not yet taken is folded into it, its count and last
time raised. A storm of one Xid during a drain's wait is one item, not ten thousand, so the
queue (and with it the node's state, its continue-as-new input, and the `current` query's
answer) stays small whatever a sender sends."""

from __future__ import annotations

import dataclasses

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from fleetctl.text import bounded
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.api import HealthEventBatch, HealthEventBatchResult, HealthEventInput, WorkItem, WorkKind
    from fleetctl.workflows.definitions.shared import quick_local

# Events recorded per activity: a message is at most 2 KiB, so a burst stays under
# Temporal's 512 KiB payload warning; and a critical event that arrives during a burst
# waits for at most this many records.
EVENTS_PER_ACTIVITY = 200
# Distinct minor events queued at most (each folds its repeats): a message is at most 2 KiB
# of text, so the queue stays well under Temporal's 2 MB payload limit as continue-as-new's
# input. Past it a minor event that folds into none is counted and dropped; a critical one
# is always queued.
QUEUED_MINOR_EVENTS = 128


def bounded_event(ev: HealthEventInput) -> HealthEventInput:
    """The event as the node's workflow keeps it: every text bounded (fleetctl.text.bounded).
    The intake, the agent and the CLI bound what they send; a sender that signals Temporal
    directly must not grow the workflow's state, its history or an activity's payload either."""
    return dataclasses.replace(
        ev,
        node=bounded(ev.node, 255),
        source=bounded(ev.source, 64),
        message=bounded(ev.message),
        actor=bounded(ev.actor, 255),
        event_id=bounded(ev.event_id, 255),
        severity=bounded(ev.severity, 64),
    )


def is_critical(ev: HealthEventInput) -> bool:
    """Sent as critical (the agent and the intake read the Xid catalog, `node event` takes
    --severity). The sender's word, not the catalog read here: what a replay decides must
    come from its history, and a catalog updated with the worker would reorder the queue of
    a workflow in flight. It only orders the queue: the activity judges each event by the
    catalog, so a sender that calls a minor Xid critical moves it up, and drains nothing."""
    return ev.severity == "critical"


def repeat_key(ev: HealthEventInput) -> tuple[str, int | None, str, str, str] | None:
    """What makes two events the same repeated fault (folded into one queued item), or None
    for an event that is never folded: a critical one (each is acted on) and one with
    neither code nor signature (nothing says two of them are the same fault). The same code on
    two GPUs is two faults (each GPU may be taken out alone)."""
    if is_critical(ev) or (ev.code is None and not ev.signature):
        return None
    return (ev.source, ev.code, ev.signature, ev.severity, ev.gpu)


def queue_health_event(work: list[WorkItem], item: WorkItem) -> bool:
    """Queue the health event `item` in `work`, folded into the queued item it repeats (its
    count added, its last time kept); False when it was dropped instead: a minor event that
    repeats none, with QUEUED_MINOR_EVENTS distinct ones queued already."""
    key = repeat_key(item.event) if item.event is not None else None
    if key is None:
        work.append(item)
        return True
    minor = [w for w in work if w.kind is WorkKind.HEALTH_EVENT and w.event is not None and not is_critical(w.event)]
    same = next((w for w in minor if repeat_key(event_of(w)) == key), None)
    if same is None:
        if len(minor) >= QUEUED_MINOR_EVENTS:
            return False
        work.append(item)
        return True
    first, ev = same.event, item.event
    assert first is not None and ev is not None  # both keyed above
    same.event = dataclasses.replace(
        first,
        repeat_count=first.repeat_count + ev.repeat_count,
        first_seen=min(first.first_seen or first.at, ev.first_seen or ev.at),
        last_seen=max(first.last_seen or first.at, ev.last_seen or ev.at),
    )
    return True


def event_of(item: WorkItem) -> HealthEventInput:
    """The event of a queued health-event item (every such item carries one)."""
    if item.event is None:
        raise ValueError(f"a {item.kind.value} item carries no health event")
    return item.event


def next_health_events(work: list[WorkItem], first: WorkItem, limit: int = EVENTS_PER_ACTIVITY) -> list[WorkItem]:
    """The health events to record now, taken out of `work`: every queued critical one (up to
    `limit`), else the oldest `limit`. `first` (just taken off the queue) goes back to the
    front of it when it has to wait."""
    queued = [first] + [w for w in work if w.kind is WorkKind.HEALTH_EVENT and w.event is not None]
    critical = [w for w in queued if is_critical(event_of(w))]
    chosen = (critical or queued)[:limit]
    taken = {id(w) for w in chosen}
    work[:] = [w for w in work if id(w) not in taken]
    if id(first) not in taken:
        work.insert(0, first)
    return chosen


async def record_health_events(node: str, events: list[HealthEventInput]) -> HealthEventBatchResult:
    """Record and judge `events` in order, a burst per activity."""
    result = HealthEventBatchResult()
    for start in range(0, len(events), EVENTS_PER_ACTIVITY):
        part: HealthEventBatchResult = await quick_local(
            NodeActivities.record_health_events, HealthEventBatch(node, events[start : start + EVENTS_PER_ACTIVITY])
        )
        result.acted += [dataclasses.replace(v, index=v.index + start) for v in part.acted]
        result.refusals += part.refusals
        result.last_reason = part.last_reason or result.last_reason
    return result
