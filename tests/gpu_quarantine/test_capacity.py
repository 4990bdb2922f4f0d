"""The capacity guard counts a GPU taken out alone as 1/N of its node (fleetctl.nodes.capacity):
in the fleet's limit and the rack's, from the database's open quarantines (count_gpus_out) and
from the grants still pending, so GPUs out one by one never cost less than the node's drain."""

from __future__ import annotations

import pytest

from fleetctl.nodes.capacity import (
    GuardPolicy,
    RemovalRequest,
    count_gpus_out,
    decide,
    removal_cost,
    snapshot_from_states,
)

POLICY = GuardPolicy(max_unavailable_fleet=0.10, max_unavailable_rack=0.25)


def _fleet(out: int = 0, gpus_out: int = 0) -> object:
    """20 nodes of 8 GPUs in racks a and b (10 each): `out` of rack a in maintenance, and
    `gpus_out` GPUs out one per production node of rack b."""
    states = [("a", "maintenance")] * out + [("a", "production")] * (10 - out) + [("b", "production")] * 10
    snapshot = snapshot_from_states(states)
    return count_gpus_out(snapshot, [("b", f"b{i}", "production", "0000:2b:00", 8) for i in range(gpus_out)])


def _gpu(node: str = "a9", rack: str = "a") -> RemovalRequest:
    return RemovalRequest(node, rack, "XID 94", "agent", gpu="0000:2b:00", gpus_on_node=8)


def _node(node: str = "a9", rack: str = "a") -> RemovalRequest:
    return RemovalRequest(node, rack, "recheck failed", "sweep")


@pytest.mark.parametrize(
    ("snapshot", "request_", "pending", "granted", "reason"),
    [
        # The fleet's limit is 2 of 20. One node out and 7 GPUs out elsewhere: 1.875; one GPU more fits.
        (_fleet(out=1, gpus_out=7), _gpu(), 0, True, "within limits (GPU 0000:2b:00: 1/8 of a9)"),
        # ...and 8 GPUs out cost a node: a ninth GPU is past it.
        (
            _fleet(out=1, gpus_out=8),
            _gpu(),
            0,
            False,
            "fleet limit: 2 of 20 already unavailable (max 2, 10%) (GPU 0000:2b:00: 1/8 of a9); "
            "can go once 1 node of the fleet is back in service",
        ),
        # A node's drain is refused where one GPU out of the fleet's budget leaves less than a node.
        (
            _fleet(out=1, gpus_out=1),
            _node(),
            0,
            False,
            "fleet limit: 1.12 of 20 already unavailable (max 2, 10%); "
            "can go once 1 node of the fleet is back in service",
        ),
        # Pending GPU grants count at their share too.
        (_fleet(out=1), _gpu(), 0.875, True, "within limits (GPU 0000:2b:00: 1/8 of a9)"),
        (_fleet(out=1), _gpu(), 1.0, False, None),
    ],
)
def test_a_gpu_costs_its_share_of_the_guard_s_limits(snapshot, request_, pending, granted, reason) -> None:
    decision = decide(POLICY, snapshot, request_, {}, 0.0, False, pending_grants=pending)
    assert decision.granted is granted, decision.reason
    if reason is not None:
        assert decision.reason == reason


def test_a_critical_gpu_fault_is_granted_past_the_limits() -> None:
    request_ = RemovalRequest("a9", "a", "XID 48", "agent", critical=True, gpu="0000:2b:00", gpus_on_node=8)
    assert decide(POLICY, _fleet(out=2, gpus_out=8), request_, {}, 0.0, False).granted


def test_a_gpu_of_a_node_out_of_service_is_not_counted_twice() -> None:
    snapshot = count_gpus_out(
        snapshot_from_states([("a", "maintenance"), ("a", "production")]),
        [("a", "n0", "maintenance", "0000:2b:00", 8), ("a", "n1", "production", "0000:2b:00", 8)],
    )
    assert snapshot.unavailable + snapshot.gpus_out == 1.125
    assert snapshot.gpus_quarantined == ["n1/gpu/0000:2b:00"]


@pytest.mark.parametrize(("gpus", "cost"), [(8, 0.125), (4, 0.25)])
def test_a_gpu_removal_costs_one_over_the_node_s_gpus(gpus, cost) -> None:
    assert removal_cost(RemovalRequest("n", "r", "x", "a", gpu="0000:2b:00", gpus_on_node=gpus)) == cost
    assert removal_cost(RemovalRequest("n", "r", "x", "a")) == 1


def test_the_rack_s_limit_counts_its_gpus_out() -> None:
    roomy_fleet = GuardPolicy(max_unavailable_fleet=0.5, max_unavailable_rack=0.2)  # rack b: 2 of 10
    assert decide(roomy_fleet, _fleet(gpus_out=15), _gpu("b9", "b"), {}, 0.0, False).granted
    refused = decide(roomy_fleet, _fleet(gpus_out=16), _gpu("b9", "b"), {}, 0.0, False)
    assert refused.reason.startswith("rack limit: 2 of 10 in b already unavailable"), refused.reason
