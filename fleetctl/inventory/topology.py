"""The fabric as the inventory describes it, written as a Slurm topology.conf. Pure.

Slurm's topology/tree plugin reads switches, each with the nodes (a leaf) or the switches
under it; a job is kept under as few switches as it can, and `--switches=1` asks for one
leaf. fleetctl writes the inventory's tree:

    SwitchName=leaf-1 Nodes=gpu-[001-004]          one line per leaf switch
    SwitchName=ib-a Switches=leaf-[1-2]            one per island, over its leaves
    SwitchName=spine Switches=ib-[a-b]             one root over the islands, when several

Nodes of an island that name no switch hang under the island itself (an NVLink domain has
no leaf switch of its own). Slurm treats switches with no common parent as fabrics a job
cannot span, so when the tree has several tops a root (`spine`) joins them: islands of one
InfiniBand fabric reach each other through its spine. Only nodes Slurm runs belong in the
file (slurmctld refuses a node its slurm.conf does not define).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from fleetctl.inventory.hostlist import compress
from fleetctl.inventory.names import LABEL_VALUE_RE

DEFAULT_ROOT = "spine"
HEADER = "# Slurm topology.conf for TopologyPlugin=topology/tree, written by `fleetctl topology slurm-conf`."


class TopologyError(ValueError):
    pass


class Placed(Protocol):
    """What the topology needs of a node: the inventory's NodeSpec and the database's Node both are."""

    @property
    def name(self) -> str: ...
    @property
    def switch(self) -> str: ...
    @property
    def island(self) -> str: ...


@dataclass(frozen=True)
class Switch:
    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()

    def line(self) -> str:
        if self.nodes:
            return f"SwitchName={self.name} Nodes={compress(self.nodes)}"
        return f"SwitchName={self.name} Switches={compress(self.switches)}"


def switch_island_conflict(nodes: Sequence[Placed]) -> str | None:
    """Why the nodes do not form a tree, when two on one leaf switch name different islands
    (the switch would hang under both: Slurm refuses it, and a restart's island would be
    ambiguous); None when every switch is in one island."""
    found = _first_disagreement(nodes, "switch", "island")
    if found is None:
        return None
    seen, n = found
    return (
        f"node {n.name}: switch {n.switch} is in island {seen.island or '(none)'} at node {seen.name}, "
        f"not {n.island or '(none)'}"
    )


def domain_profile_conflict(nodes: Sequence[Any]) -> str | None:
    """Why the nodes' NVLink domains are inconsistent, when two nodes of one domain name
    different profiles (the trays of one NVL72 rack are one kind of machine: a mixed domain is a
    typo that would judge one tray's fabric against another machine's numbers); None when each
    domain has one profile. `nodes` have name, profile and nvlink_domain (the inventory's NodeSpec)."""
    found = _first_disagreement(nodes, "nvlink_domain", "profile")
    if found is None:
        return None
    seen, n = found
    return (
        f"node {n.name}: NVLink domain {n.nvlink_domain} has profile {seen.profile} at node {seen.name}, "
        f"not {n.profile} (a domain's nodes share one profile)"
    )


def _first_disagreement(nodes: Sequence[Any], group: str, value: str) -> tuple[Any, Any] | None:
    """The first node whose `value` differs from that of the first node of its `group` (nodes
    with no group are in none), with that first node: (first, differing); None when each group
    agrees."""
    first: dict[str, Any] = {}
    for n in nodes:
        key = getattr(n, group)
        if not key:
            continue
        seen = first.setdefault(key, n)
        if getattr(seen, value) != getattr(n, value):
            return seen, n
    return None


def domain_size_conflict(nodes: Sequence[Any], sizes: Mapping[str, tuple[int, int]]) -> str | None:
    """Why the nodes' NVLink domains do not fit their profile, or None. `sizes`: per profile
    name, (GPUs per node, GPUs in one NVLink domain; 0: none spans nodes). A node of a profile
    whose NVLink ends at the chassis (HGX) names no domain, and a domain holds no more nodes
    than its GPUs allow (a GB200 NVL72: 72 GPUs, 18 trays of 4): more is two racks under one
    name, whose fault would hold the wrong trays. A profile not in `sizes` is not judged."""
    members: dict[str, list[Any]] = {}
    for n in nodes:
        if n.nvlink_domain and n.profile in sizes:
            if sizes[n.profile][1] == 0:
                return (
                    f"node {n.name}: profile {n.profile} has no multi-node NVLink domain, "
                    f"so it names no nvlink_domain (not {n.nvlink_domain})"
                )
            members.setdefault(n.nvlink_domain, []).append(n)
    for domain, trays in members.items():
        per_node, domain_gpus = sizes[trays[0].profile]
        if len(trays) * per_node > domain_gpus:
            return (
                f"NVLink domain {domain}: {len(trays)} nodes of {per_node} GPUs ({trays[0].profile}) are "
                f"{len(trays) * per_node} GPUs, more than its domain of {domain_gpus}"
            )
    return None


def switch_tree(nodes: Sequence[Placed], root: str = DEFAULT_ROOT) -> list[Switch]:
    """The switches, leaves first, then islands, then the root when the tree needs one.

    Raises TopologyError (one line) for a node with no place in the tree (no switch and no
    island), a switch in two islands, an island whose nodes are partly on switches and partly not (Slurm's switch has
    nodes or switches, not both), and a name used for two things."""
    if not LABEL_VALUE_RE.match(root) or not root:
        raise TopologyError(f"root switch name {root[:64]!r} is not a valid switch name")
    unplaced = [n.name for n in nodes if not n.switch and not n.island]
    if unplaced:
        more = f" and {len(unplaced) - 3} more" if len(unplaced) > 3 else ""
        raise TopologyError(
            f"{', '.join(unplaced[:3])}{more}: no switch and no island in the inventory, so no place in the topology"
        )
    if conflict := switch_island_conflict(nodes):
        raise TopologyError(conflict)
    leaves: dict[str, list[str]] = {}
    leaf_island: dict[str, str] = {}
    island_nodes: dict[str, list[str]] = {}
    for n in nodes:
        if n.switch:
            leaves.setdefault(n.switch, []).append(n.name)
            leaf_island.setdefault(n.switch, n.island)
        else:
            island_nodes.setdefault(n.island, []).append(n.name)
    island_leaves: dict[str, list[str]] = {}
    for leaf, island in leaf_island.items():
        if island:
            island_leaves.setdefault(island, []).append(leaf)
    for island in island_nodes:
        if island in island_leaves:
            raise TopologyError(
                f"island {island}: some nodes name a switch and {island_nodes[island][0]} does not; "
                "a Slurm switch holds nodes or switches, not both"
            )
    names = [*leaves, *dict.fromkeys([*island_leaves, *island_nodes])]
    clash = {name for name in names if names.count(name) > 1}
    if clash:
        raise TopologyError(f"{sorted(clash)[0]} names both a switch and an island")
    switches = [Switch(leaf, nodes=tuple(members)) for leaf, members in leaves.items()]
    # Islands in the inventory's order, whichever kind each is.
    for island in dict.fromkeys(n.island for n in nodes if n.island):
        if island in island_nodes:
            switches.append(Switch(island, nodes=tuple(island_nodes[island])))
        else:
            switches.append(Switch(island, switches=tuple(island_leaves[island])))
    under = {s for members in island_leaves.values() for s in members}
    tops = [s.name for s in switches if s.name not in under]
    if len(tops) > 1:
        if root in names:
            raise TopologyError(
                f"the root switch {root} is also a switch or island of the inventory; choose another root"
            )
        switches.append(Switch(root, switches=tuple(tops)))
    return switches


def slurm_topology_conf(nodes: Sequence[Placed], root: str = DEFAULT_ROOT) -> str:
    """The topology.conf text for these nodes (the ones Slurm runs)."""
    if not nodes:
        raise TopologyError("no Slurm nodes in the inventory: nothing to write")
    return "\n".join([HEADER, *(s.line() for s in switch_tree(nodes, root)), ""])
