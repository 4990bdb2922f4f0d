"""The fabric from real `ibnetdiscover` output (NVIDIA Topograph's test fabric, cited in
tests/fixtures/fabric/SOURCES.md) and real `nvidia-smi -q`: leaves, spines and islands, NVLink
domains, where an inventory disagrees, Slurm's blocks and Kubernetes labels."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from fleetctl.inventory.fabric import (
    FabricError,
    Placement,
    compare_with_inventory,
    domain_disagreements,
    kubernetes_labels,
    nvlink_domains,
    parse_ibnetdiscover,
    place_hosts,
    slurm_block_conf,
)
from fleetctl.inventory.parse import NodeSpec

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
EXAMPLE = (FIXTURES / "fabric" / "ibnetdiscover_topograph_example.out").read_text()
GB200_TRAY = (FIXTURES / "checks" / "nvidia_smi" / "q_gb200_tray_fabric_ok.txt").read_text()
GB200_UNREGISTERED = (FIXTURES / "checks" / "nvidia_smi" / "q_gb200_fabric_insufficient_resources_fail.txt").read_text()
SPINE = "A10-P1-IBSPINE-01"


def test_the_switches_and_the_hosts_hcas_are_read() -> None:
    fabric = parse_ibnetdiscover(EXAMPLE)
    assert len(fabric.switches) == 40 and len(set(fabric.hosts.values())) == 122
    # `MT4129 ConnectX7   Mellanox Technologies` and SHARP's `Aggregation Node` name no host.
    assert len(fabric.hosts) == 473 and fabric.unnamed_hcas == 109
    names = {s.name for s in fabric.switches.values()}
    assert {"A09-P1-IBLEAF-04-04", SPINE, "B10-P1-IBSPINE-09"} <= names


def test_the_hosts_of_a_scalable_unit_share_one_switch_and_the_spines_join_them_in_one_island() -> None:
    places = place_hosts(parse_ibnetdiscover(EXAMPLE))
    units = Counter((p.switch, p.island) for p in places.values())
    assert units == {
        ("A09-P1-IBLEAF-01-01", SPINE): 11,
        ("A09-P1-IBLEAF-01-02", SPINE): 11,
        ("A09-P1-IBLEAF-01-03", SPINE): 18,
        ("A09-P1-IBLEAF-01-04", SPINE): 17,
        ("B09-P1-IBLEAF-01-05", SPINE): 18,
        ("B09-P1-IBLEAF-01-06", SPINE): 15,
        ("B09-P1-IBLEAF-01-07", SPINE): 16,
        ("B09-P1-IBLEAF-01-08", SPINE): 14,
        # the UFM host and one other on two of unit 8's leaves only: a group of their own
        ("B09-P1-IBLEAF-03-08", SPINE): 2,
    }
    assert places["a08-p1-dgx-04-c01"] == Placement("a08-p1-dgx-04-c01", "A09-P1-IBLEAF-01-04", SPINE)
    assert places["a06-p1-dgx-02-c01"].switch == "A09-P1-IBLEAF-01-02"  # HCA-N descriptions too


def test_output_with_no_switch_is_refused() -> None:
    bad = (FIXTURES / "fabric" / "ibnetdiscover_topograph_example_bad.out").read_text()
    with pytest.raises(FabricError, match="no switch in the ibnetdiscover output"):
        parse_ibnetdiscover(bad)
    with pytest.raises(FabricError):
        parse_ibnetdiscover("")


def _inventory(*rows: tuple[str, str, str, str]) -> list[NodeSpec]:
    return [
        NodeSpec(name=name, address=address, profile="h100-sxm", switch=switch, island=island)
        for name, address, switch, island in rows
    ]


def test_the_inventory_is_matched_by_name_or_address_and_its_disagreements_named() -> None:
    nodes = _inventory(
        ("node1", "root@a08-p1-dgx-04-c01:22", "leaf-4", "ib"),
        ("node2", "a08-p1-dgx-04-c02", "leaf-4", "ib"),
        ("node3", "b05-p1-dgx-05-c01", "leaf-4", "ib"),  # the fabric has it on unit 5
        ("b05-p1-dgx-05-c02", "10.0.0.9", "leaf-5", "ib"),
        ("node9", "gone-host", "leaf-5", "ib"),
    )
    view = compare_with_inventory(parse_ibnetdiscover(EXAMPLE), nodes)
    assert [(p.name, p.switch) for p in view.placed] == [
        ("node1", "A09-P1-IBLEAF-01-04"),
        ("node2", "A09-P1-IBLEAF-01-04"),
        ("node3", "B09-P1-IBLEAF-01-05"),
        ("b05-p1-dgx-05-c02", "B09-P1-IBLEAF-01-05"),
    ]
    assert view.not_in_fabric == ["node9"] and len(view.not_in_inventory) == 122 - 4
    assert view.disagreements == [
        "fabric leaf B09-P1-IBLEAF-01-05 holds node3,b05-p1-dgx-05-c02; the inventory splits them: leaf-4, leaf-5",
        "inventory switch leaf-4 holds node[1-3]; the fabric splits them: A09-P1-IBLEAF-01-04, B09-P1-IBLEAF-01-05",
    ]


def test_an_inventory_that_groups_as_the_fabric_does_agrees_whatever_its_names() -> None:
    nodes = _inventory(
        ("node1", "a08-p1-dgx-04-c01", "leaf-4", "ib"),
        ("node2", "a08-p1-dgx-04-c02", "leaf-4", "ib"),
        ("node3", "b05-p1-dgx-05-c01", "leaf-5", "ib"),
    )
    assert compare_with_inventory(parse_ibnetdiscover(EXAMPLE), nodes).disagreements == []


def test_nvlink_domains_come_from_the_gpus_cluster_uuid_and_clique() -> None:
    domains, problems = nvlink_domains({"tray1": GB200_TRAY, "tray2": GB200_TRAY, "tray3": GB200_UNREGISTERED})
    assert domains == {
        "tray1": "dc6e40c4-d722-4357-9ba6-5291dd461278-2",
        "tray2": "dc6e40c4-d722-4357-9ba6-5291dd461278-2",
    }
    assert problems == ["tray3: not every GPU is registered with an NVLink fabric (ClusterUUID, CliqueId)"]
    assert domain_disagreements(domains, {"tray1": "nvl72-a", "tray2": "nvl72-b"}) == [
        "NVLink domain dc6e40c4-d722-4357-9ba6-5291dd461278-2 holds tray[1-2]; the inventory splits them: nvl72-a, nvl72-b"
    ]
    assert domain_disagreements(domains, {"tray1": "nvl72-a", "tray2": "nvl72-a"}) == []


def test_a_block_per_nvlink_domain_and_the_labels() -> None:
    domains = {"gb-01": "u1-1", "gb-02": "u1-1", "gb-19": "u1-2"}
    assert slurm_block_conf(domains, {"u1-1": "nvl72-a"}).splitlines()[1:] == [
        "# nvl72-a: NVLink domain u1-1",
        "BlockName=nvl72-a Nodes=gb-[01-02]",
        "# block002: NVLink domain u1-2",
        "BlockName=block002 Nodes=gb-19",
    ]
    with pytest.raises(FabricError, match="no node in an NVLink domain"):
        slurm_block_conf({})
    labels = kubernetes_labels([Placement("gb-01", "leaf-1", "ib-a")], {"gb-01": "u1-1", "gb-19": "u1-2"})
    assert labels == {
        "gb-01": {
            "topology.fleetctl.io/leaf": "leaf-1",
            "topology.fleetctl.io/island": "ib-a",
            "topology.fleetctl.io/nvlink-domain": "u1-1",
        },
        "gb-19": {"topology.fleetctl.io/nvlink-domain": "u1-2"},
    }
