"""The YAML inventory: parse and validate every entry before anything is written.

    nodes:
      - name: gpu-001
        address: 10.0.0.1            # or user@host:port, or sim://gpu-001
        bmc: https://10.1.0.1        # optional
        rack: rack-01
        position: 12                 # optional: rack unit (1-99), for the rack view's order
        switch: leaf-01              # optional: the leaf switch its fabric port is on
        island: ib-a                 # optional: InfiniBand island / NVLink domain (restarts stay in it)
        nvlink_domain: nvl72-r01     # optional: the multi-node NVLink domain (GB200 NVL72 rack) it is in
        profile: h100-sxm
        scheduler: slurm             # slurm | kubernetes | sim | none, or a list: [slurm, kubernetes]
        user: ubuntu                 # optional SSH user
        jump: ops@bastion-1:22       # optional SSH jump host (default: the ssh_jump_host setting)
        labels: {pool: training}

A node that several schedulers run (Slurm on Kubernetes, SUNK: the Kubernetes node runs a
slurmd pod under the same name) lists them; they are stored joined in drain order (Slurm,
whose jobs are the training jobs, before the Kubernetes cordon), as `slurm+kubernetes`.

Errors name the file, the entry and the field, and nothing is written if any entry is bad.
One address or BMC belongs to one node name (fleetctl.inventory.machines).
Names are compared case-insensitively (`gpu-001` and `GPU-001` are one machine to DNS and to
an operator); a node for the Kubernetes scheduler must have a name Kubernetes accepts; a BMC
reached over plain http is refused unless the operator allowed it (its credentials would
cross the network in clear).

Topology (`switch`, `island`, `position`) is optional. Switch and island names are what a
Slurm topology.conf accepts as a SwitchName (`fleetctl topology slurm-conf`): letters,
digits, '.', '_' and '-', at most 63 characters. A leaf switch hangs under one island, so
two nodes on the same switch must name the same island.

`nvlink_domain` names the multi-node NVLink domain a node's GPUs share (a GB200 NVL72 rack:
18 compute trays over 9 NVLink switch trays); HGX nodes, whose NVLink ends at the chassis,
name none. It is what the capacity guard and a restart treat as one unit when the domain's
fabric fails (docs/topology.md). Its name is a switch name's alphabet, and the trays of one
domain are one kind of machine, so a domain's nodes must name one profile.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, overload

from fleetctl.checks.safe_yaml import YamlRefused, excerpt, loads, read_text
from fleetctl.inventory.machines import MachineIds, machine_conflict
from fleetctl.inventory.names import (
    LABEL_KEY_RE,
    LABEL_VALUE_RE,
    NODE_NAME_RE,
    SCHEDULER_JOIN,
    scheduler_members,
    valid_kubernetes_node_name,
)
from fleetctl.inventory.topology import domain_profile_conflict, switch_island_conflict

SCHEDULERS = ("slurm", "kubernetes", "sim", "none")
_ADDRESS_RE = re.compile(r"^(sim://[A-Za-z0-9._-]+|([A-Za-z0-9._-]+@)?[A-Za-z0-9.:_\[\]-]+)\Z")
# [user@]host[:port] of an SSH jump host (bastion); its host key is verified as a node's is.
JUMP_HOST_RE = re.compile(r"^([A-Za-z0-9._-]+@)?[A-Za-z0-9.:_\[\]-]+\Z")
_BMC_RE = re.compile(r"^(sim://[A-Za-z0-9._-]+|https?://[A-Za-z0-9.:_\[\]-]+(/[A-Za-z0-9._/-]*)?)\Z")
_KNOWN_KEYS = {
    "name",
    "address",
    "bmc",
    "rack",
    "position",
    "switch",
    "island",
    "profile",
    "scheduler",
    "user",
    "jump",
    "labels",
    "nvlink_domain",
}
# Rack units: the tallest racks in use are 58U; a larger number is a typo.
MAX_RACK_POSITION = 99


class InventoryError(ValueError):
    pass


@dataclass(frozen=True)
class NodeSpec:
    name: str
    address: str
    profile: str
    rack: str = ""
    switch: str = ""
    island: str = ""
    position: int | None = None
    bmc: str | None = None
    scheduler: str = "none"
    user: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    jump: str | None = None
    nvlink_domain: str = ""  # "" : in no multi-node NVLink domain (an HGX node)


@overload
def _text(
    where: str, entry: dict[Any, Any], key: str, pattern: re.Pattern[str] | None, required: Literal[True]
) -> str: ...
@overload
def _text(
    where: str, entry: dict[Any, Any], key: str, pattern: re.Pattern[str] | None, required: Literal[False]
) -> str | None: ...
def _text(where: str, entry: dict[Any, Any], key: str, pattern: re.Pattern[str] | None, required: bool) -> str | None:
    value = entry.get(key)
    if value is None:
        if required:
            raise InventoryError(f"{where}: missing field '{key}'")
        return None
    # The loader keeps every number that is not plain decimal (0123, 0x1F, 1e3) a string, so
    # an integer here is written exactly as the operator wrote it.
    if not isinstance(value, (str, int)) or isinstance(value, bool):
        raise InventoryError(f"{where}: field '{key}' must be a string")
    value = str(value)
    if pattern is not None and not pattern.match(value):
        raise InventoryError(f"{where}: field '{key}' has an invalid value {excerpt(value)}")
    return value


def _position(where: str, entry: dict[Any, Any]) -> int | None:
    value = entry.get("position")
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_RACK_POSITION:
        raise InventoryError(
            f"{where}: field 'position' must be a rack unit from 1 to {MAX_RACK_POSITION}, not {excerpt(str(value))}"
        )
    return value


def _scheduler(where: str, entry: dict[Any, Any]) -> str:
    """The entry's scheduler kind, or its several kinds joined in drain order."""
    raw = entry.get("scheduler")
    if not isinstance(raw, list):
        scheduler = _text(where, entry, "scheduler", None, False) or "none"
        if scheduler not in SCHEDULERS:
            raise InventoryError(
                f"{where}: field 'scheduler' must be one of {', '.join(SCHEDULERS)}, or a list of them"
            )
        return scheduler
    several = [kind for kind in SCHEDULERS if kind != "none"]
    if len(raw) < 2 or len(set(map(str, raw))) != len(raw) or not all(isinstance(k, str) and k in several for k in raw):
        raise InventoryError(f"{where}: field 'scheduler': a list names two or more of {', '.join(several)}, each once")
    return SCHEDULER_JOIN.join(kind for kind in several if kind in raw)


def parse_labels(where: str, raw: Any) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise InventoryError(f"{where}: field 'labels' must be a mapping")
    labels = {}
    for key, value in raw.items():
        key, value = str(key), "" if value is None else str(value)
        if not LABEL_KEY_RE.match(key):
            raise InventoryError(f"{where}: label key {excerpt(key)} is invalid")
        if not LABEL_VALUE_RE.match(value):
            raise InventoryError(f"{where}: label {key} has an invalid value {excerpt(value)}")
        labels[key] = value
    return labels


def parse_inventory(
    text: str, source: str = "<inventory>", known_profiles: set[str] | None = None, allow_http_bmc: bool = False
) -> list[NodeSpec]:
    try:
        doc = loads(text, source)
    except YamlRefused as exc:
        raise InventoryError(str(exc)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("nodes"), list):
        raise InventoryError(f"{source}: expected a top-level 'nodes:' list")
    specs: list[NodeSpec] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(doc["nodes"]):
        where = f"{source}: nodes[{index}]"
        if not isinstance(entry, dict):
            raise InventoryError(f"{where}: expected a mapping")
        name = _text(where, entry, "name", NODE_NAME_RE, True)
        where = f"{source}: nodes[{index}] ({name})"
        unknown = set(entry) - _KNOWN_KEYS
        if unknown:
            raise InventoryError(f"{where}: unknown field '{sorted(unknown, key=str)[0]}'")
        if name.lower() in seen:
            raise InventoryError(f"{where}: duplicate name (first at nodes[{seen[name.lower()]}]) (names ignore case)")
        seen[name.lower()] = index
        profile = _text(where, entry, "profile", NODE_NAME_RE, True)
        if known_profiles is not None and profile not in known_profiles:
            raise InventoryError(
                f"{where}: field 'profile': unknown profile {profile!r} (known: {', '.join(sorted(known_profiles))})"
            )
        scheduler = _scheduler(where, entry)
        if "kubernetes" in scheduler_members(scheduler) and not valid_kubernetes_node_name(name):
            raise InventoryError(f"{where}: Kubernetes node names are lower-case letters, digits, '-' and '.'")
        bmc = _text(where, entry, "bmc", _BMC_RE, False)
        if bmc is not None and bmc.lower().startswith("http://") and not allow_http_bmc:
            raise InventoryError(
                f"{where}: field 'bmc': plain http sends the BMC credentials in clear "
                "(use https, or set bmc_allow_http)"
            )
        specs.append(
            NodeSpec(
                name=name,
                address=_text(where, entry, "address", _ADDRESS_RE, True),
                profile=profile,
                rack=_text(where, entry, "rack", LABEL_VALUE_RE, False) or "",
                switch=_text(where, entry, "switch", LABEL_VALUE_RE, False) or "",
                island=_text(where, entry, "island", LABEL_VALUE_RE, False) or "",
                position=_position(where, entry),
                bmc=bmc,
                scheduler=scheduler,
                user=_text(where, entry, "user", NODE_NAME_RE, False),
                labels=parse_labels(where, entry.get("labels")),
                jump=_text(where, entry, "jump", JUMP_HOST_RE, False),
                nvlink_domain=_text(where, entry, "nvlink_domain", LABEL_VALUE_RE, False) or "",
            )
        )
    if conflict := switch_island_conflict(specs) or domain_profile_conflict(specs) or machine_conflict(machines(specs)):
        raise InventoryError(f"{source}: {conflict}")
    return specs


def machines(specs: Iterable[NodeSpec]) -> list[MachineIds]:
    """What identifies each spec's hardware (the one-name-per-machine rule's input)."""
    return [MachineIds(s.name, s.address, s.bmc) for s in specs]


def load_inventory(
    path: str | Path, known_profiles: set[str] | None = None, allow_http_bmc: bool = False
) -> list[NodeSpec]:
    try:
        text = read_text(path)
    except YamlRefused as exc:
        raise InventoryError(str(exc)) from None
    return parse_inventory(text, str(path), known_profiles, allow_http_bmc)


def parse_selector(selector: str) -> dict[str, str]:
    """`key=value,key2=value2` as used by `node list -l`."""
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in selector.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not LABEL_KEY_RE.match(key.strip()) or not LABEL_VALUE_RE.match(value.strip()):
            raise InventoryError(f"bad label selector {excerpt(part)}: expected key=value[,key=value]")
        labels[key.strip()] = value.strip()
    return labels
