"""Inventory parsing: every bad file gives one line naming the file, entry and field."""

from __future__ import annotations

import pytest

from fleetctl.inventory.machines import MachineIds, machine_conflict
from fleetctl.inventory.parse import InventoryError, parse_inventory, parse_selector

GOOD = """
nodes:
  - name: gpu-001
    address: ubuntu@10.0.0.1:2222
    bmc: https://10.1.0.1
    rack: rack-01
    profile: h100-sxm
    scheduler: slurm
    labels: {pool: training, fleetctl.io/zone: a}
  - {name: gpu-002, address: sim://gpu-002, profile: h100-sxm}
"""


def test_good_inventory() -> None:
    specs = parse_inventory(GOOD, "inv.yaml", {"h100-sxm"})
    assert [s.name for s in specs] == ["gpu-001", "gpu-002"]
    assert specs[0].labels == {"pool": "training", "fleetctl.io/zone": "a"}
    assert specs[1].scheduler == "none" and specs[1].rack == ""


@pytest.mark.parametrize(
    "text,message",
    [
        ("nodes: [{address: a, profile: h100-sxm}]", r"inv.yaml: nodes\[0\]: missing field 'name'"),
        ("nodes: [{name: a, profile: h100-sxm}]", r"nodes\[0\] \(a\): missing field 'address'"),
        (
            "nodes: [{name: a, address: a, profile: h100-sxm}, {name: a, address: y, profile: h100-sxm}]",
            r"nodes\[1\] \(a\): duplicate name \(first at nodes\[0\]\)",
        ),
        ("nodes: [{name: a, address: x\n", r"inv.yaml: not valid YAML at line"),
        ("hosts: []", r"expected a top-level 'nodes:' list"),
        ("nodes: [{name: 'a;rm -rf /', address: x, profile: h100-sxm}]", r"field 'name' has an invalid value"),
        ("nodes: [{name: a, address: 'x$(reboot)', profile: h100-sxm}]", r"field 'address' has an invalid value"),
        (
            "nodes: [{name: a, address: a, profile: h100-sxm, labels: {pool: 'a b'}}]",
            r"label pool has an invalid value",
        ),
        ("nodes: [{name: a, address: a, profile: h100-sxm, scheduler: pbs}]", r"field 'scheduler' must be one of"),
        ("nodes: [{name: a, address: a, profile: h100-sxm, scheduler: [slurm]}]", r"a list names two or more"),
        ("nodes: [{name: a, address: a, profile: h100-sxm, scheduler: [slurm, slurm]}]", r"each once"),
        ("nodes: [{name: a, address: a, profile: h100-sxm, scheduler: [slurm, none]}]", r"a list names two or more"),
        ("nodes: [{name: a, address: a, profile: h100-sxm, scheduler: [slurm, [kubernetes]]}]", r"two or more"),
        (
            "nodes: [{name: A_1, address: A_1, profile: h100-sxm, scheduler: [slurm, kubernetes]}]",
            r"Kubernetes node names are lower-case",
        ),
        ("nodes: [{name: a, address: a, profile: v100}]", r"unknown profile 'v100'"),
        ("nodes: [{name: a, address: a, profile: h100-sxm, colour: red}]", r"unknown field 'colour'"),
        ("nodes: [{name: a, address: a, profile: h100-sxm, bmc: 'ftp://b'}]", r"field 'bmc' has an invalid value"),
        # `$` would match before a trailing newline: every pattern ends in \Z
        ('nodes: [{name: a, address: "x\\n", profile: h100-sxm}]', r"field 'address' has an invalid value"),
        ('nodes: [{name: a, address: a, profile: h100-sxm, bmc: "https://b\\n"}]', r"field 'bmc' has an invalid value"),
    ],
)
def test_bad_inventory(text: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message) as err:
        parse_inventory(text, "inv.yaml", {"h100-sxm"})
    assert "\n" not in str(err.value)


def test_selector() -> None:
    assert parse_selector("pool=training,zone=a") == {"pool": "training", "zone": "a"}
    with pytest.raises(InventoryError, match="bad label selector"):
        parse_selector("pool")


@pytest.mark.parametrize("listed", ["[slurm, kubernetes]", "[kubernetes, slurm]"])
def test_a_sunk_node_lists_both_schedulers_stored_in_drain_order(listed: str) -> None:
    (spec,) = parse_inventory(f"nodes: [{{name: node1, address: node1, profile: h100-sxm, scheduler: {listed}}}]")
    assert spec.scheduler == "slurm+kubernetes"  # Slurm's jobs first, then the Kubernetes cordon


TOPOLOGY = """
nodes:
  - {name: gpu-001, address: gpu-001, profile: h100-sxm, rack: r1, position: 3, switch: leaf-1, island: ib-a}
  - {name: gpu-002, address: y, profile: h100-sxm, rack: r1, switch: leaf-1, island: ib-a}
  - {name: gpu-003, address: z, profile: h100-sxm}
"""


def test_topology_fields_are_read_and_optional() -> None:
    first, second, third = parse_inventory(TOPOLOGY, "inv.yaml", {"h100-sxm"})
    assert (first.switch, first.island, first.position) == ("leaf-1", "ib-a", 3)
    assert (second.switch, second.island, second.position) == ("leaf-1", "ib-a", None)
    assert (third.switch, third.island, third.position) == ("", "", None)


_ENTRY = "nodes: [{name: a, address: a, profile: h100-sxm, %s}]"


@pytest.mark.parametrize(
    "field,message",
    [
        ("switch: 'leaf 1'", r"nodes\[0\] \(a\): field 'switch' has an invalid value"),
        ("switch: 'leaf[1-2]'", r"field 'switch' has an invalid value"),  # a host list in topology.conf
        ('island: "ib\\x1b[31ma"', r"field 'island' has an invalid value"),  # control characters
        ("island: " + "i" * 64, r"field 'island' has an invalid value"),  # bounded: 63 at most
        ("island: [a, b]", r"field 'island' must be a string"),
        ("position: 0", r"field 'position' must be a rack unit from 1 to 99"),
        ("position: 100", r"field 'position' must be a rack unit from 1 to 99"),
        ("position: 4.5", r"field 'position' must be a rack unit"),
        ("position: 'top'", r"field 'position' must be a rack unit"),
        ("position: true", r"field 'position' must be a rack unit"),
    ],
)
def test_bad_topology_field(field: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message) as err:
        parse_inventory(_ENTRY % field, "inv.yaml", {"h100-sxm"})
    assert "\n" not in str(err.value) and "\x1b" not in str(err.value)


def test_a_switch_hangs_under_one_island() -> None:
    text = TOPOLOGY.replace(
        "switch: leaf-1, island: ib-a}\n  - {name: gpu-003", "switch: leaf-1, island: ib-b}\n  - {name: gpu-003"
    )
    with pytest.raises(
        InventoryError, match=r"inv.yaml: node gpu-002: switch leaf-1 is in island ib-a at node gpu-001, not ib-b"
    ):
        parse_inventory(text, "inv.yaml", {"h100-sxm"})


@pytest.mark.parametrize(
    "nodes,message",
    [
        (
            "{name: a, address: 10.0.0.1, profile: p}, {name: b, address: 10.0.0.1, profile: p}",
            "b: address 10.0.0.1 is already a's",
        ),
        # the user who logs in does not make it another machine, nor does case
        (
            "{name: a, address: ops@Host-1, profile: p}, {name: b, address: host-1, profile: p}",
            "b: address host-1 is already a's",
        ),
        (
            "{name: a, address: h1, profile: p, bmc: https://10.1.0.1}, {name: b, address: h2, profile: p, bmc: 'http://10.1.0.1/'}",
            "bmc",
        ),
    ],
)
def test_two_names_for_one_machine_are_refused_naming_both(nodes: str, message: str) -> None:
    with pytest.raises(InventoryError, match=message) as err:
        parse_inventory(f"nodes: [{nodes}]", "inv.yaml", allow_http_bmc=True)
    assert "one name per machine" in str(err.value) and "\n" not in str(err.value)


def test_one_bmc_serving_several_systems_is_several_machines() -> None:
    specs = parse_inventory(
        "nodes: [{name: a, address: h1, profile: p, bmc: https://bmc/redfish/v1/Systems/1},"
        " {name: b, address: h2, profile: p, bmc: https://bmc/redfish/v1/Systems/2}]",
        "inv.yaml",
    )
    assert [s.name for s in specs] == ["a", "b"]


@pytest.mark.parametrize(
    "known,new,clash",
    [
        # a re-import names the known node again: the same node, not a second name
        ([MachineIds("a", "h1", "https://b1")], [MachineIds("a", "h1", "https://b1")], None),
        # a renamed node moving its address within one import is no clash with its old self
        ([MachineIds("a", "h1", None)], [MachineIds("a", "h9", None), MachineIds("b", "h1", None)], None),
        ([MachineIds("a", "h1", None)], [MachineIds("b", "H1", None)], "b: address H1 is already a's"),
        (
            [MachineIds("a", "h1", "https://b1")],
            [MachineIds("b", "h2", "HTTPS://B1/")],
            "b: bmc HTTPS://B1/ is already a's",
        ),
        ([MachineIds("a", "h1", None)], [MachineIds("b", "h2", None)], None),
    ],
)
def test_machine_conflict_with_the_fleet(known: list, new: list, clash: str | None) -> None:
    found = machine_conflict(new, known)
    assert found == (None if clash is None else f"{clash} (one name per machine)")
