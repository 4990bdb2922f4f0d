"""What several workflows share: the activity-option presets, running one check, and the
guarded drain (ask the capacity guard, then ask the node's workflow to drain).

The presets, chosen once for every workflow, and why:

- Short activities (database rows, rendering a step, a node's facts) take milliseconds; a
  worker that dies holding one is noticed when start-to-close runs out, so that bound is a
  few seconds (QUICK, 10 s: the margin covers a loaded database), not the 30-60 s it was,
  and a dead worker costs seconds of a drain or a job restart.
- Activities that wait on something slow heartbeat (a check every 2 s, a job's scheduler
  state every poll), so a dead worker is noticed after HEARTBEAT_TIMEOUT whatever their
  start-to-close.
- Unlimited retries only for what retrying can fix (a database or Temporal that is briefly
  away): every preset lists NON_RETRYABLE, the errors that mean the input or the world is
  wrong (an unknown node, suite, check or baseline, a stale writer, bad data such as an XID
  too large for its column). Those fail once, the caller records why, and the node's work
  queue moves on instead of retrying for ever.
- A scheduler is another service that can be down for minutes: its calls get a bounded
  number of attempts (SCHEDULER_ROUND for a caller that records the refusal and tries again
  in rounds, SCHEDULER for one that gives up with the reason recorded).
- Work that may wait (checks, firmware flashes, hardware steps, scans of the fleet) runs in
  the worker's bulk lane (`bulk`, workflows.worker), on slots of its own: a sweep's checks
  never hold the slot an XID 79's drain, its job's restart or the guard's grant needs. The
  rest runs on the workflow's own task queue (a sweep batch's, the bulk lane's: its holds,
  drains and records wait with its checks).
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, TypedDict, TypeVar

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from fleetctl.checks.catalog import CHECKS
    from fleetctl.nodes.capacity import (
        RemovalDecision,
        RemovalRequest,
        domain_held_reason,
        grant_covers,
        is_domain_fabric_fault,
    )
    from fleetctl.nodes.lifecycle import Actor, Trigger
    from fleetctl.schedulers.base import REASON_PREFIX
    from fleetctl.text import bounded
    from fleetctl.workflows.activities.checks import CheckActivities
    from fleetctl.workflows.activities.database import BAD_DATA
    from fleetctl.workflows.activities.guard import GuardActivities
    from fleetctl.workflows.activities.node import NodeActivities, NodeCommandActivities
    from fleetctl.workflows.api import (
        AutomationRecord,
        CheckOutcome,
        CheckRequest,
        FaultRemoval,
        FaultRemovals,
        HeldNode,
        NodeCommandOutcome,
        SchedulerHold,
        TransitionRequest,
        bulk_queue,
    )

# The checks that read a node's firmware inventory (recorded as check runs).
FIRMWARE_CHECKS = tuple(name for name, spec in CHECKS.items() if spec.kind == "firmware")

NON_RETRYABLE = [
    "UnknownNode",
    "UnknownSuite",
    "UnknownCheck",
    "UnknownBaseline",
    "UnknownScheduler",
    "StaleStateVersion",
    "DrainedBySomeoneElse",
    "JobNotRunning",
    BAD_DATA,
]
HEARTBEAT_TIMEOUT = timedelta(seconds=10)  # five missed heartbeats of run_check (every 2 s)


class ActivityOptions(TypedDict, total=False):
    """The options of workflow.execute_activity_method a preset sets (passed as **options)."""

    start_to_close_timeout: timedelta
    heartbeat_timeout: timedelta
    retry_policy: RetryPolicy
    task_queue: str  # the bulk lane's (`bulk`); absent: the workflow's own queue


_TRANSIENT = RetryPolicy(
    initial_interval=timedelta(milliseconds=200),
    maximum_interval=timedelta(seconds=5),
    non_retryable_error_types=NON_RETRYABLE,
)
QUICK: ActivityOptions = {"start_to_close_timeout": timedelta(seconds=10), "retry_policy": _TRANSIENT}
# An Update to another workflow (a node's, the guard's) waits for that workflow's answer,
# which waits for its lock and its own QUICK activities; a webhook (notify, open_rma) gives
# up after 10 s (fleetctl.remediation.rma): longer than QUICK, still bounded.
MESSAGE: ActivityOptions = {"start_to_close_timeout": timedelta(seconds=30), "retry_policy": _TRANSIENT}
# The adapters give up on one scheduler call after 30 s (fleetctl.schedulers' timeouts); the
# scheduler activities heartbeat while they wait, so a dead worker costs HEARTBEAT_TIMEOUT.
_SCHEDULER_CALL: ActivityOptions = {
    "start_to_close_timeout": timedelta(seconds=45),
    "heartbeat_timeout": HEARTBEAT_TIMEOUT,
}
# One round: attempts 1, 2, 4, 8 s apart (about 15 s) before the caller records the refusal.
SCHEDULER_ROUND: ActivityOptions = {
    **_SCHEDULER_CALL,
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=20),
        maximum_attempts=5,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}
# A scheduler that cannot be reached for a few minutes (about 2.5) fails the step, with the
# reason recorded, rather than holding it open unseen.
SCHEDULER: ActivityOptions = {
    **_SCHEDULER_CALL,
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=30),
        maximum_attempts=8,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}
# One round of moving a node's pods off it (drain_pods_on): the Kubernetes adapter retries a
# disruption budget's refusal with backoff (2 s doubling to 30 s, six attempts: about a
# minute) and waits out the API server's rate limit, pod by pod, so a round may outlast one
# scheduler call. It heartbeats; a round that fails is recorded and the next poll tries again.
POD_DRAIN_ROUND: ActivityOptions = {
    "start_to_close_timeout": timedelta(minutes=10),
    "heartbeat_timeout": HEARTBEAT_TIMEOUT,
    "retry_policy": RetryPolicy(
        initial_interval=timedelta(seconds=1),
        maximum_interval=timedelta(seconds=20),
        maximum_attempts=3,
        non_retryable_error_types=NON_RETRYABLE,
    ),
}
# A firmware update is never retried blindly (a half-flashed part is the vendor's to judge);
# it heartbeats between components, and one component may take minutes on its BMC. Called
# through `bulk`: it holds its slot for as long.
FIRMWARE_UPDATE: ActivityOptions = {
    "start_to_close_timeout": timedelta(hours=2),
    "heartbeat_timeout": timedelta(minutes=5),
    "retry_policy": RetryPolicy(maximum_attempts=1),
}


def bulk(options: ActivityOptions) -> ActivityOptions:
    """`options` for an activity of the bulk lane: work that may wait, on the bulk slots of the
    workflow's task queue (a bulk lane's own workflow stays in it)."""
    return {**options, "task_queue": bulk_queue(workflow.info().task_queue)}


def hardware_step(params: dict[str, Any]) -> ActivityOptions:
    """A GPU reset or reboot: as long as its own waits (for idle GPUs, for the node to come
    back) plus margin. It heartbeats while it waits; a BMC reset call itself may block for a
    minute, hence the heartbeat bound. Tried twice: a reset is not repeated blindly. In the
    bulk lane: it holds its slot for minutes."""
    return bulk(
        {
            "start_to_close_timeout": timedelta(
                seconds=params.get("idle_timeout", 0) + params.get("timeout", 900) + 120
            ),
            "heartbeat_timeout": timedelta(seconds=60),
            "retry_policy": RetryPolicy(maximum_attempts=2),
        }
    )


def check_options(check: str, attempts: int) -> ActivityOptions:
    """A check runs as long as its tool typically takes, three times over, plus a minute, in
    the bulk lane."""
    return bulk(
        {
            "start_to_close_timeout": timedelta(seconds=CHECKS[check].typical_duration_s * 3 + 60),
            "heartbeat_timeout": HEARTBEAT_TIMEOUT,
            "retry_policy": RetryPolicy(
                initial_interval=timedelta(seconds=1),
                maximum_attempts=attempts,
                non_retryable_error_types=NON_RETRYABLE,
            ),
        }
    )


T = TypeVar("T")


async def unless(work: Awaitable[T], stop: Callable[[], bool]) -> tuple[bool, T | None]:
    """(True, result) when `work` ends, (False, None) when `stop()` holds first: then `work`
    is cancelled, and with it the activity it waits on (its heartbeat carries the cancellation
    to the call on the node). What a critical event cuts short goes through here."""
    task = asyncio.ensure_future(work)
    await workflow.wait_condition(lambda: task.done() or stop())
    if task.done():
        return True, task.result()
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    return False, None


async def run_check(req: CheckRequest) -> CheckOutcome:
    """Run one check on a node. Retries spent without a recorded result (the worker died on
    the last try, say) give an `error` outcome: the node is not known to be bad, only unchecked."""
    try:
        return await workflow.execute_activity_method(
            CheckActivities.run_check, req, **check_options(req.check, req.max_attempts)
        )
    except ActivityError as exc:
        return CheckOutcome(req.node, req.check, "error", f"could not run: {exc.cause or exc}", {}, "activity")


async def hold_for_check(hold: SchedulerHold, actor: str, key: str) -> str:
    """Fence a check of a production node: hold it in its scheduler, then confirm it idle
    (patch fence-checks: a sweep's check, a recheck). "" when the check may run; otherwise
    why it is skipped: a job runs there (it landed before the hold), another check holds the
    node (a recheck during a sweep's check: two at once would disturb each other), or the
    scheduler refused the hold. A skipped check is recorded (kind check_skipped, where fleet status lists
    automation; no check run, so the node's health stays what its last real check said) and
    the hold lifted: the node goes back to service, neither failed nor in error, for it is
    not at fault."""
    try:
        held: HeldNode = await workflow.execute_activity_method(
            NodeActivities.hold_in_scheduler, hold, **SCHEDULER_ROUND
        )
        why = (
            f"held for another check ({held.held_by})"
            if held.held_by
            else f"job {', '.join(held.running_jobs)} running on the node"
            if held.running_jobs
            else ""
        )
    except ActivityError as exc:
        why = f"the scheduler refused the hold: {exc.cause or exc}"
    if why:
        await release_hold(hold, actor, key)  # lifts nothing but this hold: never the other check's
        await record_automation(
            AutomationRecord(
                kind="check_skipped",
                reason=bounded(f"{hold.reason.removeprefix(REASON_PREFIX).strip()}: skipped: {why}"),
                actor=actor,
                node=hold.node,
                key=f"{key}/skipped",
            )
        )
    return why


async def release_hold(hold: SchedulerHold, actor: str, key: str) -> None:
    """Lift a check's hold (only while it is still that hold on a node in production); a
    scheduler that refuses is recorded, and `fleetctl reconcile` shows the node."""
    try:
        await workflow.execute_activity_method(NodeActivities.release_hold, hold, **SCHEDULER)
    except ActivityError as exc:
        await record_automation(
            AutomationRecord(
                kind="scheduler_error",
                reason=bounded(f"release: {exc.cause or exc}"),
                actor=actor,
                node=hold.node,
                key=f"{key}/release",
            )
        )


ArgT = TypeVar("ArgT")


async def quick_local(activity: Callable[[Any, ArgT], T], arg: ArgT) -> T:
    """A short database step of the critical path (QUICK: a node's facts, its health events,
    its transition, the guard's facts and decision) run as a local activity, in the worker
    that runs the workflow: no round trip through the server's task queue, which a sweep's
    tasks share, and one workflow task for steps in a row (docs/decisions/0033). Its retries
    and timeout are QUICK's; a worker that dies in it fails the workflow task, and the next
    worker runs the step again (each is idempotent, as an activity is). Runs from before the
    patch schedule the step as an activity, as they did."""
    if workflow.patched("quick-steps-local"):
        return await workflow.execute_local_activity_method(
            activity, arg, start_to_close_timeout=QUICK["start_to_close_timeout"], retry_policy=QUICK["retry_policy"]
        )
    return await workflow.execute_activity_method(activity, arg, **QUICK)


async def record_automation(rec: AutomationRecord) -> None:
    await workflow.execute_activity_method(NodeActivities.record_automation_event, rec, **QUICK)


async def ask_guard(req: RemovalRequest) -> RemovalDecision:
    return await workflow.execute_activity_method(GuardActivities.ask_capacity_guard, req, **MESSAGE)


async def command_node(req: TransitionRequest) -> NodeCommandOutcome:
    """Ask a node's workflow to move; a refusal is an answer (accepted False), not a failure."""
    return await workflow.execute_activity_method(NodeCommandActivities.command_node, req, **MESSAGE)


async def guarded_drain(
    removal: RemovalRequest, drain: TransitionRequest
) -> tuple[RemovalDecision, NodeCommandOutcome | None]:
    """Drain a node of another workflow's concern: the capacity guard first, then the node's
    own workflow, with the guard's grant (None: the guard refused, nothing was asked of the node)."""
    decision = await ask_guard(removal)
    if not decision.granted:
        return decision, None
    return decision, await command_node(dataclasses.replace(drain, grant=decision.grant))


async def removals_for(req: RemovalRequest, check: str = "", signature: str = "") -> list[RemovalRequest]:
    """The requests a fault asks the guard for, in order: a fault of
    an NVLink domain's fabric (a failed `imex` check, a fatal NVSwitch SXid:
    fleetctl.nodes.capacity.is_domain_fabric_fault) found on a node of a domain asks for the
    whole domain (removals_for_fault); any other fault asks for the node alone, with no activity."""
    if not is_domain_fabric_fault(check, signature):
        return [req]
    workflow.deprecate_patch("nvlink-domain-hold")
    removals: FaultRemovals = await workflow.execute_activity_method(
        GuardActivities.removals_for_fault, FaultRemoval(req, check, signature), **QUICK
    )
    return removals.requests


async def hold_nvlink_domain(
    removals: list[RemovalRequest], first: RemovalDecision, cause: str, key: str
) -> list[NodeCommandOutcome]:
    """After the guard granted the first of a fault's `removals` (its node's own drain is the
    caller's): ask for the rest (a critical fault's domain), then drain every other node of the
    domain the grants cover, each with its own grant, all at once. They are not at fault (no
    event: no runbook remediates them), but no multi-node NVLink job can run on them until the
    domain's fabric is repaired; an operator returns them then."""
    grants = dict(first.domain_grants)  # none, and no other request: an ordinary fault, no activity
    for rest in removals[1:]:
        decision = await ask_guard(rest)
        if decision.granted:
            grants.update({rest.node: decision.grant, **decision.domain_grants})
    if not grants:
        return []
    domain = next(r.domain for r in removals if r.domain)
    held = bounded(domain_held_reason(domain, removals[0].node, cause))
    return list(
        await asyncio.gather(
            *(
                command_node(
                    TransitionRequest(
                        node=node,
                        trigger=Trigger.DRAIN.value,
                        actor=removals[0].actor,
                        actor_kind=Actor.AUTOMATION.value,
                        cause=held,
                        request_id=f"{key}/domain/{node}",
                        grant=grant,
                    )
                )
                for node, grant in grants.items()
            )
        )
    )


def refuse_ungranted_drain(req: TransitionRequest, node: str, state_version: int) -> None:
    """The node's workflow takes a drain from automation only with the capacity guard's grant
    for this node at its current version: a runbook, a sweep or any workflow that sends a drain
    without asking the guard (or with another node's grant, or a stale one) is refused, so no
    path of automation removes capacity past the guard. An operator's drain is the operator's."""
    if req.trigger != Trigger.DRAIN.value or req.actor_kind == Actor.OPERATOR.value:
        return
    if not grant_covers(req.grant, node, state_version):
        raise ApplicationError(
            f"{node}: an automated drain needs the capacity guard's grant for this node at version {state_version}"
            + (f" (got {req.grant[:80]!r})" if req.grant else ""),
            type="NoCapacityGrant",
            non_retryable=True,
        )
