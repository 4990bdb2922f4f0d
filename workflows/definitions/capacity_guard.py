"""CapacityGuard: one workflow per fleet (id `capacity-guard/<fleet>`) that every automated
removal from production asks first. Decisions are serialised by a lock, so two sweeps
asking at once cannot both take the last node a rack may lose."""

from __future__ import annotations

import asyncio

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.capacity import (
        CheckErrorReport,
        FleetSnapshot,
        RemovalDecision,
        RemovalRequest,
        already_out,
        checker_storm,
        counts_as_failure,
        decide,
        failure_key,
        gpu_grant_key,
        grant_for,
        in_service_domain,
        judged_critical,
        reads_snapshot,
        removal_cost,
    )
    from fleetctl.workflows.activities.guard import GuardActivities
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.api import (
        REQUEST_REMOVAL_UPDATE,
        ROLL_FORWARD_SIGNAL,
        STEPWISE_REQUEST_REMOVAL_UPDATE,
        AutomationRecord,
        CapacityGuardState,
        PendingGrant,
        RemovalFactsInput,
        ResumeAutomation,
    )
    from fleetctl.workflows.definitions.shared import QUICK, quick_local, record_automation

# A granted removal shows in the database within seconds (the node's own transition); until
# then it is counted here so that concurrent requests see it.
PENDING_GRANT_TTL_S = 600.0
DECISIONS_PER_RUN = 500


@workflow.defn
class CapacityGuard:
    @workflow.init
    def __init__(self, state: CapacityGuardState) -> None:
        self.s = state
        self.lock = asyncio.Lock()
        self.decisions_this_run = 0
        self.rolling_forward = False

    @workflow.run
    async def run(self, state: CapacityGuardState) -> None:
        await workflow.wait_condition(
            lambda: (
                self.rolling_forward
                or self.decisions_this_run >= DECISIONS_PER_RUN
                or workflow.info().is_continue_as_new_suggested()
            )
        )
        await workflow.wait_condition(workflow.all_handlers_finished)
        workflow.continue_as_new(self.s)

    @workflow.signal(name=ROLL_FORWARD_SIGNAL)
    def roll_forward(self) -> None:
        """Continue as new once the decisions in hand are made: the next run is on the workers' code."""
        self.rolling_forward = True

    @workflow.query
    def status(self) -> CapacityGuardState:
        return self.s

    async def _read_policy(self) -> None:
        self.s.policy = await workflow.execute_activity_method(GuardActivities.fleet_policy, self.s.fleet, **QUICK)

    async def _judged_critical(self, req: RemovalRequest) -> RemovalRequest:
        """Only a recorded health event makes a removal critical (judged_critical)."""
        if not req.critical or req.force:
            return req
        evidence = await workflow.execute_activity_method(GuardActivities.critical_evidence, req.node, **QUICK)
        return judged_critical(req, evidence)

    async def _snapshot_for(self, req: RemovalRequest) -> FleetSnapshot:
        """The fleet's counts, when the decision reads them: a critical removal (judged so
        above) or a forced one does not wait for a query it would not read."""
        if not reads_snapshot(req):
            workflow.deprecate_patch("guard-critical-skips-snapshot")
            return FleetSnapshot()
        return await workflow.execute_activity_method(GuardActivities.fleet_snapshot, self.s.fleet, **QUICK)

    async def _domain_in_service(self, req: RemovalRequest) -> RemovalRequest:
        """A domain request's other nodes that are still in service, read just before the
        fleet's counts: one that left since the request was made (its own fault drained it) is
        counted out there, so it must not cost the domain a second time; one that leaves after
        this read is counted twice, never missed (as pending grants are). No activity for any
        other request."""
        if not req.domain_nodes:
            return req
        in_service = await workflow.execute_activity_method(GuardActivities.in_service_nodes, req.domain_nodes, **QUICK)
        return in_service_domain(req, in_service)

    def _held_with_domain(self, req: RemovalRequest, version: int | None, now: float) -> str | None:
        """The grant of a node the guard already took out with its NVLink domain, when a
        domain-fabric request comes from it (every tray of a domain sees the domain's IMEX
        fault): the same fault asked again, answered with that grant, neither a new failure
        for the storm breaker nor a second cost. None for any other request."""
        pending = self.s.pending.get(req.node)
        if (
            not req.domain
            or pending is None
            or version != pending.state_version
            or now - pending.at >= PENDING_GRANT_TTL_S
        ):
            return None
        return grant_for(workflow.info().workflow_id, req.node, version)

    def _decide(
        self, req: RemovalRequest, snapshot: FleetSnapshot, versions: dict[str, int], now: float
    ) -> RemovalDecision:
        """Decide on the fleet's counts and the grants still pending, and count what it grants."""
        gpus_out = set(snapshot.gpus_quarantined)
        self.s.pending = {
            n: g
            for n, g in self.s.pending.items()
            if n != req.node
            and now - g.at < PENDING_GRANT_TTL_S
            # A GPU's grant (its node stays in service, its version unchanged) ends once the
            # snapshot counts the GPU out.
            and (n not in gpus_out if g.gpu else versions.get(n) == g.state_version)
        }
        # A domain node granted before (for a fault of its own) is in this request's cost
        # (removal_cost): counted there, not again as pending.
        counted = [g for n, g in self.s.pending.items() if n not in req.domain_nodes]
        self.s.recent_failures = {
            n: t for n, t in self.s.recent_failures.items() if now - t < self.s.policy.storm_window_s
        }
        decision = decide(
            self.s.policy,
            snapshot,
            req,
            self.s.recent_failures,
            now,
            self.s.breaker_open,
            pending_grants=sum(g.share for g in counted),
            pending_in_rack=sum(g.share for g in counted if g.rack == req.rack),
        )
        if counts_as_failure(req, snapshot):
            self.s.recent_failures[failure_key(req)] = now
        if decision.breaker_opened:
            self.s.breaker_open, self.s.breaker_reason, self.s.breaker_since = True, decision.reason, now
        if decision.granted:
            guard = workflow.info().workflow_id
            granted = [req.node, *decision.domain_nodes]
            # A node drained outside fleetctl is counted out in the snapshot already.
            if req.gpu:
                key = gpu_grant_key(req.node, req.gpu)
                self.s.pending[key] = PendingGrant(req.rack, now, -1, removal_cost(req), req.gpu)
            for node in [] if already_out(req, snapshot) or req.gpu else granted:
                # A domain's nodes are counted in the finder's rack: an NVL72 domain is one rack.
                self.s.pending[node] = PendingGrant(req.rack, now, versions.get(node, -1))
            self.s.granted_total += len(granted)
            decision.grant = grant_for(guard, req.node, versions.get(req.node, -1))
            decision.domain_grants = {
                node: grant_for(guard, node, versions.get(node, -1)) for node in decision.domain_nodes
            }
        else:
            self.s.denied_total += 1
        return decision

    @workflow.update(name=REQUEST_REMOVAL_UPDATE)
    async def request_removal(self, req: RemovalRequest) -> RemovalDecision:
        async with self.lock:
            # Before each decision, in one activity: the fleet's policy from the worker's
            # configuration, the request as judged (critical only with a recorded critical
            # event), the versions of the nodes it and the pending grants name, read before the
            # fleet's counts (GuardActivities.removal_facts says why), and the counts.
            facts = await quick_local(
                GuardActivities.removal_facts, RemovalFactsInput(self.s.fleet, req, list(self.s.pending))
            )
            self.s.policy = facts.policy
            return await self._decided(facts.request, facts.versions, facts.snapshot, workflow.now().timestamp())

    @workflow.update(name=STEPWISE_REQUEST_REMOVAL_UPDATE)
    async def request_removal_stepwise(self, req: RemovalRequest) -> RemovalDecision:
        """request_removal as it was, its facts read one activity at a time: the guard runs that
        answered it replay it (docs/decisions/0030); it goes with them, as a patch's old branch."""
        async with self.lock:
            workflow.deprecate_patch("guard-reads-policy-and-evidence")
            await self._read_policy()
            req = await self._judged_critical(req)
            now = workflow.now().timestamp()
            workflow.deprecate_patch("guard-versions-before-snapshot")
            versions = await workflow.execute_activity_method(
                GuardActivities.state_versions, [*self.s.pending, req.node, *req.domain_nodes], **QUICK
            )
            req = await self._domain_in_service(req)
            snapshot = await self._snapshot_for(req)
            return await self._decided(req, versions, snapshot, now)

    async def _decided(
        self, req: RemovalRequest, versions: dict[str, int], snapshot: FleetSnapshot, now: float
    ) -> RemovalDecision:
        """The decision on these facts (a domain's repeated ask answered with its grant), recorded."""
        held = self._held_with_domain(req, versions.get(req.node), now)
        if held is not None:
            decision = RemovalDecision(
                req.node,
                True,
                f"already granted with NVLink domain {req.domain}: the same fault, found again on this node",
                grant=held,
            )
        else:
            decision = self._decide(req, snapshot, versions, now)
        kind = (
            "breaker_open"
            if decision.breaker_opened
            else (
                "force" if req.force else ("grant" if decision.granted else "dry_run" if decision.dry_run else "deny")
            )
        )
        await quick_local(
            NodeActivities.record_automation_event,
            AutomationRecord(
                kind=kind,
                reason=f"{req.reason}: {decision.reason}",
                actor=req.actor,
                node=req.node,
                fleet=self.s.fleet,
                # One record per drain outside fleetctl, however often its watch asks.
                key=f"{workflow.info().workflow_id}/{snapshot.drained_outside.get(req.node) or req.request_id or now}"
                f"/{req.node}",
            ),
        )
        self.decisions_this_run += 1
        return decision

    @workflow.update
    async def resume_automation(self, req: ResumeAutomation) -> CapacityGuardState:
        async with self.lock:
            was_open = self.s.breaker_open
            self.s.breaker_open, self.s.breaker_reason, self.s.breaker_since = False, "", None
            self.s.recent_failures = {}
            await record_automation(
                AutomationRecord(
                    kind="breaker_closed",
                    actor=req.actor,
                    fleet=self.s.fleet,
                    reason="automation resumed by operator" + ("" if was_open else " (breaker was closed)"),
                    key=f"{workflow.info().workflow_id}/resume/{workflow.now().timestamp()}",
                )
            )
            return self.s

    @workflow.update
    async def report_check_errors(self, report: CheckErrorReport) -> CapacityGuardState:
        """Errors drain nobody; a storm of them opens the breaker, with the reason, so that an
        operator looks at the checker before automation trusts its verdicts again."""
        async with self.lock:
            workflow.deprecate_patch("guard-reads-policy-and-evidence")
            await self._read_policy()
            reason = checker_storm(self.s.policy, max(report.count, len(report.errored)), report.checked, report.kind)
            if reason is not None and not self.s.breaker_open:
                now = workflow.now().timestamp()
                self.s.breaker_open, self.s.breaker_reason, self.s.breaker_since = True, reason, now
                sample = ", ".join(sorted(report.errored)[:5]) + (
                    ", ..." if max(report.count, len(report.errored)) > 5 else ""
                )
                await record_automation(
                    AutomationRecord(
                        kind="breaker_open",
                        reason=f"{reason} ({sample})",
                        actor=report.actor,
                        fleet=self.s.fleet,
                        key=f"{workflow.info().workflow_id}/check-errors/{report.key}",
                    )
                )
            self.decisions_this_run += 1
            return self.s
