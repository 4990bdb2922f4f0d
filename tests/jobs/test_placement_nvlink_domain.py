"""A restart of a job in an NVLink domain: replacements from its own domain, else a whole healthy
domain for the job, else the fleet; never a node of a held domain (fleetctl.jobs.placement)."""

from __future__ import annotations

import pytest

from fleetctl.jobs.placement import FLEET_WIDE, IN_ISLAND, NOT_PLACED, Where, held_domains, landed, place_restart

# Island ib-a holds NVLink domains d1 (a1-a4) and d2 (b1-b4); island ib-b holds d3 (c1-c4);
# h1, h2 are HGX nodes of ib-a (no domain).
FABRIC = {
    **{f"a{i}": Where("", "ib-a", "d1") for i in range(1, 5)},
    **{f"b{i}": Where("", "ib-a", "d2") for i in range(1, 5)},
    **{f"c{i}": Where("", "ib-b", "d3") for i in range(1, 5)},
    "h1": Where("", "ib-a"),
    "h2": Where("", "ib-a"),
}
JOB = ["a1", "a2", "a3"]


@pytest.mark.parametrize(
    "job,bad,free,spares,held,placement,nodes,island",
    [
        # A free node of the job's own domain replaces the bad one, before a spare of another domain.
        (JOB, ["a3"], ["b1", "a4", "h1"], ["b1"], [], IN_ISLAND, ("a1", "a2", "a4"), "ib-a"),
        # The domain's spare first (a4 is one, b-nodes are not needed).
        (["a1", "a2"], ["a2"], ["a3", "a4"], ["a4"], [], IN_ISLAND, ("a1", "a4"), "ib-a"),
        # The own domain has no free node: the whole job moves to a domain with room for all of
        # it, in its island first (d2 over d3), never split over domains or onto an HGX node.
        (JOB, ["a3"], ["h1", "h2", "c1", "c2", "c3", "b1", "b2", "b3"], [], [], IN_ISLAND, ("b1", "b2", "b3"), "ib-a"),
        # Its island's other domain has too few: the other island's domain takes it whole.
        (JOB, ["a3"], ["b1", "b2", "c1", "c2", "c3", "c4"], [], [], IN_ISLAND, ("c1", "c2", "c3"), "ib-b"),
        # The job's domain is held (its fabric failed): a free node in it is not taken; the job moves whole.
        (JOB, ["a3"], ["a4", "b1", "b2", "b3"], [], ["d1"], IN_ISLAND, ("b1", "b2", "b3"), "ib-a"),
        # A held domain is no target either, however roomy: nothing else fits, so the fleet.
        (JOB, ["a3"], ["a4", "b1", "b2", "b3", "b4"], [], ["d1", "d2"], FLEET_WIDE, (), "ib-a"),
        (JOB, ["a3"], ["h1", "h2", "b1"], [], [], FLEET_WIDE, (), "ib-a"),
        # An HGX job's replacements never come from a held domain (h2 is taken instead of b1).
        (["h1"], ["h1"], ["b1", "h2"], [], ["d2"], IN_ISLAND, ("h2",), "ib-a"),
        (["h1"], ["h1"], ["b1"], [], ["d2"], FLEET_WIDE, (), "ib-a"),
        # Nothing bad in the job: nothing to place.
        (JOB, ["c1"], ["a4"], [], [], NOT_PLACED, (), "ib-a"),
    ],
)
def test_place_restart_by_domain(job, bad, free, spares, held, placement, nodes, island) -> None:
    decided = place_restart(job, bad, FABRIC, free, spares, held)
    assert (decided.placement, decided.nodes, decided.island) == (placement, nodes, island), decided.detail
    assert decided.detail and "\n" not in decided.detail
    if decided.nodes:
        assert len({FABRIC[n].domain for n in decided.nodes}) == 1, "a job of a domain is never split over domains"


def test_the_decision_says_why_in_words() -> None:
    assert place_restart(JOB, ["a3"], FABRIC, ["a4"], ["a4"]).detail == "NVLink domain d1: a4 for a3 (spare a4)"
    assert (
        place_restart(JOB, ["a3"], FABRIC, ["a4", "b1", "b2", "b3"], held_domains=["d1"]).detail
        == "NVLink domain d1 is held: the whole job moves to NVLink domain d2, b1, b2, b3"
    )
    assert (
        place_restart(JOB, ["a3"], FABRIC, ["b1"]).detail
        == "NVLink domain d1 has 0 healthy free nodes of 1 needed, and no other healthy domain has 3 free: "
        "any healthy node in the fleet"
    )


def test_a_job_moved_whole_lands_in_its_new_island() -> None:
    decided = place_restart(JOB, ["a3"], FABRIC, ["c1", "c2", "c3"])
    assert landed(decided.island, list(decided.nodes), FABRIC) == "island"


@pytest.mark.parametrize(
    "latest,held",
    [
        ([("d1", "imex", "pass"), ("d2", "imex", "pass")], set()),
        ([("d1", "imex", "fail"), ("d1", "imex", "pass")], {"d1"}),  # one tray's IMEX down holds the domain
        ([("d1", "imex", "error")], {"d1"}),  # unreadable: nothing says the fabric is whole
        ([("d1", "nvidia-smi-query", "fail")], set()),  # a GPU's own fault holds only its node
        ([("", "imex", "fail")], set()),  # a node in no domain holds none
    ],
)
def test_held_domains(latest, held) -> None:
    assert held_domains(latest) == held
