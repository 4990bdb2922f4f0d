"""A forced or critical removal is decided without the fleet's counts (fleetctl.nodes.capacity.
reads_snapshot), so the capacity guard does not wait for them: table-driven over policies,
breaker states, failure histories and pending grants, the decision is the same whatever
the snapshot says; for any other removal the snapshot decides (the table can fail)."""

from __future__ import annotations

import itertools

import pytest

from fleetctl.nodes.capacity import FleetSnapshot, GuardPolicy, RackCounts, RemovalRequest, decide, reads_snapshot

NOW = 1_000_000.0
SNAPSHOTS = {
    "empty": FleetSnapshot(),
    "roomy": FleetSnapshot({"r1": RackCounts(serving=100, unavailable=0, production=100)}),
    "at every limit": FleetSnapshot({"r1": RackCounts(serving=10, unavailable=3, production=7)}),
    "a tiny fleet": FleetSnapshot({"r1": RackCounts(serving=2, unavailable=0, production=2)}),
}
POLICIES = [GuardPolicy(), GuardPolicy(dry_run=True), GuardPolicy(max_unavailable_fleet=0.0, max_unavailable_rack=0.0)]
FAILURES = [{}, {f"n{i}": NOW - 1 for i in range(5)}]
CONTEXTS = list(itertools.product(POLICIES, FAILURES, [False, True], [0, 3]))


def _decisions(req: RemovalRequest, policy, failures, breaker_open, pending) -> set:
    return {
        repr(decide(policy, snap, req, failures, NOW, breaker_open, pending_grants=pending, pending_in_rack=pending))
        for snap in SNAPSHOTS.values()
    }


@pytest.mark.parametrize(
    "req",
    [
        RemovalRequest("n9", "r1", "XID 79", "agent", critical=True),
        RemovalRequest("n9", "r1", "operator", "alice", force=True),
        RemovalRequest("n9", "r1", "both", "alice", critical=True, force=True),
    ],
    ids=["critical", "forced", "both"],
)
def test_a_forced_or_critical_decision_does_not_read_the_snapshot(req: RemovalRequest) -> None:
    assert not reads_snapshot(req)
    for policy, failures, breaker_open, pending in CONTEXTS:
        assert len(_decisions(req, policy, failures, breaker_open, pending)) == 1


def test_any_other_decision_reads_it() -> None:
    req = RemovalRequest("n9", "r1", "XID 13 repeated", "runbook:x")
    assert reads_snapshot(req)
    assert len(_decisions(req, GuardPolicy(), {}, False, 0)) > 1
