"""Activities of the capacity guard: the fleet facts it decides on, and the questions other
workflows put to it (workflows cannot send Updates to other workflows; these do it for them)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

from temporalio import activity

from fleetctl.config import Settings, guard_policy
from fleetctl.db import jobs, queries
from fleetctl.durations import as_utc
from fleetctl.nodes.capacity import (
    AGENT_SOURCE,
    DOMAIN_WITNESS_WINDOW_S,
    EXTERNAL_DRAIN,
    CheckErrorReport,
    FleetSnapshot,
    GuardPolicy,
    RemovalDecision,
    RemovalRequest,
    counted_outside,
    domain_witnessed,
    guard_snapshot,
    in_service_domain,
    is_domain_fabric_fault,
    judged_critical,
    reads_snapshot,
    removals_for_fault,
)
from fleetctl.nodes.fleet_status_store import with_gpus_out
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.workflows.activities.database import DatabaseActivities, storable_key
from fleetctl.workflows.api import (
    REPORT_CHECK_ERRORS_UPDATE,
    REQUEST_REMOVAL_UPDATE,
    CapacityGuardState,
    FaultRemoval,
    FaultRemovals,
    RemovalFacts,
    RemovalFactsInput,
)

T = TypeVar("T")


class AsksGuard(Protocol):
    """Sends an Update to this fleet's guard, starting it if none runs, and returns its answer."""

    async def __call__(self, update: str, arg: Any, result_type: type[T]) -> T: ...


class GuardActivities(DatabaseActivities):
    def __init__(self, settings: Settings, ask: AsksGuard | None):
        """`ask` puts a question to this fleet's guard: the worker passes the client's own
        (workflows.client.ask_capacity_guard), so the guard is started one way, with one
        policy, whoever asks first. None where nothing is asked (the reads alone)."""
        super().__init__(settings)
        self.ask = ask

    @activity.defn
    def fleet_snapshot(self, fleet: str) -> FleetSnapshot:
        """The fleet's nodes by rack and state: a guard counts its own fleet, not every fleet; a
        production node another tool drained (its open external-drain event) as out of service."""
        policy, now = guard_policy(self.settings, fleet), datetime.now(UTC)
        nodes = self._fleet_nodes(fleet)
        drains = queries.open_external_drains(self.engine, EXTERNAL_DRAIN)
        outside = {n.name: drains[n.name].idempotency_key for n in nodes if n.name in drains}
        snapshot = guard_snapshot(
            [(n.rack, counted_outside(n.state, n.name in outside), as_utc(n.state_since)) for n in nodes], now, policy
        )
        snapshot.drained_outside = outside
        return with_gpus_out(self.engine, nodes, snapshot)

    @activity.defn
    def removal_facts(self, inp: RemovalFactsInput) -> RemovalFacts:
        """Every fact the guard decides a removal on, in one activity (one round trip of the
        guard's, where reading them one by one took four to six), read in the order the decision
        needs: the fleet's policy; for a removal said to be critical, the recorded health event
        that makes it so (judged_critical); the state versions of the pending grants' nodes, the
        node's and its domain's, read before the fleet's counts (a node that moves between the
        two reads is counted twice, never missed: read the other way round, its grant was dropped
        for a move the counts did not show yet, and a storm drained past the limit); a domain
        request's nodes still in service,
        read just before the counts (in_service_domain); the counts, when the decision reads them."""
        req = inp.request
        policy = self.fleet_policy(inp.fleet)
        if req.critical and not req.force:
            req = judged_critical(req, self.critical_evidence(req.node))
        versions = self.state_versions([*inp.pending, req.node, *req.domain_nodes])
        if req.domain_nodes:
            req = in_service_domain(req, self.in_service_nodes(req.domain_nodes))
        snapshot = self.fleet_snapshot(inp.fleet) if reads_snapshot(req) else FleetSnapshot()
        return RemovalFacts(policy, req, versions, snapshot)

    @activity.defn
    def fleet_policy(self, fleet: str) -> GuardPolicy:
        """The fleet's limits as this worker is configured, read before every decision: the
        guard never keeps what the command that happened to start it was given."""
        policy: GuardPolicy = guard_policy(self.settings, fleet)
        return policy

    @activity.defn
    def critical_evidence(self, node: str) -> str:
        """The recorded health event that makes a drain of `node` critical: one whose code the
        catalog calls critical, recorded since the node last entered production (it may have
        left since: an operator's drain won the race). Empty when there is none: a caller's word (an operator typing an XID into
        `runbook run`) is not a fault the node had."""
        from fleetctl.checks.xid import xid_action

        for ev in queries.health_events_in_service(self.engine, node):
            if ev.code is not None and xid_action(ev.code).severity == "critical":
                return f"XID {ev.code} recorded at {ev.at:%Y-%m-%d %H:%M:%S} from {ev.source}"
        return ""

    @activity.defn
    def removals_for_fault(self, fault: FaultRemoval) -> FaultRemovals:
        """The requests a fault makes (fleetctl.nodes.capacity.removals_for_fault): the node
        alone, or, for a fault of its NVLink domain's fabric, the whole domain, its nodes read
        as they are now."""
        req = fault.request
        found = queries.nodes_named(self.engine, [req.node])
        domain = found[0].nvlink_domain if found else ""
        members = [(n.name, n.state) for n in queries.nodes_in_nvlink_domain(self.engine, domain)]
        return FaultRemovals(
            removals_for_fault(req, domain, members, fault.check, fault.signature, self._witnessed(fault, domain))
        )

    def _witnessed(self, fault: FaultRemoval, domain: str) -> bool:
        """Whether a health event's fault of the domain's fabric may hold `domain`
        (fleetctl.nodes.capacity.domain_witnessed): its recorded event (the request's id is the
        event's) says who sent it; one not found is no one's word but the node's. A failed
        check is fleetctl's own finding of the domain's state: it holds the domain."""
        if not (domain and fault.signature and is_domain_fabric_fault(signature=fault.signature)):
            return True
        req = fault.request
        source = jobs.health_event_source(self.engine, req.node, storable_key(req.request_id)) or AGENT_SOURCE
        since = datetime.now(UTC) - timedelta(seconds=DOMAIN_WITNESS_WINDOW_S)
        seen = jobs.nvlink_domain_witnesses(self.engine, domain, since)
        return domain_witnessed(source, req.node, seen.reporters, seen.check_failed)

    @activity.defn
    def in_service_nodes(self, names: list[str]) -> list[str]:
        """Those of `names` in service now (a domain request's other nodes, read again by the guard)."""
        return [n.name for n in queries.nodes_named(self.engine, names) if NodeState(n.state).in_service]

    @activity.defn
    def state_versions(self, names: list[str]) -> dict[str, int]:
        """Each node's state version: it changes with every transition of the node."""
        return {n.name: n.state_version for n in queries.nodes_named(self.engine, names)}

    @activity.defn
    async def ask_capacity_guard(self, req: RemovalRequest) -> RemovalDecision:
        return await self._asked()(REQUEST_REMOVAL_UPDATE, req, RemovalDecision)

    @activity.defn
    async def report_check_errors(self, report: CheckErrorReport) -> None:
        await self._asked()(REPORT_CHECK_ERRORS_UPDATE, report, CapacityGuardState)

    def _asked(self) -> AsksGuard:
        if self.ask is None:
            raise RuntimeError("these guard activities were made to read, not to ask the guard")
        return self.ask
