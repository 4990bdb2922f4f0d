"""JobRestart: a training job lost a node; drain the bad nodes, restart the job on healthy
ones, wait until it runs again, and record when each step happened.

Workflow id `job-restart/<job id>/<restart id>`: the restart id names the fault (or the
operator's command), so the same fault never restarts a job twice. The bad nodes are
drained in the scheduler only; their lifecycle state belongs to their NodeLifecycle
workflows. The times are the workflow's (`workflow.now()`), except the fault's own time,
which the caller saw; restart_seconds runs from the fault to the job running again.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from fleetctl.workflows.activities.jobs import JobRestartActivities
    from fleetctl.workflows.api import (
        DrainNodes,
        JobRestartInput,
        JobRestartResult,
        RestartJob,
        RestartOutcome,
        RestartStarted,
        RestartStep,
        WaitForJob,
        job_restart_id,
    )
    from fleetctl.workflows.definitions.shared import HEARTBEAT_TIMEOUT, NON_RETRYABLE, QUICK, SCHEDULER


@workflow.defn
class JobRestart:
    @workflow.run
    async def run(self, inp: JobRestartInput) -> JobRestartResult:
        if not inp.bad_nodes:
            raise ApplicationError("a job restart needs the bad nodes it moves the job off", non_retryable=True)
        fault_seen_at = datetime.fromisoformat(inp.fault_seen_at)
        if fault_seen_at.tzinfo is None:
            raise ApplicationError(f"fault_seen_at {inp.fault_seen_at!r} has no UTC offset", non_retryable=True)
        self.workflow_id = workflow.info().workflow_id
        await workflow.execute_activity_method(
            JobRestartActivities.record_restart_started,
            RestartStarted(
                self.workflow_id,
                inp.job_id,
                inp.scheduler,
                inp.bad_nodes,
                inp.cause,
                inp.actor,
                inp.restart_id,
                inp.fault_seen_at,
                inp.failure,
            ),
            **QUICK,
        )
        try:
            await workflow.execute_activity_method(
                JobRestartActivities.drain_nodes, DrainNodes(inp.scheduler, inp.bad_nodes, inp.cause), **SCHEDULER
            )
            drained_at = await self._record_step("drained_at")
            await workflow.execute_activity_method(
                JobRestartActivities.restart_job, RestartJob(inp.scheduler, inp.job_id, inp.bad_nodes), **SCHEDULER
            )
            requeued_at = await self._record_step("requeued_at")
            new_nodes = await workflow.execute_activity_method(
                JobRestartActivities.wait_until_running,
                WaitForJob(inp.scheduler, inp.job_id, inp.bad_nodes, inp.running_timeout_s),
                # Past the activity's own deadline only when it hangs; then a retry is no use.
                schedule_to_close_timeout=timedelta(seconds=inp.running_timeout_s + 60),
                # It heartbeats every poll: a dead worker is noticed in seconds and the wait
                # goes on elsewhere, for as long as the deadline above allows.
                heartbeat_timeout=HEARTBEAT_TIMEOUT,
                retry_policy=RetryPolicy(
                    initial_interval=timedelta(seconds=1), non_retryable_error_types=NON_RETRYABLE
                ),
            )
        except ActivityError as exc:
            error = _reason(exc)
            await workflow.execute_activity_method(
                JobRestartActivities.record_restart_outcome,
                RestartOutcome(self.workflow_id, "failed", error=error),
                **QUICK,
            )
            raise ApplicationError(
                f"restart of job {inp.job_id} failed: {error}", type="JobRestartFailed", non_retryable=True
            ) from None
        running_at = workflow.now()
        await workflow.execute_activity_method(
            JobRestartActivities.record_restart_outcome,
            RestartOutcome(self.workflow_id, "succeeded", running_at.isoformat(), new_nodes),
            **QUICK,
        )
        return JobRestartResult(
            job_id=inp.job_id,
            restart_id=inp.restart_id,
            new_nodes=new_nodes,
            fault_seen_at=inp.fault_seen_at,
            drained_at=drained_at.isoformat(),
            requeued_at=requeued_at.isoformat(),
            running_at=running_at.isoformat(),
            restart_seconds=(running_at - fault_seen_at.astimezone(UTC)).total_seconds(),
        )

    async def _record_step(self, step: str) -> datetime:
        at = workflow.now()
        await workflow.execute_activity_method(
            JobRestartActivities.record_restart_step, RestartStep(self.workflow_id, step, at.isoformat()), **QUICK
        )
        return at


def _reason(exc: ActivityError) -> str:
    """The innermost failure's message: what went wrong, not how Temporal wrapped it."""
    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return str(getattr(cause, "message", None) or cause) or exc.__class__.__name__


@dataclass(frozen=True)
class RestartOffNode:
    """What a judge knows of the restart it starts: the job, the node it drained, why, and the
    restart id that names the fault."""

    job_id: str
    scheduler: str
    node: str
    cause: str
    actor: str
    restart_id: str
    failure: str  # JobRestartInput.failure


async def restart_off_the_node(
    off: RestartOffNode, id_reuse_policy: WorkflowIDReusePolicy = WorkflowIDReusePolicy.ALLOW_DUPLICATE
) -> None:
    """Start, from a judging workflow's tick, the job's restart off the node it drained: a
    child that outlives the tick. Its id is the job's and the restart id's (the fault's), so a
    restart already started for the same fault is that restart, not a second one."""
    restart = JobRestartInput(
        job_id=off.job_id,
        scheduler=off.scheduler,
        bad_nodes=[off.node],
        cause=off.cause,
        actor=off.actor,
        fault_seen_at=workflow.now().isoformat(),
        restart_id=off.restart_id,
        failure=off.failure,
    )
    try:
        await workflow.start_child_workflow(
            JobRestart.run,
            restart,
            id=job_restart_id(restart.job_id, restart.restart_id),
            parent_close_policy=ParentClosePolicy.ABANDON,
            id_reuse_policy=id_reuse_policy,
        )
    except WorkflowAlreadyStartedError:
        pass
