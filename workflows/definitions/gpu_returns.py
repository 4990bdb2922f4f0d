"""GpuReturns: started by a Temporal Schedule (`fleetctl schedule create gpu-returns`), it takes
each GPU out of its scheduler alone (GPU quarantine) for `settle_s` or more, resets it when its
Xid's catalog action is a GPU reset, rechecks it alone (fleetctl.nodes.gpu_return.RETURN_CHECKS)
and puts it back through its node's workflow (the `release_gpu` update) when clean. A GPU whose
reset or checks fail stays out, the failure recorded; after `max_failed` failed returns its node
is drained through the capacity guard, as the Xid's event, for the catalog's remediation.

The node is not held in its scheduler for the reset (decision 29): the GPU is out of it, so no
job is placed on it, and nvidia-smi -r refuses a GPU a process still uses (a failed return);
the jobs on the node's other GPUs keep running. GPUs are returned one at a time."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.capacity import RemovalRequest
    from fleetctl.nodes.gpu_return import ReturnStep, ReturnVerdict, judge_return
    from fleetctl.nodes.lifecycle import Actor
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.workflows.activities.gpu_returns import RESET_AND_RECHECK_S, GpuReturnActivities
    from fleetctl.workflows.api import (
        GpuReturnAttempt,
        GpuReturnCandidate,
        GpuReturnsInput,
        GpuReturnsResult,
        TransitionRequest,
    )
    from fleetctl.workflows.definitions.shared import MESSAGE, QUICK, bulk, guarded_drain

# A reset is not repeated blindly: tried twice, as the remediation's GPU reset step is.
RESET_ATTEMPTS = 2


@workflow.defn
class GpuReturns:
    @workflow.run
    async def run(self, req: GpuReturnsInput) -> GpuReturnsResult:
        due: list[GpuReturnCandidate] = await workflow.execute_activity_method(
            GpuReturnActivities.gpus_due_for_return, req, **QUICK
        )
        result = GpuReturnsResult()
        run = workflow.info().workflow_id + "/" + workflow.info().run_id
        for gpu in due:
            await return_one(gpu, req, run, result)
        return result


async def return_one(gpu: GpuReturnCandidate, req: GpuReturnsInput, run: str, result: GpuReturnsResult) -> None:
    name = f"{gpu.node} GPU {gpu.gpu}"
    if gpu.step == ReturnStep.LEAVE_OUT.value:
        result.kept_out.append(f"{name}: {gpu.step_reason}")
        return
    attempt: GpuReturnAttempt = await workflow.execute_activity_method(
        GpuReturnActivities.reset_and_recheck,
        gpu,
        **bulk(
            {
                "start_to_close_timeout": timedelta(seconds=RESET_AND_RECHECK_S),
                "retry_policy": RetryPolicy(maximum_attempts=RESET_ATTEMPTS),
            }
        ),
    )
    outcome = judge_return(attempt.failure, gpu.failed_before, req.max_failed)
    if outcome.verdict is ReturnVerdict.RETURN:
        reason = f"{gpu.step_reason}; {attempt.evidence}"
        back: GpuReturnAttempt = await workflow.execute_activity_method(
            GpuReturnActivities.return_gpu, args=[gpu, run, reason, req.actor], **MESSAGE
        )
        if not back.failure:
            result.returned.append(name)
            return
        outcome = judge_return(back.failure, gpu.failed_before, req.max_failed)
    await workflow.execute_activity_method(
        GpuReturnActivities.record_failed_return, args=[gpu, run, outcome.reason, req.actor], **QUICK
    )
    result.kept_out.append(f"{name}: {outcome.reason}")
    if outcome.verdict is ReturnVerdict.DRAIN_NODE:
        await drain_for_remediation(gpu, req, run, f"GPU {gpu.gpu}: {outcome.reason}", result)


async def drain_for_remediation(
    gpu: GpuReturnCandidate, req: GpuReturnsInput, run: str, cause: str, result: GpuReturnsResult
) -> None:
    """Drain the GPU's node through the guard, as its Xid's event: the runbook for that code (the
    catalog's remediation) picks up the drained node."""
    key = f"{run}/{gpu.node}/{gpu.gpu}"
    kind = EventKind.XID if gpu.code is not None else EventKind.MANUAL
    decision, outcome = await guarded_drain(
        RemovalRequest(node=gpu.node, rack=gpu.rack, reason=cause, actor=req.actor, request_id=key),
        TransitionRequest(
            node=gpu.node,
            trigger="drain",
            actor=req.actor,
            actor_kind=Actor.AUTOMATION.value,
            cause=cause,
            request_id=f"{key}/drain",
            event=Event(kind, code=gpu.code, message=cause).to_dict(),
        ),
    )
    if outcome is not None and outcome.accepted:
        result.drained.append(gpu.node)
    else:  # the guard held it, or the node moved on: the next run asks again
        result.kept_out.append(f"{gpu.node}: not drained: {decision.reason if outcome is None else outcome.message}")
