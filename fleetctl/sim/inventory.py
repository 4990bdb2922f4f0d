"""Inventory entries for a simulated fleet (what `fleetctl sim inventory` writes)."""

from __future__ import annotations

from typing import NotRequired, TypedDict

from fleetctl.checks.profiles import load_profile
from fleetctl.executors.base import validate_node_name
from fleetctl.inventory.parse import MAX_RACK_POSITION
from fleetctl.sim import SIM_SCHEME
from fleetctl.sim.profiles import sim_profile


class InventoryEntry(TypedDict):
    """One node of an inventory's `nodes:` list, as fleetctl.inventory.parse reads it."""

    name: str
    address: str
    bmc: str
    rack: str
    profile: str
    scheduler: str
    labels: dict[str, str]
    nvlink_domain: NotRequired[str]
    switch: NotRequired[str]
    island: NotRequired[str]
    position: NotRequired[int]


def render_inventory(
    nodes: int, racks: int, profile: str, seed: int, name_prefix: str = "gpu", islands: int = 0
) -> list[InventoryEntry]:
    """Inventory entries (the `nodes:` list of an inventory YAML) for a simulated fleet:
    gpu-001 ... in contiguous blocks over rack-01 ..., all of one profile. With `islands`,
    each rack also has its leaf switch (leaf-01 ...) and position, and the racks are split
    in contiguous blocks over islands ib-01 ....
    A profile with a multi-node NVLink domain (gb200) makes each rack one domain, nvl72-rack-01
    ...: a rack then holds at most the domain's trays (18 of 4 GPUs for NVL72)."""
    sim_profile(profile)
    expected = load_profile(profile)
    if nodes < 1 or racks < 1:
        raise ValueError("a simulated fleet needs at least one node and one rack")
    if racks > nodes:
        raise ValueError(f"{racks} racks for {nodes} nodes would leave racks empty")
    if islands > racks:
        raise ValueError(f"{islands} islands for {racks} racks would leave islands empty")
    trays_per_domain = expected.nvlink_domain_gpus // expected.gpu_count
    if trays_per_domain and -(-nodes // racks) > trays_per_domain:
        raise ValueError(
            f"{nodes} {profile} nodes in {racks} racks would put more than {trays_per_domain} trays "
            f"in a rack's NVLink domain of {expected.nvlink_domain_gpus} GPUs: use at least "
            f"{-(-nodes // trays_per_domain)} racks"
        )
    width = max(3, len(str(nodes)))
    entries = []
    for i in range(nodes):
        name = validate_node_name(f"{name_prefix}-{i + 1:0{width}d}")
        rack = f"rack-{i * racks // nodes + 1:02d}"
        entry: InventoryEntry = {
            "name": name,
            "address": f"{SIM_SCHEME}{name}",
            "bmc": f"{SIM_SCHEME}{name}-bmc",
            "rack": rack,
            "profile": profile,
            "scheduler": "sim",
            "labels": {"rack": rack, "sim-seed": str(seed)},
        }
        if trays_per_domain:
            entry["nvlink_domain"] = f"nvl{expected.nvlink_domain_gpus}-{rack}"
        if islands:
            rack_index = i * racks // nodes
            first_in_rack = -(-rack_index * nodes // racks)  # the first i with this rack index
            entry["switch"] = f"leaf-{rack_index + 1:02d}"
            entry["island"] = f"ib-{rack_index * islands // racks + 1:02d}"
            entry["position"] = min(i - first_in_rack + 1, MAX_RACK_POSITION)
        entries.append(entry)
    return entries
