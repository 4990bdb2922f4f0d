"""HungJobs: started by a Temporal Schedule (`fleetctl schedule create hung-jobs`), it judges
every running job for a hang (workflows.activities.hang: late by more than hang_cadence_factor
of its own checkpoint cadences, its GPUs idle or an NCCL collective timed out) and flags each
with its evidence. By policy (hang_policy: restart-off-node) a hung job localised to one node
is restarted off it: the node drained through the capacity guard, as the straggler judge
drains, then the job restarted as that drain's fault (fault_restart_id): the node's own drain,
a runbook's restart_jobs step or an operator's `job restart` for the same fault find the
restart started and never restart the job twice. A guard that refuses holds the node, and
the job; the next tick asks again."""

from __future__ import annotations

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy

with workflow.unsafe.imports_passed_through():
    from fleetctl.jobs.hang import HANG_CHECK
    from fleetctl.nodes.capacity import RemovalRequest
    from fleetctl.nodes.lifecycle import Actor
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.workflows.activities.hang import HangActivities
    from fleetctl.workflows.activities.jobs import JobRestartActivities
    from fleetctl.workflows.api import (
        HungJobDrain,
        HungJobsInput,
        HungJobsResult,
        HungJobsTick,
        TransitionRequest,
    )
    from fleetctl.workflows.definitions.job_restart import RestartOffNode, restart_off_the_node
    from fleetctl.workflows.definitions.shared import QUICK, bulk, guarded_drain
    from fleetctl.workflows.definitions.stragglers import JUDGE


@workflow.defn
class HungJobs:
    @workflow.run
    async def run(self, req: HungJobsInput) -> HungJobsResult:
        # As the straggler judge's: one Prometheus query, the database, heartbeats per job.
        tick: HungJobsTick = await workflow.execute_activity_method(HangActivities.judge_hung_jobs, req, **bulk(JUDGE))
        result = HungJobsResult(
            policy=tick.policy, jobs=tick.jobs, flagged=tick.flagged, errors=tick.errors, no_evidence=tick.no_evidence
        )
        key = workflow.info().workflow_id + "/" + workflow.info().run_id
        for due in tick.due:
            await restart_off_hung_node(due, req, f"{key}/{due.job_id}", result)
        return result


async def restart_off_hung_node(due: HungJobDrain, req: HungJobsInput, key: str, result: HungJobsResult) -> None:
    cause = f"hung job {due.job_id} on {due.node}: {due.evidence}"
    event = Event(EventKind.CHECK, check=HANG_CHECK, status="fail", message=due.evidence)
    decision, outcome = await guarded_drain(
        RemovalRequest(node=due.node, rack=due.rack, reason=cause, actor=req.actor, request_id=key),
        TransitionRequest(
            node=due.node,
            trigger="drain",
            actor=req.actor,
            actor_kind=Actor.AUTOMATION.value,
            cause=cause,
            request_id=f"{key}/drain",
            event=event.to_dict(),
        ),
    )
    if outcome is None or not outcome.accepted:
        why = decision.reason if outcome is None else outcome.message
        result.held.append(f"{due.job_id} on {due.node}: {why}")
        return
    # The drain just recorded is the fault's: the restart is keyed by it, as every other
    # restart for a node's fault is.
    restart_id: str = await workflow.execute_activity_method(
        JobRestartActivities.restart_id_of_fault, [due.node], **QUICK
    )
    if not restart_id:
        result.held.append(f"{due.job_id} on {due.node}: the node left its drain before the restart")
        return
    await restart_off_the_node(
        RestartOffNode(due.job_id, due.scheduler, due.node, cause, req.actor, restart_id, event.failure),
        WorkflowIDReusePolicy.REJECT_DUPLICATE,
    )
    result.restarted.append(f"{due.job_id} off {due.node}")
