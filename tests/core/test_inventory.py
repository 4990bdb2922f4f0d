"""Inventory parsing: every bad file gives one line naming the file, entry and field."""

from __future__ import annotations

import pytest

from fleetctl.inventory import InventoryError, parse_inventory, parse_selector

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
        ("nodes: [{name: a, address: x, profile: h100-sxm}, {name: a, address: y, profile: h100-sxm}]",
         r"nodes\[1\] \(a\): duplicate name \(first at nodes\[0\]\)"),
        ("nodes: [{name: a, address: x\n", r"inv.yaml: not valid YAML at line"),
        ("hosts: []", r"expected a top-level 'nodes:' list"),
        ("nodes: [{name: 'a;rm -rf /', address: x, profile: h100-sxm}]", r"field 'name' has an invalid value"),
        ("nodes: [{name: a, address: 'x$(reboot)', profile: h100-sxm}]", r"field 'address' has an invalid value"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, labels: {pool: 'a b'}}]", r"label pool has an invalid value"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, scheduler: pbs}]", r"field 'scheduler' must be one of"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, scheduler: [slurm]}]", r"a list names two or more"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, scheduler: [slurm, slurm]}]", r"each once"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, scheduler: [slurm, none]}]", r"a list names two or more"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, scheduler: [slurm, [kubernetes]]}]", r"two or more"),
        ("nodes: [{name: A_1, address: x, profile: h100-sxm, scheduler: [slurm, kubernetes]}]",
         r"Kubernetes node names are lower-case"),
        ("nodes: [{name: a, address: x, profile: v100}]", r"unknown profile 'v100'"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, colour: red}]", r"unknown field 'colour'"),
        ("nodes: [{name: a, address: x, profile: h100-sxm, bmc: 'ftp://b'}]", r"field 'bmc' has an invalid value"),
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
    (spec,) = parse_inventory(f"nodes: [{{name: node1, address: x, profile: h100-sxm, scheduler: {listed}}}]")
    assert spec.scheduler == "slurm+kubernetes"  # Slurm's jobs first, then the Kubernetes cordon
