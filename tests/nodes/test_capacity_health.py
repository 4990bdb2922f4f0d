"""The capacity guard's decisions and health-event escalation, with synthetic clocks."""

from __future__ import annotations

from datetime import UTC

import pytest

from fleetctl.checks.xid_policy import CATALOG
from fleetctl.nodes.capacity import GuardPolicy, RemovalRequest, decide, snapshot_from_states
from fleetctl.nodes.health import DAY_S, judge_health_event

POLICY = GuardPolicy()


def fleet(production: int, racks: int = 4, unavailable: dict[int, int] | None = None):
    pairs = []
    for i in range(production):
        pairs.append((f"r{i % racks}", "production"))
    for rack, count in (unavailable or {}).items():
        pairs += [(f"r{rack}", "maintenance")] * count
    return snapshot_from_states(pairs)


def req(node="n", rack="r0", **kw):
    return RemovalRequest(node=node, rack=rack, reason="check failed", actor="sweep", **kw)


@pytest.mark.parametrize(
    "snapshot,request_,failures,breaker,granted,reason",
    [
        (fleet(20), req(), {}, False, True, "within limits"),
        (fleet(18, unavailable={1: 2}), req(), {}, False, False, "fleet limit: 2 of 20"),
        (fleet(19, unavailable={0: 1}), req(), {}, False, False, "rack limit: 1 of 6"),
        (fleet(19, unavailable={0: 1}), req(rack="r1"), {}, False, True, "within limits"),
        (fleet(20), req(), {}, True, False, "breaker is open"),
        (fleet(20), req(), {f"o{i}": 100.0 for i in range(4)}, False, False, "storm: 5 nodes failing"),
        (fleet(20), req(), {f"o{i}": 100.0 - 601 for i in range(4)}, False, True, "within limits"),  # aged out
        (fleet(20), req(), {"n": 99.0}, False, True, "within limits"),  # the same node again is no storm
        (fleet(18, unavailable={0: 2}), req(critical=True), {}, True, True, "critical fault"),
        (fleet(18, unavailable={0: 2}), req(force=True), {}, True, True, "forced by sweep"),
        (fleet(3), req(), {}, False, True, "within limits"),  # one bad node is not a storm
        (fleet(3), req(), {"a": 99.0, "b": 99.5}, False, False, "storm: 3 nodes failing"),  # three are
        (fleet(10), req(), {}, False, True, "within limits"),  # at least one node may be out
    ],
)
def test_decide(snapshot, request_, failures, breaker, granted, reason) -> None:
    d = decide(POLICY, snapshot, request_, failures, now=100.0, breaker_open=breaker)
    assert d.granted is granted and reason in d.reason


def test_pending_grants_count_against_the_limit() -> None:
    d = decide(POLICY, fleet(20), req(rack="r2"), {}, 0.0, False, pending_grants=2)
    assert not d.granted and "fleet limit" in d.reason


def test_storm_of_forty_percent_drains_no_more_than_the_limit() -> None:
    """8 of 20 nodes report failures at once: 2 granted, then capacity, then the breaker."""
    snapshot, failures, breaker, granted = fleet(20), {}, False, []
    for i in range(8):
        d = decide(
            POLICY,
            snapshot,
            req(node=f"n{i}", rack=f"r{i % 4}"),
            failures,
            0.0,
            breaker,
            pending_grants=len(granted),
            pending_in_rack=sum(1 for g in granted if g % 4 == i % 4),
        )
        failures[f"n{i}"] = 0.0
        breaker = breaker or d.breaker_opened
        if d.granted:
            granted.append(i)
    assert len(granted) == 2 and breaker


def test_critical_xid_drains_now() -> None:
    v = judge_health_event(79, [], 0.0, policy=CATALOG)
    assert v.drain_now and v.severity == "critical" and not v.escalated


def test_repeated_warning_xid_escalates_within_the_window_only() -> None:
    now = 10 * DAY_S
    assert not judge_health_event(94, [now - 100], now, policy=CATALOG).drain_now
    v = judge_health_event(94, [now - 100, now - 200], now, policy=CATALOG)
    assert v.drain_now and v.escalated
    # the same repeats spread over more than a day do not
    assert not judge_health_event(94, [now - 1.5 * DAY_S, now - 3 * DAY_S], now, policy=CATALOG).drain_now


def test_application_errors_never_escalate() -> None:
    assert not judge_health_event(13, [1.0, 2.0, 3.0], 4.0, policy=CATALOG).drain_now


@pytest.mark.parametrize(
    "grant, node, version, covers",
    [
        ("capacity-guard/f:n1@4", "n1", 4, True),
        ("capacity-guard/f:n1@3", "n1", 4, False),  # from before the node last moved
        ("capacity-guard/f:n2@4", "n1", 4, False),  # another node's
        ("n1@4", "n1", 4, False),  # no guard named
        ("", "n1", 4, False),
    ],
)
def test_a_grant_covers_one_node_at_one_version(grant, node, version, covers) -> None:
    from fleetctl.nodes.capacity import grant_covers, grant_for

    assert grant_covers(grant, node, version) is covers
    assert grant_covers(grant_for("capacity-guard/f", node, version), node, version)


@pytest.mark.parametrize(
    "request_, breaker, reason",
    [
        (req(), False, "dry run: would grant (within limits)"),
        (req(critical=True), False, "dry run: would grant (critical fault"),
    ],
)
def test_a_dry_run_guard_says_what_it_would_grant_and_grants_nothing(request_, breaker, reason) -> None:
    dry = GuardPolicy(dry_run=True)
    d = decide(dry, fleet(20), request_, {}, now=100.0, breaker_open=breaker)
    assert not d.granted and d.dry_run and d.reason.startswith(reason)
    # a refusal is the same refusal, and an operator's forced removal is not automation's
    assert decide(dry, fleet(18, unavailable={1: 2}), req(), {}, 100.0, False).reason.startswith("fleet limit")
    assert decide(dry, fleet(20), req(force=True), {}, 100.0, False).granted


@pytest.mark.parametrize(
    "state, age_s, counted",
    [
        ("rma", 10, "maintenance"),  # sent to RMA inside the storm window: still out for repair
        ("rma", 10_000, "rma"),  # an old RMA leaves the count
        ("maintenance", 10, "maintenance"),
        ("production", 10, "production"),
    ],
)
def test_a_fresh_rma_still_counts_against_the_budget(state, age_s, counted) -> None:
    from datetime import datetime, timedelta

    from fleetctl.nodes.capacity import GuardPolicy, counted_state

    now = datetime(2026, 12, 1, tzinfo=UTC)
    policy = GuardPolicy(storm_window_s=600)
    assert counted_state(state, now - timedelta(seconds=age_s), now, policy) == counted


@pytest.mark.parametrize(
    "snapshot, request_, failures, breaker, pending, until",
    [
        # 20 serving, 2 out, max 2: one must come back before a third may go.
        (fleet(18, unavailable={1: 2}), req(), {}, False, (0, 0), "can go once 1 node of the fleet is back in service"),
        # and with two granted that have not left yet (4 counted, max 2): three must come back.
        (
            fleet(18, unavailable={1: 2}),
            req(),
            {},
            False,
            (2, 0),
            "can go once 3 nodes of the fleet are back in service",
        ),
        # rack r0: 6 serving, 1 out, max 1.
        (fleet(19, unavailable={0: 1}), req(), {}, False, (0, 0), "can go once 1 node of r0 is back in service"),
        (fleet(20), req(), {}, True, (0, 0), "held until an operator resumes automation (fleet resume-automation)"),
        (
            fleet(20),
            req(),
            {f"o{i}": 100.0 for i in range(4)},
            False,
            (0, 0),
            "held until an operator resumes automation (fleet resume-automation)",
        ),
    ],
)
def test_a_held_drain_says_what_it_waits_for(snapshot, request_, failures, breaker, pending, until) -> None:
    """A refusal says what would let the drain go, not only which limit held it."""
    d = decide(
        POLICY,
        snapshot,
        request_,
        failures,
        now=100.0,
        breaker_open=breaker,
        pending_grants=pending[0],
        pending_in_rack=pending[1],
    )
    assert not d.granted and d.reason.endswith(until)
