"""The fleet at a glance, from the database: nodes per state and rack, the racks by island, nodes in flight, suspect
nodes (fleetctl.reachability), firmware roll-outs under way, recent automation; with what the capacity guard said, which the caller
asks (that needs Temporal)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Iterable

from fleetctl.capacity import FleetSnapshot, GuardPolicy, budgets, guard_snapshot, in_fleet, operator_drain_overruns
from fleetctl.db import firmware as firmware_db
from fleetctl.db import queries
from fleetctl.db import spares as spare_store
from fleetctl.lifecycle import Actor, NodeState
from fleetctl.metrics import as_utc
from fleetctl.spares import spare_counts

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

RECENT_AUTOMATION_EVENTS = 10


def count_states(nodes: Iterable) -> dict[str, Any]:
    """Per state (every state, zero included), per rack (the states present), and the nodes in
    flight, from Node rows. Pure."""
    nodes = list(nodes)
    per_state = {s.value: 0 for s in NodeState}
    per_rack: dict[str, dict[str, int]] = {}
    for n in nodes:
        per_state[n.state] = per_state.get(n.state, 0) + 1
        rack = per_rack.setdefault(n.rack or "-", {})
        rack[n.state] = rack.get(n.state, 0) + 1
    in_flight = [{"node": n.name, "state": n.state, "since": n.state_since} for n in nodes if NodeState(n.state).in_flight]
    return {"nodes": len(nodes), "per_state": per_state, "per_rack": per_rack, "in_flight": in_flight}


def rack_view(nodes: Iterable) -> list[dict[str, Any]]:
    """The fleet as cabinets, by island: each island ("" for nodes the inventory places in
    none, last) with its racks by name, each rack's nodes from the top of the rack down (the
    inventory's position, highest unit first; nodes without one after, by name). A rack whose
    nodes are in two islands is shown under each. Pure."""
    islands: dict[str, dict[str, list]] = {}
    for n in nodes:
        islands.setdefault(n.island, {}).setdefault(n.rack, []).append(n)

    def top_down(n) -> tuple:
        return n.position is None, -(n.position or 0), n.name

    return [
        {"island": island, "racks": [
            {"rack": rack, "nodes": [{"name": n.name, "state": n.state, "position": n.position}
                                     for n in sorted(members, key=top_down)]}
            for rack, members in sorted(racks.items())]}
        for island, racks in sorted(islands.items(), key=lambda kv: (kv[0] == "", kv[0]))
    ]


def fleet_status(engine: Engine, automation: dict[str, Any], policy: GuardPolicy, fleet: str,
                 spares_per_island: int = 0) -> dict[str, Any]:
    """`policy`: the guard's own when it answered, else the configured one (the caller says
    which in `automation`). The budget counts the nodes of `fleet`, as its guard does."""
    nodes = queries.list_nodes(engine)
    status = count_states(nodes)
    status["islands"] = rack_view(nodes)
    status["automation"] = automation
    mine = [n for n in nodes if in_fleet(n.labels, fleet)]
    status["budget"] = [b.to_dict() for b in budgets(policy, _counted(mine, policy))]
    # Hot spares are production nodes kept free for restarts: in service for the guard (the
    # budget above counts them as production), only running no job.
    names = {n.name for n in mine}
    held = {name: island for name, island in spare_store.held(engine).items() if name in names}
    status["spares"] = {"count": len(held), "per_island": spare_counts(held, spares_per_island)}
    status["held_drains"] = [
        {"node": node, "since": first, "last": last, "refusals": count, "reason": reason}
        for node, (count, first, last, reason) in sorted(queries.held_drains(engine, [n.name for n in mine]).items(),
                                                         key=lambda kv: kv[1][1])
    ]
    status["firmware_rollouts"] = [
        {"id": r.rollout_id, "status": r.status, "done": r.done, "failed": r.failed, "total": r.total,
         "max_failures": r.max_failures}
        for state in ("running", "halted") for r in firmware_db.rollouts(engine, status=state)
    ]
    status["suspect"] = [{"node": name, "since": e.at, "reason": e.reason,
                          "why": "agent silent" if e.actor == queries.AGENT_SILENCE_ACTOR else "unreachable"}
                         for name, e in sorted(queries.suspect_nodes(engine).items())]
    status["recent_automation_events"] = [
        {"at": e.at, "kind": e.kind, "node": e.node_name, "reason": e.reason, "actor": e.actor}
        for e in queries.automation_events(engine, limit=RECENT_AUTOMATION_EVENTS)
    ]
    # What operators did, next to what they were refused (recent automation lists refusals).
    status["recent_operator_commands"] = [
        {"at": e.at, "node": e.node_name, "trigger": e.trigger, "to": e.to_state, "actor": e.actor, "cause": e.cause}
        for e in queries.recent_events(engine, limit=RECENT_AUTOMATION_EVENTS, actor_kind=Actor.OPERATOR.value)
    ]
    return status


def drain_overruns(engine: Engine, policy: GuardPolicy, fleet: str, names: Iterable[str]) -> list[str]:
    """What an operator's drain of `names` would take past the automation limits of `fleet`."""
    mine = [n for n in queries.list_nodes(engine) if in_fleet(n.labels, fleet)]
    wanted = set(names)
    return operator_drain_overruns(policy, _counted(mine, policy),
                                   [(n.rack, n.state) for n in mine if n.name in wanted])


def _counted(nodes: list, policy: GuardPolicy) -> FleetSnapshot:
    """The fleet's nodes as its guard counts them (a fresh RMA is still out)."""
    return guard_snapshot([(n.rack, n.state, as_utc(n.state_since)) for n in nodes], datetime.now(timezone.utc), policy)
