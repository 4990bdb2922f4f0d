"""JobRestart: a training job lost a node; drain the bad nodes, restart the job on healthy
ones, wait until it runs again, and record when each step happened.

Workflow id `job-restart/<job id>/<restart id>`: the restart id names the fault (or the
operator's command), so the same fault never restarts a job twice. The bad nodes are
drained in the scheduler only; their lifecycle state belongs to their NodeLifecycle
workflows. The times are the workflow's (`workflow.now()`), except the fault's own time,
which the caller saw; restart_seconds runs from the fault to the job running again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from workflows.job_activities import (
        DrainNodes,
        JobRestartActivities,
        RestartJob,
        RestartOutcome,
        RestartStarted,
        RestartStep,
        WaitForJob,
    )

DEFAULT_RUNNING_TIMEOUT_S = 1800.0

_RECORD = {
    "start_to_close_timeout": timedelta(seconds=30),
    "retry_policy": RetryPolicy(initial_interval=timedelta(milliseconds=200), maximum_interval=timedelta(seconds=10)),
}
# A scheduler that cannot be reached for a few minutes fails the restart, with the reason
# recorded, rather than holding it open unseen.
_SCHEDULER = {
    "start_to_close_timeout": timedelta(minutes=2),
    "retry_policy": RetryPolicy(initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=30),
                                maximum_attempts=8),
}


def workflow_id_for(job_id: str, restart_id: str) -> str:
    return f"job-restart/{job_id}/{restart_id}"


@dataclass
class JobRestartInput:
    job_id: str
    scheduler: str  # "slurm", "kubernetes" or "sim"
    bad_nodes: list[str]
    cause: str  # why the nodes are bad, e.g. "XID 79: GPU has fallen off the bus"
    actor: str
    fault_seen_at: str  # ISO 8601 with offset: when the caller saw the fault
    restart_id: str
    running_timeout_s: float = DEFAULT_RUNNING_TIMEOUT_S


@dataclass
class JobRestartResult:
    job_id: str
    restart_id: str
    new_nodes: list[str] = field(default_factory=list)
    fault_seen_at: str = ""
    drained_at: str = ""
    requeued_at: str = ""
    running_at: str = ""
    restart_seconds: float = 0.0


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
            RestartStarted(self.workflow_id, inp.job_id, inp.scheduler, inp.bad_nodes, inp.cause, inp.actor,
                           inp.restart_id, inp.fault_seen_at),
            **_RECORD,
        )
        try:
            await workflow.execute_activity_method(
                JobRestartActivities.drain_nodes, DrainNodes(inp.scheduler, inp.bad_nodes, inp.cause), **_SCHEDULER)
            drained_at = await self._record_step("drained_at")
            await workflow.execute_activity_method(
                JobRestartActivities.restart_job, RestartJob(inp.scheduler, inp.job_id, inp.bad_nodes), **_SCHEDULER)
            requeued_at = await self._record_step("requeued_at")
            new_nodes = await workflow.execute_activity_method(
                JobRestartActivities.wait_until_running,
                WaitForJob(inp.scheduler, inp.job_id, inp.bad_nodes, inp.running_timeout_s),
                # Past the activity's own deadline only when it hangs; then a retry is no use.
                schedule_to_close_timeout=timedelta(seconds=inp.running_timeout_s + 60),
                heartbeat_timeout=timedelta(seconds=30),
                retry_policy=RetryPolicy(initial_interval=timedelta(seconds=1), non_retryable_error_types=["JobNotRunning"]),
            )
        except ActivityError as exc:
            error = _reason(exc)
            await workflow.execute_activity_method(
                JobRestartActivities.record_restart_outcome, RestartOutcome(self.workflow_id, "failed", error=error),
                **_RECORD)
            raise ApplicationError(f"restart of job {inp.job_id} failed: {error}", type="JobRestartFailed",
                                   non_retryable=True) from None
        running_at = workflow.now()
        await workflow.execute_activity_method(
            JobRestartActivities.record_restart_outcome,
            RestartOutcome(self.workflow_id, "succeeded", running_at.isoformat(), new_nodes), **_RECORD)
        return JobRestartResult(
            job_id=inp.job_id, restart_id=inp.restart_id, new_nodes=new_nodes, fault_seen_at=inp.fault_seen_at,
            drained_at=drained_at.isoformat(), requeued_at=requeued_at.isoformat(), running_at=running_at.isoformat(),
            restart_seconds=(running_at - fault_seen_at.astimezone(timezone.utc)).total_seconds(),
        )

    async def _record_step(self, step: str) -> datetime:
        at = workflow.now()
        await workflow.execute_activity_method(
            JobRestartActivities.record_restart_step, RestartStep(self.workflow_id, step, at.isoformat()), **_RECORD)
        return at


def _reason(exc: ActivityError) -> str:
    """The innermost failure's message: what went wrong, not how Temporal wrapped it."""
    cause: BaseException = exc
    while cause.__cause__ is not None:
        cause = cause.__cause__
    return str(getattr(cause, "message", None) or cause) or exc.__class__.__name__
