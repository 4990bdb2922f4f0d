"""The fleet at a glance, from the database: nodes per state and rack, the racks by island, nodes
in flight (counted by fleetctl.nodes.fleet_status), suspect nodes (fleetctl.nodes.reachability),
firmware roll-outs under way, recent automation; with what the capacity guard said, which the
caller asks (that needs Temporal)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from fleetctl.checks.profiles import load_profile
from fleetctl.db import firmware as firmware_db
from fleetctl.db import gpu_quarantines, queries
from fleetctl.db import spares as spare_store
from fleetctl.durations import as_utc
from fleetctl.jobs.spares import spare_counts
from fleetctl.nodes.capacity import (
    FleetSnapshot,
    GuardPolicy,
    budgets,
    count_gpus_out,
    guard_snapshot,
    in_fleet,
    operator_drain_overruns,
)
from fleetctl.nodes.event_groups import collapse, collapse_commands
from fleetctl.nodes.fleet_status import count_states, rack_view
from fleetctl.nodes.lifecycle import Actor

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from fleetctl.db.models import Node

RECENT_AUTOMATION_EVENTS = 10
# The transitions `fleet status` reads for the watched screen's strip (more than it shows).
RECENT_TRANSITIONS = 40
# How many of the latest automation events are collapsed into those rows (event_groups): a
# sweep every 10 s repeats the same refusal for each held node, hundreds an hour.
AUTOMATION_EVENTS_READ = 1000
# The operator transitions read for the rows of commands (an adoption of a rack is many).
OPERATOR_EVENTS_READ = 500


def fleet_status(
    engine: Engine, automation: dict[str, Any], policy: GuardPolicy, fleet: str, spares_per_island: int = 0
) -> dict[str, Any]:
    """`policy`: the guard's own when it answered, else the configured one (the caller says
    which in `automation`). The budget counts the nodes of `fleet`, as its guard does."""
    nodes = queries.list_nodes(engine)
    status = count_states(nodes)
    status["islands"] = rack_view(nodes)
    status["automation"] = automation
    mine = [n for n in nodes if in_fleet(n.labels, fleet)]
    status["budget"] = [b.to_dict() for b in budgets(policy, _counted(mine, policy, engine))]
    # Hot spares are production nodes kept free for restarts: in service for the guard (the
    # budget above counts them as production), only running no job.
    names = {n.name for n in mine}
    held = {name: island for name, island in spare_store.held(engine).items() if name in names}
    status["spares"] = {"count": len(held), "per_island": spare_counts(held, spares_per_island)}
    status["held_drains"] = [
        {"node": node, "since": first, "last": last, "refusals": count, "reason": reason}
        for node, (count, first, last, reason) in sorted(
            queries.held_drains(engine, [n.name for n in mine]).items(), key=lambda kv: kv[1][1]
        )
    ]
    status["firmware_rollouts"] = [
        {
            "id": r.rollout_id,
            "status": r.status,
            "done": r.done,
            "failed": r.failed,
            "total": r.total,
            "max_failures": r.max_failures,
        }
        for state in ("running", "halted")
        for r in firmware_db.rollouts(engine, status=state)
    ]
    status["suspect"] = [
        {
            "node": name,
            "since": e.since,
            "reason": e.reason,
            "why": "agent silent" if e.actor == queries.AGENT_SILENCE_ACTOR else "unreachable",
        }
        for name, e in sorted(queries.suspect_nodes(engine).items())
    ]
    status["stalled"] = [
        {"node": name, "since": e.at, "reason": e.reason} for name, e in sorted(queries.stalled_nodes(engine).items())
    ]
    status["needs_operator"] = needs_operator(engine, mine)
    from fleetctl.nodes.view_store import gpus_out_by_node

    status["gpus_out"] = [g for gpus in gpus_out_by_node(engine, sorted(names)).values() for g in gpus]
    status["recent_automation_events"] = recent_automation(engine)[:RECENT_AUTOMATION_EVENTS]
    # What operators did, next to what they were refused (recent automation lists refusals).
    # One row per command however many nodes it named (event_groups.collapse_commands).
    status["recent_operator_commands"] = collapse_commands(
        {"at": e.at, "node": e.node_name, "trigger": e.trigger, "to": e.to_state, "actor": e.actor, "cause": e.cause}
        for e in queries.recent_events(engine, limit=OPERATOR_EVENTS_READ, actor_kind=Actor.OPERATOR.value)
    )[:RECENT_AUTOMATION_EVENTS]
    # Every node's latest transitions, whoever made them: an XID 79's drain, reboot and return
    # take seconds, and the watched screen keeps them in sight for minutes after.
    status["recent_transitions"] = [
        {
            "at": e.at,
            "node": e.node_name,
            "from": e.from_state,
            "to": e.to_state,
            "trigger": e.trigger,
            "actor": e.actor,
            "cause": e.cause,
        }
        for e in queries.recent_events(engine, limit=RECENT_TRANSITIONS)
    ]
    return status


def needs_operator(engine: Engine, nodes: Iterable[Node]) -> list[dict[str, Any]]:
    """The nodes whose runbook run failed or is stuck (RemediationFailed, RemediationStuck, as
    `node show` judges them), the longest waiting first."""
    from fleetctl.nodes.view_store import remediation_conditions

    found = remediation_conditions(engine, list(nodes), datetime.now(UTC))
    return sorted(
        ({"node": name, "condition": c.type, "since": c.since, "reason": c.reason} for name, c in found.items()),
        key=lambda r: (r["since"] is None, r["since"] or datetime.min.replace(tzinfo=UTC), r["node"]),
    )


def recent_automation(engine: Engine, node: str | None = None) -> list[dict[str, Any]]:
    """The latest automation events (of `node`, or all), repeats collapsed: one row per node,
    kind and reason class with its count and first/last seen, the one seen last first."""
    events = [
        {"at": as_utc(e.at), "kind": e.kind, "node": e.node_name, "reason": e.reason}
        for e in queries.automation_events(engine, limit=AUTOMATION_EVENTS_READ, node=node)
    ]
    return [g.to_dict() for g in collapse(events)]


def drain_overruns(engine: Engine, policy: GuardPolicy, fleet: str, names: Iterable[str]) -> list[str]:
    """What an operator's drain of `names` would take past the automation limits of `fleet`."""
    mine = [n for n in queries.list_nodes(engine) if in_fleet(n.labels, fleet)]
    wanted = set(names)
    return operator_drain_overruns(
        policy, _counted(mine, policy, engine), [(n.rack, n.state) for n in mine if n.name in wanted]
    )


def _counted(nodes: list[Node], policy: GuardPolicy, engine: Engine) -> FleetSnapshot:
    """The fleet's nodes as its guard counts them (a fresh RMA is still out, a GPU out alone
    is 1/N of its node)."""
    snapshot = guard_snapshot([(n.rack, n.state, as_utc(n.state_since)) for n in nodes], datetime.now(UTC), policy)
    return with_gpus_out(engine, nodes, snapshot)


def with_gpus_out(engine: Engine, nodes: list[Node], snapshot: FleetSnapshot) -> FleetSnapshot:
    """`snapshot` (of `nodes`) with the GPUs out alone counted, each 1/N of its node (count_gpus_out):
    as the capacity guard and `fleet status` count them."""
    by_name = {n.name: n for n in nodes}
    return count_gpus_out(
        snapshot,
        [
            (node.rack, node.name, node.state, q.gpu, load_profile(node.profile).gpu_count)
            for q in gpu_quarantines.open_quarantines(engine)
            if (node := by_name.get(q.node_name)) is not None
        ],
    )
