"""The client side of JobRestart: start (or find) the restart of a job for one fault."""

from __future__ import annotations

from datetime import datetime

from temporalio.client import Client, WorkflowHandle
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from fleetctl.config import Settings
from workflows.job_restart import JobRestart, JobRestartInput, JobRestartResult, workflow_id_for


async def start_job_restart(client: Client, settings: Settings, inp: JobRestartInput) -> WorkflowHandle:
    """Start the restart of `inp.job_id` for the fault `inp.restart_id`; its handle.

    Idempotent: for a restart id already started, running or finished, this answers with
    that restart's handle and starts nothing, so the same fault never restarts a job twice.
    """
    if datetime.fromisoformat(inp.fault_seen_at).tzinfo is None:
        raise ValueError(f"fault_seen_at {inp.fault_seen_at!r} needs a UTC offset")
    workflow_id = workflow_id_for(inp.job_id, inp.restart_id)
    try:
        return await client.start_workflow(
            JobRestart.run,
            inp,
            id=workflow_id,
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:  # it ran to its end already
        return client.get_workflow_handle(workflow_id, result_type=JobRestartResult)
