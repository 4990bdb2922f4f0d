"""The fleet at a glance, counted: nodes per state and rack, the nodes in flight, the racks by
island. Pure: fleetctl.nodes.fleet_status_store reads the rows."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any, Protocol

from fleetctl.nodes.lifecycle import NodeState


class CountedNode(Protocol):
    """What the counts read of a node: the database's Node row is one."""

    @property
    def name(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def state_since(self) -> datetime: ...
    @property
    def rack(self) -> str: ...
    @property
    def island(self) -> str: ...
    @property
    def position(self) -> int | None: ...


def count_states(nodes: Iterable[CountedNode]) -> dict[str, Any]:
    """Per state (every state, zero included), per rack (the states present), and the nodes in
    flight, from Node rows."""
    nodes = list(nodes)
    per_state = {s.value: 0 for s in NodeState}
    per_rack: dict[str, dict[str, int]] = {}
    for n in nodes:
        per_state[n.state] = per_state.get(n.state, 0) + 1
        rack = per_rack.setdefault(n.rack or "-", {})
        rack[n.state] = rack.get(n.state, 0) + 1
    in_flight = [
        {"node": n.name, "state": n.state, "since": n.state_since} for n in nodes if NodeState(n.state).in_flight
    ]
    return {"nodes": len(nodes), "per_state": per_state, "per_rack": per_rack, "in_flight": in_flight}


def rack_view(nodes: Iterable[CountedNode]) -> list[dict[str, Any]]:
    """The fleet as cabinets, by island: each island ("" for nodes the inventory places in
    none, last) with its racks by name, each rack's nodes from the top of the rack down (the
    inventory's position, highest unit first; nodes without one after, by name). A rack whose
    nodes are in two islands is shown under each."""
    islands: dict[str, dict[str, list[CountedNode]]] = {}
    for n in nodes:
        islands.setdefault(n.island, {}).setdefault(n.rack, []).append(n)

    def top_down(n: CountedNode) -> tuple[bool, int, str]:
        return n.position is None, -(n.position or 0), n.name

    return [
        {
            "island": island,
            "racks": [
                {
                    "rack": rack,
                    "nodes": [
                        {"name": n.name, "state": n.state, "position": n.position}
                        for n in sorted(members, key=top_down)
                    ],
                }
                for rack, members in sorted(racks.items())
            ],
        }
        for island, racks in sorted(islands.items(), key=lambda kv: (kv[0] == "", kv[0]))
    ]
