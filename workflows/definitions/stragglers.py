"""ProductionStragglers: started by a Temporal Schedule (`fleetctl schedule create
stragglers`), it judges the nodes of every running job against each other from Prometheus
(workflows.activities.stragglers) and flags each straggler at once, with its evidence. By
policy (straggler_policy: drain-at-checkpoint) a flagged node is drained once its job has
written a checkpoint since the finding (or was restarted, or ended), so the drain costs the
job no work: through the capacity guard, exactly as the active-check sweep drains. A job
still running on the drained node is restarted off it at once (JobRestart: onto its island's
spares first), from the checkpoint it just wrote. A guard that refuses holds the node in
production, and its job where it is; the next tick asks again."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.capacity import RemovalRequest
    from fleetctl.nodes.lifecycle import Actor
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.workflows.activities.stragglers import StragglerActivities
    from fleetctl.workflows.api import (
        StragglerDrain,
        StragglerDrainRecord,
        StragglerSweepInput,
        StragglerSweepResult,
        StragglerTick,
        TransitionRequest,
    )
    from fleetctl.workflows.definitions.job_restart import RestartOffNode, restart_off_the_node
    from fleetctl.workflows.definitions.shared import NON_RETRYABLE, QUICK, ActivityOptions, bulk, guarded_drain

# One judging asks Prometheus one query per metric, each bounded by prometheus_timeout_s
# (at most 120 s), and heartbeats between them; a Prometheus that is down is an error in
# the tick, not a failed activity, so the retries here are for the database only. A scan of
# every running job: in the bulk lane.
JUDGE: ActivityOptions = {
    "start_to_close_timeout": timedelta(minutes=20),
    "heartbeat_timeout": timedelta(minutes=3),
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=20),
        maximum_attempts=3,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}


@workflow.defn
class ProductionStragglers:
    @workflow.run
    async def run(self, req: StragglerSweepInput) -> StragglerSweepResult:
        tick: StragglerTick = await workflow.execute_activity_method(
            StragglerActivities.judge_running_jobs, req, **bulk(JUDGE)
        )
        result = StragglerSweepResult(
            policy=tick.policy,
            jobs=tick.jobs,
            flagged=tick.flagged,
            cleared=tick.cleared,
            errors=tick.errors,
            still_open=tick.still_open,
            no_evidence=tick.no_evidence,
        )
        key = workflow.info().workflow_id + "/" + workflow.info().run_id
        for due in tick.due:
            await drain_straggler(due, req, f"{key}/{due.node}", result)
        return result


async def drain_straggler(
    due: StragglerDrain, req: StragglerSweepInput, key: str, result: StragglerSweepResult
) -> None:
    cause = f"straggler {due.metric} in job {due.job_id}: {due.evidence}; drained at its checkpoint ({due.why})"
    event = Event(EventKind.STRAGGLER, check=due.metric, status="fail", message=due.evidence).to_dict()
    decision, outcome = await guarded_drain(
        RemovalRequest(node=due.node, rack=due.rack, reason=cause, actor=req.actor, request_id=key),
        TransitionRequest(
            node=due.node,
            trigger="drain",
            actor=req.actor,
            actor_kind=Actor.AUTOMATION.value,
            cause=cause,
            request_id=f"{key}/drain",
            event=event,
        ),
    )
    drained = outcome is not None and outcome.accepted
    if drained:
        detail = f"drained: {due.why}"
    elif outcome is None:
        detail = f"held in production: the capacity guard refused: {decision.reason}"
    else:
        detail = f"held in production: its workflow refused the drain: {outcome.message}"
    (result.drained if drained else result.held).append(due.node)
    if drained and due.restart_job:
        await restart_off(due, cause, req)
    await workflow.execute_activity_method(
        StragglerActivities.record_straggler_drain, StragglerDrainRecord(due.finding_ids, drained, detail), **QUICK
    )


async def restart_off(due: StragglerDrain, cause: str, req: StragglerSweepInput) -> None:
    """Restart the job off the drained straggler now: the node's own drain would wait for the
    job to end (or its drain deadline), the job slow all the while. One restart per finding."""
    restart_id, failure = f"straggler-{due.finding_ids[0]}", Event(EventKind.STRAGGLER, check=due.metric).failure
    await restart_off_the_node(
        RestartOffNode(due.job_id, due.scheduler, due.node, cause, req.actor, restart_id, failure)
    )
