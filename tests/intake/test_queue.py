"""The intake's queue decisions (fleetctl.intake.queue), table-driven: what goes next, what
merges, what a flood may hold, what a refusal holds."""

from __future__ import annotations

import itertools

import pytest

from fleetctl.intake.queue import MAX_ATTEMPTS, REPEATS_KEPT, Admission, DeliveryQueue

_lines = itertools.count()


def ev(node: str, code: int | None = 13, severity: str = "warning", credential: str = "operator", **more) -> dict:
    n = next(_lines)
    return {
        "node": node,
        "code": code,
        "severity": severity,
        "credential": credential,
        "event_id": f"e{n}",
        "at": float(n),
        "message": more.pop("message", f"m{n}"),
        **more,
    }


def add(queue: DeliveryQueue, *events: dict) -> list[Admission]:
    return [queue.add(e, next(_lines))[0] for e in events]


def order(queue: DeliveryQueue, now: float = 0.0, limit: int = 100) -> list[tuple[str, list[str]]]:
    """The batches taken, one a turn, each delivered, until none is ready."""
    out = []
    while picked := queue.take(now, limit):
        node, batch = picked
        out.append((node, [e.event["message"] for e in batch]))
        for entry in batch:
            queue.delivered(entry)
        queue.release(node, batch)
    return out


def test_critical_events_go_first_across_nodes_then_the_nodes_take_turns() -> None:
    queue = DeliveryQueue(100, 100)
    add(queue, *(ev("flood-a", None, message=f"a{i}") for i in range(3)))
    add(queue, *(ev("flood-b", None, message=f"b{i}") for i in range(3)))
    add(queue, ev("quiet", 79, "critical", message="xid79"), ev("flood-a", 79, "critical", message="a-xid79"))
    assert order(queue, limit=2) == [
        ("quiet", ["xid79"]),  # its critical event waited longest
        ("flood-a", ["a-xid79", "a0"]),  # its critical event first, then its oldest
        ("flood-b", ["b0", "b1"]),
        ("flood-a", ["a1", "a2"]),
        ("flood-b", ["b2"]),
    ]


@pytest.mark.parametrize(
    "events, merged",
    [
        # the same code on one node: the first REPEATS_KEPT stay separate, the rest merge
        ([{"node": "n1", "code": 13}] * (REPEATS_KEPT + 4), 4),
        # another node, another code, another severity, a critical event: never merged
        ([{"node": f"n{i}", "code": 13} for i in range(REPEATS_KEPT + 4)], 0),
        ([{"node": "n1", "code": c} for c in range(REPEATS_KEPT + 4)], 0),
        ([{"node": "n1", "code": 13, "severity": s} for s in ("info", "warning") * 3], 0),
        ([{"node": "n1", "code": 79, "severity": "critical"}] * (REPEATS_KEPT + 4), 0),
        # without a code or a signature there is nothing to say two events are one
        ([{"node": "n1", "code": None}] * (REPEATS_KEPT + 4), 0),
        ([{"node": "n1", "code": None, "signature": "nvswitch_sxid_fatal"}] * (REPEATS_KEPT + 4), 4),
    ],
)
def test_repeats_of_a_minor_event_merge_past_what_escalation_counts(events, merged) -> None:
    queue = DeliveryQueue(100, 100)
    assert add(queue, *(ev(**e) for e in events)).count(Admission.MERGED) == merged
    assert queue.size == len(events) - merged and queue.merged == merged
    if merged:
        newest = queue.entries()[-1]
        assert newest.repeat_count == merged + 1
        assert newest.event["last_at"] > newest.event["at"]  # first and last seen


def test_a_repeat_never_merges_into_an_event_being_sent() -> None:
    queue = DeliveryQueue(100, 100)
    add(queue, *(ev("n1") for _ in range(REPEATS_KEPT)))
    node, batch = queue.take(0.0, 100)
    assert add(queue, ev("n1")) == [Admission.QUEUED]  # the newest is on its way: a new one starts
    assert add(queue, ev("n1")) == [Admission.MERGED] and queue.size == REPEATS_KEPT + 1
    queue.release(node, batch)


def test_past_its_bound_a_credential_loses_minor_events_never_a_critical_one() -> None:
    queue = DeliveryQueue(per_credential=3, total=100)
    flood = add(queue, *(ev("n1", None, credential="agent:n1") for _ in range(5)))
    assert flood == [Admission.QUEUED] * 3 + [Admission.DROPPED] * 2
    assert add(queue, ev("n1", 79, "critical", credential="agent:n1")) == [Admission.QUEUED]
    assert add(queue, ev("n2", None, credential="agent:n2")) == [Admission.QUEUED]  # another credential's room
    assert queue.queued_by("agent:n1") == 4


def test_past_the_total_a_critical_event_takes_the_oldest_minor_ones_room_or_is_refused() -> None:
    queue = DeliveryQueue(per_credential=100, total=2)
    add(queue, ev("n1", None, message="old"), ev("n2", None, message="new"))
    admission, displaced = queue.add(ev("n3", 79, "critical"), next(_lines))
    assert admission is Admission.QUEUED and len(displaced) == 1
    assert [e.event["code"] for e in queue.entries()] == [None, 79]
    assert queue.entries()[0].event["message"] == "new"  # the oldest minor event made the room
    add(queue, ev("n4", 79, "critical"))
    assert add(queue, ev("n5", 79, "critical")) == [Admission.REFUSED]  # nothing minor left to drop
    assert add(queue, ev("n5", None)) == [Admission.DROPPED]
    assert queue.add(ev("n5", 79, "critical"), next(_lines), force=True)[0] is Admission.QUEUED


def test_a_refusing_node_is_held_alone_and_its_event_given_up_after_the_attempts() -> None:
    queue = DeliveryQueue(100, 100)
    add(queue, ev("refuses", None, message="r"), ev("fine", None, message="f"))
    node, (entry,) = queue.take(0.0, 1)
    assert node == "refuses" and queue.refused(entry, 0.0) == []
    queue.release(node, [entry])
    assert order(queue) == [("fine", ["f"])]  # the held node waits, the other goes
    assert queue.next_ready(0.0) == pytest.approx(0.5) and queue.held_nodes(0.0) == 1
    for attempt in range(2, MAX_ATTEMPTS + 1):
        now = queue.next_ready(0.0) or 0.0
        node, (entry,) = queue.take(now, 1)
        gone = queue.refused(entry, now)
        queue.release(node, [entry])
        assert bool(gone) is (attempt == MAX_ATTEMPTS)
    assert queue.size == 0


def test_a_critical_event_queued_during_a_batch_stops_the_batch_before_its_next_minor_event() -> None:
    queue = DeliveryQueue(100, 100)
    add(queue, ev("n1", None), ev("n1", None))
    node, batch = queue.take(0.0, 100)
    assert not queue.critical_waiting("n1")
    add(queue, ev("n1", 79, "critical", message="xid79"))
    assert queue.critical_waiting("n1") and not queue.critical_waiting("n2")
    queue.delivered(batch[0])
    queue.release(node, batch)
    assert order(queue)[0] == ("n1", ["xid79", batch[1].event["message"]])
