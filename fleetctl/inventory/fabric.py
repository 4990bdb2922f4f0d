"""The fabric as it is cabled: `ibnetdiscover` output read into leaves, spines and islands,
NVLink domains read from `nvidia-smi -q` (each GPU's fabric ClusterUUID and CliqueId), where
the inventory disagrees with them, and what the schedulers take: Slurm's topology.conf as a
tree (topology/tree) and as blocks (topology/block, one per NVLink domain), Kubernetes node
labels. Pure.

How ibnetdiscover's output is read (rdma-core's ibnetdiscover(8), and NVIDIA Topograph's
reader of it, pkg/ib/ib.go): blocks separated by blank lines, each a `Switch N "S-<guid>" #
"<description>" ...` or `Ca N "H-<guid>" # "<description>"` line followed by one line per
connected port, `[port] "<peer guid>"[peer port] ...`. A switch's description is
`MF0;<name>:<model>` on NVIDIA Quantum switches, whose name is the part between `;` and `:`.
An HCA's description is `<host> <device>` when the host set its node description (`mlx5_0`,
`HCA-1`); any other (`MT4129 ConnectX7 Mellanox Technologies`, a SHARP `Aggregation Node`)
names no host, and the HCA is counted, not placed.

A leaf is a switch with a host's HCA on it; a host's HCAs reach one leaf per rail, and the
hosts that reach the same set of leaves (a rail-optimised scalable unit: one leaf per rail,
shared by every host of the unit) are one Slurm switch, named after their first leaf. Leaves
joined through spines (switches with no host) are one island, named after its first spine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.nvidia_smi import parse_nvidia_smi
from fleetctl.inventory.hostlist import compress
from fleetctl.inventory.names import LABEL_VALUE_RE

_SWITCH = re.compile(r'^Switch\s+\d+\s+"(?P<guid>S-[0-9a-fA-F]+)"\s+#\s+"(?P<desc>[^"]*)"')
_CA = re.compile(r'^Ca\s+\d+\s+"(?P<guid>H-[0-9a-fA-F]+)"\s+#\s+"(?P<desc>[^"]*)"')
_PORT = re.compile(r'^\[\d+\](?:\([0-9a-fA-F]+\))?\s+"(?P<peer>[SH]-[0-9a-fA-F]+)"\[\d+\]')
_QUANTUM_NAME = re.compile(r"^[^;:]+;(?P<name>[^;:]+):[^;:]+$")
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"
BLOCK_HEADER = "# Slurm topology.conf for TopologyPlugin=topology/block, written by `fleetctl topology fabric`."
LABEL_PREFIX = "topology.fleetctl.io/"


class FabricError(ValueError):
    """The output is not a fabric fleetctl can read (one line, for the operator)."""


@dataclass(frozen=True)
class FabricSwitch:
    guid: str
    name: str
    peers: frozenset[str]  # the guids of the switches and HCAs on its ports


@dataclass(frozen=True)
class Fabric:
    switches: dict[str, FabricSwitch]
    hosts: dict[str, str]  # an HCA's guid -> the host it names
    unnamed_hcas: int = 0  # HCAs whose description names no host


@dataclass(frozen=True)
class Placement:
    """A node's place in the fabric (fleetctl.inventory.topology's Placed)."""

    name: str
    switch: str
    island: str


def parse_ibnetdiscover(text: str) -> Fabric:
    """Raises FabricError for output with no switch (a host alone, or not ibnetdiscover's)."""
    ports: dict[str, set[str]] = {}
    names: dict[str, str] = {}
    hosts: dict[str, str] = {}
    unnamed: set[str] = set()
    current: str | None = None
    for line in text.splitlines():
        if m := _SWITCH.match(line):
            current = m["guid"]
            names[current] = _switch_name(m["desc"], current)
            ports.setdefault(current, set())
        elif m := _CA.match(line):
            current = None
            words = m["desc"].split()
            if len(words) == 2:
                hosts[m["guid"]] = words[0]
            else:
                unnamed.add(m["guid"])
        elif not line.strip():
            current = None
        elif current is not None and (m := _PORT.match(line)):
            ports[current].add(m["peer"])
    if not names:
        raise FabricError("no switch in the ibnetdiscover output: no fabric to place nodes in")
    switches = {guid: FabricSwitch(guid, names[guid], frozenset(ports[guid])) for guid in names}
    return Fabric(switches, hosts, len(unnamed))


def _switch_name(description: str, guid: str) -> str:
    m = _QUANTUM_NAME.match(description)
    name = m["name"] if m else description
    return name if name and LABEL_VALUE_RE.match(name) else guid.lower()


def place_hosts(fabric: Fabric) -> dict[str, Placement]:
    """Every named host's leaf group and island, by host name."""
    host_leaves: dict[str, set[str]] = {}
    for switch in fabric.switches.values():
        for peer in switch.peers:
            if peer in fabric.hosts:
                host_leaves.setdefault(fabric.hosts[peer], set()).add(switch.guid)
    groups: dict[frozenset[str], list[str]] = {}
    for host, leaves in host_leaves.items():
        groups.setdefault(frozenset(leaves), []).append(host)
    islands = _islands(fabric, {leaf for group in groups for leaf in group})
    placed: dict[str, Placement] = {}
    taken: set[str] = set()
    # The largest group first: a unit's own leaves name it before a stray host's subset of them.
    for group, members in sorted(groups.items(), key=lambda g: (-len(g[1]), sorted(g[0]))):
        name = _unique(min(fabric.switches[leaf].name for leaf in group), taken)
        island = islands[min(group)]
        for host in members:
            placed[host] = Placement(host, name, island)
    return placed


def _unique(name: str, taken: set[str]) -> str:
    candidate, n = name, 1
    while candidate in taken:
        n += 1
        candidate = f"{name}-{n}"
    taken.add(candidate)
    return candidate


def _islands(fabric: Fabric, leaves: set[str]) -> dict[str, str]:
    """Each leaf's island: the leaves joined through spines, named after their first spine
    ("" for a leaf with no spine)."""
    parent = {leaf: leaf for leaf in leaves}

    def root(leaf: str) -> str:
        while parent[leaf] != leaf:
            parent[leaf] = parent[parent[leaf]]
            leaf = parent[leaf]
        return leaf

    spines_of = {
        leaf: {p for p in fabric.switches[leaf].peers if p in fabric.switches and p not in leaves} for leaf in leaves
    }
    by_spine: dict[str, list[str]] = {}
    for leaf, spines in spines_of.items():
        for spine in spines:
            by_spine.setdefault(spine, []).append(leaf)
    for members in by_spine.values():
        for leaf in members[1:]:
            parent[root(leaf)] = root(members[0])
    spine_names: dict[str, list[str]] = {}
    for leaf, spines in spines_of.items():
        spine_names.setdefault(root(leaf), []).extend(fabric.switches[s].name for s in spines)
    return {leaf: min(spine_names[root(leaf)], default="") for leaf in leaves}


class InventoryNode(Protocol):
    """What matching reads of an inventory entry (the inventory's NodeSpec)."""

    @property
    def name(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def switch(self) -> str: ...
    @property
    def island(self) -> str: ...


@dataclass
class FabricView:
    """The inventory's nodes placed by the fabric, and where the two disagree."""

    placed: list[Placement] = field(default_factory=list)  # in the inventory's order, by node name
    not_in_fabric: list[str] = field(default_factory=list)  # inventory nodes no HCA names
    not_in_inventory: list[str] = field(default_factory=list)  # fabric hosts the inventory lacks
    unnamed_hcas: int = 0
    disagreements: list[str] = field(default_factory=list)


def compare_with_inventory(fabric: Fabric, nodes: Sequence[InventoryNode]) -> FabricView:
    """The inventory's nodes in the fabric (a node is its fabric host by name, or by its
    address's host: `user@host:port` or a bare host), and where the inventory's switch and
    island say otherwise."""
    places = place_hosts(fabric)
    view = FabricView(unnamed_hcas=fabric.unnamed_hcas)
    matched: set[str] = set()
    for node in nodes:
        host = next((h for h in (node.name, _host_of(node.address)) if h in places), None)
        if host is None:
            view.not_in_fabric.append(node.name)
            continue
        matched.add(host)
        view.placed.append(Placement(node.name, places[host].switch, places[host].island))
    view.not_in_inventory = sorted(set(places) - matched)
    by_name = {n.name: n for n in nodes}
    view.disagreements = [
        *_partition_disagreements(view.placed, by_name, "switch", "leaf"),
        *_partition_disagreements(view.placed, by_name, "island", "island"),
    ]
    return view


def _host_of(address: str) -> str:
    return address.rpartition("@")[2].partition(":")[0]


def _partition_disagreements(
    placed: Sequence[Placement], nodes: Mapping[str, InventoryNode], field_name: str, what: str
) -> list[str]:
    """Nodes the fabric puts together that the inventory splits, and the reverse: names may
    differ (an inventory's `leaf-3` is the fabric's `A09-P1-IBLEAF-01-03`), groupings may not."""
    fabric_groups: dict[str, list[str]] = {}
    inventory_groups: dict[str, list[str]] = {}
    for p in placed:
        fabric_groups.setdefault(getattr(p, field_name), []).append(p.name)
        inventory_groups.setdefault(getattr(nodes[p.name], field_name), []).append(p.name)
    found = []
    for fabric_name, members in fabric_groups.items():
        said = sorted({getattr(nodes[m], field_name) or "(none)" for m in members})
        if len(said) > 1:
            found.append(
                f"fabric {what} {fabric_name or '(none)'} holds {compress(members)}; the inventory splits them: {', '.join(said)}"
            )
    for inventory_name, members in inventory_groups.items():
        seen = sorted({getattr(p, field_name) or "(none)" for p in placed if p.name in members})
        if inventory_name and len(seen) > 1:
            found.append(
                f"inventory {field_name} {inventory_name} holds {compress(members)}; the fabric splits them: {', '.join(seen)}"
            )
    return found


def nvlink_domains(outputs: Mapping[str, str]) -> tuple[dict[str, str], list[str]]:
    """Each node's NVLink domain from its `nvidia-smi -q` (its GPUs' ClusterUUID and CliqueId,
    `<uuid>-<clique>`), and why a node has none: no fabric section, not registered (a zero
    ClusterUUID or CliqueId 0), or GPUs in different domains."""
    domains: dict[str, str] = {}
    problems: list[str] = []
    for node, text in sorted(outputs.items()):
        try:
            gpus = parse_nvidia_smi(text).gpus
        except UnjudgeableOutput as exc:
            problems.append(f"{node}: {exc}")
            continue
        seen = {(g.fabric.get("ClusterUUID", ""), g.fabric.get("CliqueId", "")) for g in gpus}
        if not gpus or any(not uuid or uuid == _ZERO_UUID or clique in ("", "0") for uuid, clique in seen):
            problems.append(f"{node}: not every GPU is registered with an NVLink fabric (ClusterUUID, CliqueId)")
        elif len(seen) > 1:
            problems.append(f"{node}: its GPUs are in {len(seen)} NVLink domains, not one")
        else:
            ((uuid, clique),) = seen
            domains[node] = f"{uuid}-{clique}"
    return domains, problems


def domain_disagreements(domains: Mapping[str, str], inventory: Mapping[str, str]) -> list[str]:
    """Where the inventory's nvlink_domain (node -> name) groups nodes otherwise than the fabric."""
    found = []
    by_fabric: dict[str, list[str]] = {}
    for node, domain in domains.items():
        by_fabric.setdefault(domain, []).append(node)
    for domain, members in sorted(by_fabric.items()):
        said = sorted({inventory.get(m) or "(none)" for m in members})
        if len(said) > 1:
            found.append(
                f"NVLink domain {domain} holds {compress(members)}; the inventory splits them: {', '.join(said)}"
            )
    by_inventory: dict[str, list[str]] = {}
    for node, name in inventory.items():
        if name and node in domains:
            by_inventory.setdefault(name, []).append(node)
    for name, members in sorted(by_inventory.items()):
        seen = sorted({domains[m] for m in members})
        if len(seen) > 1:
            found.append(
                f"inventory nvlink_domain {name} holds {compress(members)}; the fabric splits them: {', '.join(seen)}"
            )
    return found


def slurm_block_conf(domains: Mapping[str, str], names: Mapping[str, str] | None = None) -> str:
    """topology.conf for topology/block: one block per NVLink domain, its nodes together (Slurm
    23.11 and later). `names`: a block name per domain (the inventory's), else `block<N>` in
    the order of the domains' first nodes, the domain in a comment above it."""
    if not domains:
        raise FabricError("no node in an NVLink domain: no block to write")
    members: dict[str, list[str]] = {}
    for node in sorted(domains):
        members.setdefault(domains[node], []).append(node)
    lines = [BLOCK_HEADER]
    for number, (domain, nodes) in enumerate(members.items(), start=1):
        name = (names or {}).get(domain) or f"block{number:03d}"
        lines += [f"# {name}: NVLink domain {domain}", f"BlockName={name} Nodes={compress(nodes)}"]
    return "\n".join([*lines, ""])


def kubernetes_labels(placed: Iterable[Placement], domains: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Node labels of the fabric (topology.fleetctl.io/leaf, island, nvlink-domain), for a
    topology-aware scheduler (Kueue's levels) or a nodeSelector; a value too long or odd for a
    label is left out."""
    labels: dict[str, dict[str, Any]] = {}
    for p in placed:
        labels[p.name] = {f"{LABEL_PREFIX}leaf": p.switch, f"{LABEL_PREFIX}island": p.island}
    for node, domain in domains.items():
        labels.setdefault(node, {})[f"{LABEL_PREFIX}nvlink-domain"] = domain
    return {
        node: {k: v for k, v in values.items() if v and LABEL_VALUE_RE.match(v)}
        for node, values in sorted(labels.items())
    }
