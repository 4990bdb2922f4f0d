"""Unchecked nodes in a restart's placement: a node `node list` shows Unchecked (no check yet,
or its newest evidence older than the sweep interval with no agent reporting) ranks after every
checked node that fits, spares and nearness included, and is still taken when only it fits."""

from __future__ import annotations

import pytest

from fleetctl.jobs.placement import FLEET_WIDE, IN_ISLAND, NodeHealth, Where, place_restart, unchecked_nodes

# Island ib-a: leaf-1 (n1, n2), leaf-2 (n3, n4, n5). NVLink domains d1 (a1..a4, island ib-a),
# d2 (b1..b4, island ib-a) and d3 (c1..c4, island ib-b).
FABRIC = {
    "n1": Where("leaf-1", "ib-a"),
    "n2": Where("leaf-1", "ib-a"),
    "n3": Where("leaf-2", "ib-a"),
    "n4": Where("leaf-2", "ib-a"),
    "n5": Where("leaf-2", "ib-a"),
    **{f"a{i}": Where("leaf-a", "ib-a", "d1") for i in range(1, 5)},
    **{f"b{i}": Where("leaf-b", "ib-a", "d2") for i in range(1, 5)},
    **{f"c{i}": Where("leaf-c", "ib-b", "d3") for i in range(1, 5)},
}
DOMAIN_JOB = ["a1", "a2", "a3"]


@pytest.mark.parametrize(
    "job, bad, free, spares, unchecked, placement, nodes",
    [
        # n2 is on the job's leaf and sorts first, but unchecked: the checked n3 is taken.
        (["n1", "n4"], ["n4"], ["n2", "n3"], [], ["n2"], IN_ISLAND, ("n1", "n3")),
        # Checked, it would have been n2 (nearness): the same free nodes, nothing unchecked.
        (["n1", "n4"], ["n4"], ["n2", "n3"], [], [], IN_ISLAND, ("n1", "n2")),
        # An unchecked spare comes after a checked node that is no spare.
        (["n1", "n4"], ["n4"], ["n2", "n3"], ["n2"], ["n2"], IN_ISLAND, ("n1", "n3")),
        # A checked spare still comes first among the checked.
        (["n1", "n4"], ["n4"], ["n2", "n3"], ["n3"], [], IN_ISLAND, ("n1", "n3")),
        # Only unchecked nodes fit: taken, not left out for the fleet.
        (["n1", "n4"], ["n4"], ["n2", "n3"], [], ["n2", "n3"], IN_ISLAND, ("n1", "n2")),
        # Two needed, one checked one unchecked: both, the checked one first.
        (["n1", "n2", "n4"], ["n1", "n2"], ["n3", "n5"], [], ["n3"], IN_ISLAND, ("n4", "n5", "n3")),
        # Too few even with the unchecked ones: the fleet, as before.
        (["n1", "n2", "n4"], ["n1", "n2"], ["n3"], [], ["n3"], FLEET_WIDE, ()),
        # A domain's own nodes: the checked one before the unchecked one that sorts first.
        (DOMAIN_JOB, ["a3"], ["a4", "b1"], [], ["a4"], IN_ISLAND, ("a1", "a2", "a4")),
        (DOMAIN_JOB, ["a3"], ["a4"], [], ["a4"], IN_ISLAND, ("a1", "a2", "a4")),
        # The whole job moves: d2 (the job's island) would need its unchecked b3; d3, of the other
        # island, fits on checked nodes alone and comes first.
        (DOMAIN_JOB, ["a1", "a2"], ["b1", "b2", "b3", "c1", "c2", "c3"], [], ["b3"], IN_ISLAND, ("c1", "c2", "c3")),
        # Every domain needs an unchecked node: the island's still comes first, its unchecked one last.
        (
            DOMAIN_JOB,
            ["a1", "a2"],
            ["b1", "b2", "b3", "c1", "c2", "c3"],
            [],
            ["b1", "c1"],
            IN_ISLAND,
            ("b2", "b3", "b1"),
        ),
    ],
)
def test_unchecked_nodes_are_taken_last_and_never_left_out(job, bad, free, spares, unchecked, placement, nodes) -> None:
    decided = place_restart(job, bad, FABRIC, free, spares, (), unchecked)
    assert (decided.placement, decided.nodes) == (placement, nodes)


@pytest.mark.parametrize(
    "node, unchecked",
    [
        (NodeHealth("n1", "production"), False),
        (NodeHealth("n1", "production", ("Unchecked",)), True),  # never checked, or its evidence is stale
        (NodeHealth("n1", "production", ("CheckFailed", "Unchecked")), True),  # unfit anyway (placement.unfit)
        (NodeHealth("n1", "production", ("DrainHeld",)), False),
    ],
)
def test_unchecked_nodes_are_those_node_list_shows_unchecked(node, unchecked) -> None:
    assert unchecked_nodes([node]) == ({"n1"} if unchecked else set())
