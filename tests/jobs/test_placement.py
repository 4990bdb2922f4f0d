"""Where a restart asks for the job's replacements: its island first, the fleet when the
island has too few healthy free nodes; and where the job landed."""

from __future__ import annotations

import pytest

from fleetctl.jobs.placement import (
    FLEET_WIDE,
    IN_ISLAND,
    LANDED_IN_ISLAND,
    LANDED_OUTSIDE,
    NOT_PLACED,
    Exclusions,
    NodeHealth,
    Where,
    healthy_replacements,
    job_island,
    landed,
    place_restart,
    replacements,
    restart_exclusions,
    unfit,
)

# Two islands: ib-a over leaf-1 (n1, n2) and leaf-2 (n3, n4, n5); ib-b over leaf-3 (n6, n7);
# n8 has no topology in the inventory.
FABRIC = {
    "n1": Where("leaf-1", "ib-a"),
    "n2": Where("leaf-1", "ib-a"),
    "n3": Where("leaf-2", "ib-a"),
    "n4": Where("leaf-2", "ib-a"),
    "n5": Where("leaf-2", "ib-a"),
    "n6": Where("leaf-3", "ib-b"),
    "n7": Where("leaf-3", "ib-b"),
    "n8": Where(),
}


@pytest.mark.parametrize(
    "job,bad,free,placement,nodes,island",
    [
        # A free node on a leaf the job is on comes before the rest of the island (n1 sorts first).
        (["n4", "n5"], ["n5"], ["n1", "n3", "n6"], IN_ISLAND, ("n4", "n3"), "ib-a"),
        (["n1", "n3"], ["n3"], ["n4", "n2", "n6"], IN_ISLAND, ("n1", "n2"), "ib-a"),
        (["n1", "n2"], ["n2"], ["n6", "n4", "n3"], IN_ISLAND, ("n1", "n3"), "ib-a"),
        # Two bad nodes, two replacements from the island, none from the other island.
        (["n1", "n2", "n3"], ["n1", "n2"], ["n4", "n5", "n6", "n7"], IN_ISLAND, ("n3", "n4", "n5"), "ib-a"),
        # The island has one free node for two bad ones: fall back to the whole fleet.
        (["n1", "n2", "n3"], ["n1", "n2"], ["n4", "n6", "n7"], FLEET_WIDE, (), "ib-a"),
        # Free nodes only in the other island: fall back.
        (["n6", "n7"], ["n7"], ["n1", "n2", "n8"], FLEET_WIDE, (), "ib-b"),
        # Every node of the job bad: its island is theirs.
        (["n6"], ["n6"], ["n7", "n1"], IN_ISLAND, ("n7",), "ib-b"),
        # The job's own nodes and the bad ones are never replacements, even if listed free.
        (["n6", "n7"], ["n7"], ["n7", "n6"], FLEET_WIDE, (), "ib-b"),
        # No island known: the scheduler places it, as before topology.
        (["n8"], ["n8"], ["n1"], NOT_PLACED, (), ""),
        # A bad node not in the job: nothing to replace.
        (["n1", "n2"], ["n6"], ["n3"], NOT_PLACED, (), "ib-a"),
        # A node fleetctl does not know is no candidate.
        (["n6", "n7"], ["n7"], ["gpu-x"], FLEET_WIDE, (), "ib-b"),
    ],
)
def test_place_restart(job, bad, free, placement, nodes, island) -> None:
    decided = place_restart(job, bad, FABRIC, free)
    assert (decided.placement, decided.nodes, decided.island) == (placement, nodes, island)
    assert decided.detail and "\n" not in decided.detail


def test_the_decision_says_why_in_words() -> None:
    assert place_restart(["n1", "n3"], ["n3"], FABRIC, ["n2"]).detail == "island ib-a: n2 for n3"
    assert (
        place_restart(["n6", "n7"], ["n7"], FABRIC, []).detail
        == "island ib-b has 0 healthy free nodes of 1 needed: any healthy node in the fleet"
    )


@pytest.mark.parametrize(
    "nodes,island",
    [(["n1", "n6", "n7"], "ib-b"), (["n1", "n6"], "ib-a"), (["n8"], ""), (["n8", "n6"], "ib-b"), ([], "")],
)
def test_job_island_is_the_majority_ties_by_name(nodes, island) -> None:
    assert job_island(nodes, FABRIC) == island


@pytest.mark.parametrize(
    "island,new_nodes,where",
    [
        ("ib-a", ["n1", "n4"], LANDED_IN_ISLAND),
        ("ib-a", ["n1", "n6"], LANDED_OUTSIDE),
        ("ib-a", ["n1", "n8"], LANDED_OUTSIDE),
        ("ib-a", ["unknown"], LANDED_OUTSIDE),
        ("", ["n1"], ""),
        ("ib-a", [], ""),
    ],
)
def test_landed(island, new_nodes, where) -> None:
    assert landed(island, new_nodes, FABRIC) == where


@pytest.mark.parametrize(
    "node,why",
    [
        (NodeHealth("n1", "production"), ""),
        # Adopted, no check run yet: nothing says it is bad.
        (NodeHealth("n1", "production", ("Unchecked",)), ""),
        # Its drain held by the guard after a failed check.
        (NodeHealth("n1", "production", ("CheckFailed", "DrainHeld")), "CheckFailed, DrainHeld"),
        (NodeHealth("n1", "production", ("DrainHeld",)), "DrainHeld"),
        (NodeHealth("n1", "production", ("CheckFailed",)), "CheckFailed"),
        (NodeHealth("n1", "production", ("CheckError",)), "CheckError"),
        (NodeHealth("n1", "production", ("Unreachable",)), "Unreachable"),
        (NodeHealth("n1", "production", ("Suspect",)), "Suspect"),
        (NodeHealth("n1", "production", ("Stalled",)), "Stalled"),
        (NodeHealth("n1", "production", ("StragglerSuspected",)), "StragglerSuspected"),
        # Its runbook failed (a drain the guard refused) or is stuck: an operator's turn.
        (NodeHealth("n1", "production", ("RemediationFailed",)), "RemediationFailed"),
        (NodeHealth("n1", "production", ("RemediationStuck",)), "RemediationStuck"),
        # An open straggler finding, before any drain was due.
        (NodeHealth("n1", "production", (), open_stragglers=1), "StragglerSuspected"),
        (NodeHealth("n1", "production", ("StragglerSuspected",), open_stragglers=2), "StragglerSuspected"),
        (NodeHealth("n1", "draining"), "in draining, not production"),
        (NodeHealth("n1", "admission"), "in admission, not production"),
    ],
)
def test_only_healthy_production_nodes_take_a_restart(node, why) -> None:
    assert unfit(node) == why
    assert healthy_replacements([node]) == ([] if why else ["n1"])


def test_healthy_replacements_keep_the_order_given() -> None:
    nodes = [
        NodeHealth("n3", "production"),
        NodeHealth("n1", "production", ("CheckFailed", "DrainHeld")),
        NodeHealth("n2", "production", ("Unchecked",)),
    ]
    assert healthy_replacements(nodes) == ["n3", "n2"]


@pytest.mark.parametrize(
    "before, now, expected",
    [
        (["n1", "n2"], ["n2", "n3"], ["n3"]),  # n3 took n1's place
        (["n1", "n2", "n3"], ["n4", "n5", "n3"], ["n4", "n5"]),  # two replaced, in the job's order
        (["n1", "n2"], ["n1", "n2"], []),  # requeued onto the same nodes: nothing replaced
        ([], ["n2", "n3"], ["n2", "n3"]),  # not known (an older restart, a job already pending): all
        (["n1"], [], []),  # not running again yet
    ],
)
def test_a_restarts_replacements_are_its_nodes_it_did_not_run_on_before(before, now, expected) -> None:
    assert replacements(before, now) == expected


UNFIT = {"n3": "Suspect, Unreachable", "n4": "CheckFailed, DrainHeld"}
SEVEN_UNFIT = {f"u{i}": "Suspect" for i in range(7)}


@pytest.mark.parametrize(
    "bad,unfit_nodes,named,told,kept_off,expected",
    [
        # A scheduler that can be told (Slurm's ExcNodeList, the simulated one's): bad, then unfit.
        (["n1"], UNFIT, (), True, (), Exclusions(("n1", "n3", "n4"))),
        (["n1"], {}, (), True, (), Exclusions(("n1",))),
        # Named onto a node (chosen healthy, unfit on a retry since): not excluded from itself.
        (["n1"], UNFIT, ("n2", "n3"), True, (), Exclusions(("n1", "n4"))),
        # An unfit node that is also a bad one is named once.
        (["n3"], UNFIT, (), True, (), Exclusions(("n3", "n4"))),
        # One that cannot be told: every unfit node cordoned, it keeps off them itself.
        (["n1"], UNFIT, (), False, ("n3", "n4"), Exclusions(("n1",))),
        (["n1"], {}, (), False, (), Exclusions(("n1",))),
        (["n3"], UNFIT, (), False, ("n4",), Exclusions(("n3",))),
        # One it would place work on: refused, naming it and why.
        (
            ["n1"],
            UNFIT,
            (),
            False,
            ("n3",),
            Exclusions(
                ("n1",),
                "the kubernetes scheduler cannot be told to keep a job off a node, and would place it on "
                "unfit node n4 (CheckFailed, DrainHeld): the restart waits until each is cordoned or fit",
            ),
        ),
        (
            ["n1"],
            UNFIT,
            (),
            False,
            (),
            Exclusions(
                ("n1",),
                "the kubernetes scheduler cannot be told to keep a job off a node, and would place it on "
                "unfit nodes n3 (Suspect, Unreachable); n4 (CheckFailed, DrainHeld): the restart waits until "
                "each is cordoned or fit",
            ),
        ),
        (
            ["n1"],
            SEVEN_UNFIT,
            (),
            False,
            (),
            Exclusions(
                ("n1",),
                "the kubernetes scheduler cannot be told to keep a job off a node, and would place it on "
                "unfit nodes u0 (Suspect); u1 (Suspect); u2 (Suspect); u3 (Suspect); u4 (Suspect) and 2 more: "
                "the restart waits until each is cordoned or fit",
            ),
        ),
    ],
)
def test_a_restart_keeps_off_every_unfit_node_or_waits(bad, unfit_nodes, named, told, kept_off, expected) -> None:
    assert restart_exclusions("kubernetes", bad, unfit_nodes, named, told, kept_off) == expected
