"""FirmwareRollout: bring nodes to the fleet's firmware baseline, canary first, then in
batches; halt when too many updates fail, until an operator resumes or aborts.

Only nodes out of service are updated: a node in maintenance (or new) directly; a node in
production only when the capacity guard grants its drain. After an update the node's
firmware is read again through the checks, and only a node that now matches the baseline
counts as updated; it then goes back through burn-in and admission (its own workflow runs
them). A failed node stays in maintenance for a person.
"""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.capacity import RemovalRequest
    from fleetctl.nodes.lifecycle import Actor, NodeState
    from fleetctl.remediation.firmware import RolloutTally
    from fleetctl.workflows.activities.firmware import FirmwareActivities
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.activities.remediation import RemediationActivities
    from fleetctl.workflows.api import (
        ActionOutcome,
        AdmitRequest,
        CheckRequest,
        DriftReport,
        DriftRequest,
        NodeFacts,
        NodeResult,
        RolloutCommand,
        RolloutInput,
        RolloutProgress,
        RolloutStatus,
        TransitionRequest,
        UpdateOutcome,
        rollout_workflow_id,
    )
    from fleetctl.workflows.definitions.shared import (
        FIRMWARE_CHECKS,
        FIRMWARE_UPDATE,
        MESSAGE,
        QUICK,
        bulk,
        guarded_drain,
        run_check,
    )

DRAIN_WAIT = timedelta(hours=3)
DRAIN_POLL = timedelta(seconds=2)


@workflow.defn
class FirmwareRollout:
    @workflow.init
    def __init__(self, inp: RolloutInput) -> None:
        self.inp = inp
        self.tally = RolloutTally(inp.max_failures)
        self.status = "running"
        self.next_batch = 0
        self.done = 0
        self.failed = 0
        self.detail = ""
        self.decision = ""  # resume or abort, while halted

    @workflow.run
    async def run(self, inp: RolloutInput) -> RolloutStatus:
        await self._record()
        while self.next_batch < len(inp.batches):
            batch_index = self.next_batch
            await asyncio.gather(*(self._one_node(n, batch_index) for n in inp.batches[batch_index]))
            self.next_batch += 1
            if self.tally.halted and self.next_batch < len(inp.batches):
                self.status = "halted"
                self.detail = (
                    f"halted after batch {batch_index}: {self.tally.failures} failures "
                    f"(limit {inp.max_failures}): {', '.join(self.tally.failed_nodes[-inp.max_failures :])}"
                )
                await self._record()
                await workflow.wait_condition(lambda: bool(self.decision))
                if self.decision == "abort":
                    self.status = "aborted"
                    await self._record()
                    return self.progress()
                self.decision, self.status = "", "running"
                self.tally.resume()
                await self._record()
        self.status = "completed"
        self.detail = f"{self.done} updated, {self.failed} failed"
        await self._record()
        return self.progress()

    @workflow.query
    def progress(self) -> RolloutStatus:
        return RolloutStatus(
            self.inp.rollout_id,
            self.status,
            sum(map(len, self.inp.batches)),
            self.done,
            self.failed,
            self.next_batch,
            len(self.inp.batches),
            list(self.tally.failed_nodes),
            self.detail,
        )

    @workflow.update
    def resume(self, cmd: RolloutCommand) -> str:
        self.decision = "resume"
        self.detail = f"resumed by {cmd.actor}"
        return "resumed"

    @workflow.update
    def abort(self, cmd: RolloutCommand) -> str:
        self.decision = "abort"
        self.detail = f"aborted by {cmd.actor}"
        return "aborted"

    @resume.validator
    def _validate_resume(self, cmd: RolloutCommand) -> None:
        if self.status != "halted":
            raise ApplicationError(f"roll-out {self.inp.rollout_id} is {self.status}, not halted", non_retryable=True)

    @abort.validator
    def _validate_abort(self, cmd: RolloutCommand) -> None:
        if self.status != "halted":
            raise ApplicationError(
                f"roll-out {self.inp.rollout_id} is {self.status}; only a halted roll-out can be aborted",
                non_retryable=True,
            )

    async def _record(self) -> None:
        p = self.progress()
        await workflow.execute_activity_method(
            FirmwareActivities.record_progress,
            RolloutProgress(p.rollout_id, p.status, p.total, p.done, p.failed, p.detail),
            **QUICK,
        )

    async def _one_node(self, node: str, batch_index: int) -> None:
        drift: DriftReport = await workflow.execute_activity_method(
            FirmwareActivities.node_drift, DriftRequest(node, self.inp.baseline_id), **QUICK
        )
        status, detail = await self._update(node, drift)
        if status in ("updated", "failed"):
            self.tally.record(node, status == "updated")
            self.done += status == "updated"
            self.failed += status == "failed"
        await workflow.execute_activity_method(
            FirmwareActivities.record_node,
            NodeResult(self.inp.rollout_id, node, batch_index, status, detail, drift.components),
            **QUICK,
        )

    async def _update(self, node: str, drift: DriftReport) -> tuple[str, str]:
        if drift.status != "drift":
            return "skipped", {
                "ok": "already at the baseline",
                "unknown": "no firmware inventory recorded",
                "no_baseline": "the baseline has no entry for the node's profile",
            }[drift.status]
        if self.inp.dry_run:
            return "would_update", "; ".join(drift.drifts)
        ready, why = await self._out_of_service(node)
        if not ready:
            return "skipped", why
        try:
            applied: UpdateOutcome = await workflow.execute_activity_method(
                FirmwareActivities.apply_updates, DriftRequest(node, self.inp.baseline_id), **bulk(FIRMWARE_UPDATE)
            )
        except ActivityError as exc:
            # A worker that died mid-update: a failed node of this roll-out, not a failed roll-out.
            return "failed", f"the update did not finish: {exc.cause or exc}"
        if not applied.ok:
            return "failed", applied.detail
        for check in FIRMWARE_CHECKS:
            outcome = await run_check(
                CheckRequest(
                    node,
                    check,
                    f"firmware:{self.inp.rollout_id}",
                    f"{rollout_workflow_id(self.inp.rollout_id)}/{node}/{check}",
                )
            )
            if outcome.status == "error":
                return "failed", f"updated, but {check} could not be read: {outcome.reason}"
        after: DriftReport = await workflow.execute_activity_method(
            FirmwareActivities.node_drift, DriftRequest(node, self.inp.baseline_id), **QUICK
        )
        if after.status != "ok":
            return "failed", f"still off the baseline after the update: {'; '.join(after.drifts)}"
        admitted: ActionOutcome = await workflow.execute_activity_method(
            RemediationActivities.admit_node,
            AdmitRequest(
                node,
                f"firmware-rollout:{self.inp.rollout_id}",
                request_id=f"{rollout_workflow_id(self.inp.rollout_id)}/{node}/admit",
            ),
            **MESSAGE,
        )
        return "updated", applied.detail + ("; burn-in queued" if admitted.ok else f"; not admitted: {admitted.detail}")

    async def _out_of_service(self, node: str) -> tuple[bool, str]:
        facts: NodeFacts = await workflow.execute_activity_method(NodeActivities.node_facts, node, **QUICK)
        if NodeState(facts.state).in_service:
            decision, drained = await guarded_drain(
                RemovalRequest(
                    node=node,
                    rack=facts.rack,
                    reason=f"firmware roll-out {self.inp.rollout_id}",
                    actor=self.inp.actor,
                    request_id=f"{rollout_workflow_id(self.inp.rollout_id)}/{node}",
                ),
                TransitionRequest(
                    node=node,
                    trigger="drain",
                    actor=f"firmware-rollout:{self.inp.rollout_id}",
                    actor_kind=Actor.AUTOMATION.value,
                    cause="firmware roll-out",
                    request_id=f"{rollout_workflow_id(self.inp.rollout_id)}/{node}/drain",
                ),
            )
            if drained is None:
                return False, f"not drained: capacity guard: {decision.reason}"
        waited = timedelta()
        while facts.state in (NodeState.PRODUCTION.value, NodeState.DRAINING.value) and waited < DRAIN_WAIT:
            await workflow.sleep(DRAIN_POLL)
            waited += DRAIN_POLL
            facts = await workflow.execute_activity_method(NodeActivities.node_facts, node, **QUICK)
        if facts.state not in (NodeState.MAINTENANCE.value, NodeState.NEW.value):
            return False, f"the node is in {facts.state}; only drained nodes are updated"
        return True, ""
