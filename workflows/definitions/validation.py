"""ClusterValidation: an all-reduce across a set of production nodes, and when it falls short
of the profile's multi-node floor, the bisection (fleetctl.validation.bisect) that names the
node or link responsible, each run a check run.

Every node is held in its scheduler for the whole validation as a sweep holds a node for its
check (`hold_for_check`, reason `fleetctl: active check validate`): drained, then read idle
once more; a node a job landed on is skipped (released, named in `skipped`) and the rest are
validated without it. Bisection reruns subsets of the same nodes, so they stay held until
the verdict, then are released together. Nothing is drained for a verdict: the nodes it names
go to the operator (`fleetctl validate` prints them) or to a runbook."""

from __future__ import annotations

import asyncio
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from fleetctl.schedulers.base import check_hold_reason
    from fleetctl.validation.bisect import RunResult, RunVerdict, launcher, next_step
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.activities.validation import RUN_TIMEOUT, VALIDATE_SUITE, ValidationActivities
    from fleetctl.workflows.api import (
        SchedulerHold,
        SweepScope,
        ValidationInput,
        ValidationNodes,
        ValidationResult,
        ValidationRun,
        ValidationRunOutcome,
    )
    from fleetctl.workflows.definitions.shared import (
        HEARTBEAT_TIMEOUT,
        NON_RETRYABLE,
        QUICK,
        SCHEDULER,
        ActivityOptions,
        bulk,
        hold_for_check,
        release_hold,
    )

# A run that dies with its worker is tried again (its check run is recorded once, by key); one
# that fails twice more is an error run, and bisection stops there.
_RUN: ActivityOptions = {
    "start_to_close_timeout": RUN_TIMEOUT + timedelta(minutes=1),
    "heartbeat_timeout": HEARTBEAT_TIMEOUT,
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1), maximum_attempts=3, non_retryable_error_types=NON_RETRYABLE
    ),
}


@workflow.defn
class ClusterValidation:
    @workflow.run
    async def run(self, req: ValidationInput) -> ValidationResult:
        idle = None
        if req.idle:
            idle = await workflow.execute_activity_method(
                NodeActivities.idle_production_nodes, SweepScope(fleet=req.fleet), **bulk(SCHEDULER)
            )
        try:
            nodes: list[str] = await workflow.execute_activity_method(
                ValidationActivities.validation_nodes, ValidationNodes(req, idle), **QUICK
            )
        except ActivityError as exc:
            return ValidationResult(error=str(exc.cause or exc))
        key = f"{workflow.info().workflow_id}/{workflow.info().run_id}"
        holds = [SchedulerHold(n, check_hold_reason(VALIDATE_SUITE)) for n in nodes]
        skipped = await asyncio.gather(*(hold_for_check(h, req.actor, f"{key}/{h.node}") for h in holds))
        result = ValidationResult(skipped={h.node: why for h, why in zip(holds, skipped, strict=True) if why})
        held = [h for h in holds if h.node not in result.skipped]
        result.nodes = [h.node for h in held]
        if len(held) < 2:
            result.error = f"{len(held)} of {len(nodes)} nodes held (the rest busy): an all-reduce needs 2 or more"
        else:
            await bisect(result, req, key)
        await asyncio.gather(*(release_hold(h, req.actor, f"{key}/{h.node}") for h in held))
        return result


async def bisect(result: ValidationResult, req: ValidationInput, key: str) -> None:
    """Run what the bisection asks, a step's runs at once (they share no node), to its verdict."""
    done: list[RunResult] = []
    while (step := next_step(result.nodes, done, req.max_runs or None)).verdict is None:
        ordered = [[launcher(run, done), *(n for n in run if n != launcher(run, done))] for run in step.runs]
        start = len(done)
        outcomes = await asyncio.gather(
            *(one_run(ValidationRun(nodes, f"{key}/run-{start + i}", start + i)) for i, nodes in enumerate(ordered))
        )
        result.runs += outcomes
        done += [
            RunResult(run, RunVerdict(o.verdict), o.busbw_gbps, o.reason)
            for run, o in zip(step.runs, outcomes, strict=True)
        ]
    verdict = step.verdict
    result.bad_nodes = list(verdict.bad_nodes)
    result.slow_together = [[list(group) for group in groups] for groups in verdict.slow_together]
    result.unresolved = [list(nodes) for nodes in verdict.unresolved]
    result.error = verdict.error
    result.passed = verdict.passed


async def one_run(run: ValidationRun) -> ValidationRunOutcome:
    try:
        return await workflow.execute_activity_method(ValidationActivities.run_allreduce, run, **bulk(_RUN))
    except ActivityError as exc:
        return ValidationRunOutcome(run.nodes, RunVerdict.ERROR.value, None, f"could not run: {exc.cause or exc}")
