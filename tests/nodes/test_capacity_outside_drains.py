"""Drains made outside fleetctl (a person in Slurm, NHC) and the capacity guard: counted as
unavailable in its arithmetic, never a failure toward the storm breaker, and a drain of such a
node takes nothing more (fleetctl.nodes.capacity: counted_outside, already_out)."""

from __future__ import annotations

import pytest

from fleetctl.nodes.capacity import (
    ALREADY_OUT,
    GuardPolicy,
    RemovalRequest,
    counted_outside,
    counts_as_failure,
    decide,
    snapshot_from_states,
)

POLICY = GuardPolicy()  # fleet 10%, rack 25%, storm 20% (at least 3)
NODES = [f"n{i:02d}" for i in range(20)]


def snapshot(drained_outside: list[str]):
    """20 production nodes in 4 racks of 5, `drained_outside` of them drained by another tool."""
    snap = snapshot_from_states(
        [(f"r{i // 5}", counted_outside("production", n in drained_outside)) for i, n in enumerate(NODES)]
    )
    snap.drained_outside = {n: f"external-drain/{n}#0" for n in drained_outside}
    return snap


def ask(node: str, **kw) -> RemovalRequest:
    return RemovalRequest(node=node, rack=f"r{NODES.index(node) // 5}", reason="why", actor="automation", **kw)


@pytest.mark.parametrize(
    "state,outside,counted",
    [
        ("production", True, "maintenance"),  # serving nothing: out of service
        ("production", False, "production"),
        ("maintenance", True, "maintenance"),
        ("rma", True, "rma"),  # only a production node is counted anew
    ],
)
def test_a_production_node_drained_outside_is_counted_out_of_service(state, outside, counted) -> None:
    assert counted_outside(state, outside) == counted


def test_outside_drains_use_the_budget_an_automated_drain_needs() -> None:
    """Two of 20 drained outside fleetctl fill the fleet's 10%: another node's drain is refused."""
    snap = snapshot(["n00", "n05"])
    assert (snap.serving, snap.unavailable, snap.production) == (20, 2, 18)
    refused = decide(POLICY, snap, ask("n10"), {}, now=100.0, breaker_open=False)
    assert not refused.granted and refused.reason.startswith("fleet limit: 2 of 20 already unavailable")
    assert decide(POLICY, snapshot(["n00"]), ask("n10"), {}, now=100.0, breaker_open=False).granted


def test_a_drain_of_a_node_drained_outside_takes_nothing_and_is_no_failure() -> None:
    """25% of the fleet drained outside within the storm window, each asked for: every one is
    granted (it is out already), past the limits and an open breaker; none counts as a failure."""
    outside = NODES[:5]
    snap = snapshot(outside)
    failures: dict[str, float] = {}
    for node in outside:
        decision = decide(POLICY, snap, ask(node), failures, now=100.0, breaker_open=False)
        assert decision.granted and decision.reason == ALREADY_OUT and not decision.breaker_opened
        if counts_as_failure(ask(node), snap):
            failures[node] = 100.0
    assert failures == {}
    assert decide(POLICY, snap, ask("n00"), {}, now=100.0, breaker_open=True).granted
    # Any other node's request is a failure as ever, and waits for the limits.
    assert counts_as_failure(ask("n10"), snap)
    assert not decide(POLICY, snap, ask("n10"), failures, now=100.0, breaker_open=False).granted
