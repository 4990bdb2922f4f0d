"""NodeLifecycle: one long-running workflow per node (id `node/<name>`), the sole writer of
that node's state.

Modelled on Temporal's safe_message_handlers sample: one state dataclass in and out, a lock
so handlers never interleave their activity calls, an idempotency guard keyed by request id,
and continue-as-new only after every handler has finished. Handlers stay short: they
validate and queue work; the main loop does the work (phases, health events, drains) one
item at a time, so a node is never in two phases at once.

A critical health event never waits behind that work (patch critical-events-preempt): it is
taken off the queue first, and every long wait of an item is a condition the event ends. A
drain waiting for its jobs becomes critical and restarts them now; a burn-in or recheck check
in flight is cancelled (its activity too) and recorded as interrupted, never as a pass or a
fail; a firmware flash is the one step that finishes first, and the node says so.

Every check runs on a node its scheduler holds (docs/concepts.md, "The node's hold"): from
import until admitted (patch fence-burn-in: the hold taken again when admission starts, then
the jobs that landed before it waited for, as a drain waits), and for a recheck of a
production node (patch fence-checks: held, then read idle; a job there skips the recheck).
"""

from __future__ import annotations

import asyncio
import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

from temporalio import workflow
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ActivityError, ApplicationError, FailureError, WorkflowAlreadyStartedError
from temporalio.workflow import ParentClosePolicy

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.capacity import RemovalRequest
    from fleetctl.nodes.gpu_quarantine import QuarantineAction
    from fleetctl.nodes.health import plausible_time
    from fleetctl.nodes.lifecycle import Actor, IllegalTransition, NodeState, next_state
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.schedulers.base import BURN_IN_HOLD, recheck_hold_reason
    from fleetctl.text import bounded, failure_message
    from fleetctl.workflows.activities.checks import CheckActivities
    from fleetctl.workflows.activities.firmware import FirmwareActivities
    from fleetctl.workflows.activities.gpu_quarantine import GpuQuarantineActivities
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.activities.remediation import RemediationActivities
    from fleetctl.workflows.api import (
        REMEDIATION_INTERRUPT_SIGNAL,
        ROLL_FORWARD_SIGNAL,
        AdmissionRequest,
        AdmissionVerdict,
        AutomationRecord,
        CheckOutcome,
        CheckRequest,
        DriftReport,
        DriftRequest,
        GpuQuarantinePlan,
        GpuQuarantineRequest,
        HealthEventInput,
        HealthEventVerdict,
        HeldNode,
        JobRestartInput,
        NodeFacts,
        NodeLifecycleState,
        PhaseAccepted,
        PhaseRequest,
        RemediationChoice,
        RemediationInput,
        RemediationInterrupt,
        RemediationPlan,
        RmaRequest,
        SchedulerCordon,
        SchedulerHold,
        SweepScope,
        TransitionRecord,
        TransitionRequest,
        TransitionResult,
        UpdateOutcome,
        WorkItem,
        WorkKind,
        fault_restart_id,
        job_restart_id,
        remediation_id,
    )
    from fleetctl.workflows.definitions.health_queue import (
        bounded_event,
        event_of,
        is_critical,
        next_health_events,
        queue_health_event,
        record_health_events,
    )
    from fleetctl.workflows.definitions.job_restart import JobRestart
    from fleetctl.workflows.definitions.node_scheduler import SAID_BY_PLACEMENT, move_pods, report_state
    from fleetctl.workflows.definitions.node_visibility import (
        keep_details_current,
        record_transition,
        show_details,
        show_queue,
    )
    from fleetctl.workflows.definitions.remediation import Remediation
    from fleetctl.workflows.definitions.shared import (
        FIRMWARE_CHECKS,
        FIRMWARE_UPDATE,
        MESSAGE,
        QUICK,
        SCHEDULER,
        SCHEDULER_ROUND,
        ask_guard,
        bulk,
        hold_for_check,
        hold_nvlink_domain,
        quick_local,
        record_automation,
        refuse_ungranted_drain,
        release_hold,
        removals_for,
        run_check,
        unless,
    )

# Bounded memory of answered requests: a CLI that retries an update after a network blip
# gets the first answer back instead of a second transition.
RECENT_REQUESTS_KEPT = 64
ADMITTABLE = tuple(s.value for s in NodeState if s.admittable)  # in the enum's order, for the message
CHECK_ATTEMPTS = 3
# An interrupted remediation ends within a few activities (the step recorded, the run
# finished); the runbook for the critical event starts as soon as it has.
REMEDIATION_HANDOVER_POLL = timedelta(seconds=1)
REMEDIATION_HANDOVER_TRIES = 60
# What `current` answers of the queue: its first items and their count, never the whole
# queue (a query's answer is bounded by Temporal's blob limit).
WORK_SHOWN = 20


class CarriedToNextRun(Exception):
    """A long wait of an item handed to the next run: the item is back at the queue's front,
    with how long it has waited, and the run continues as new."""


def check_event(check: str, status: str, message: str) -> dict[str, Any]:
    """A check result as the event a runbook matches."""
    return Event(EventKind.CHECK, check=check, status=status, message=message).to_dict()


def fault_event(ev: HealthEventInput) -> dict[str, Any]:
    """A health event as the event a runbook matches: an XID when it has a code."""
    kind = EventKind.XID if ev.code is not None else EventKind.MANUAL
    return Event(kind, code=ev.code, message=ev.message).to_dict()


@workflow.defn
class NodeLifecycle:
    @workflow.init
    def __init__(self, state: NodeLifecycleState) -> None:
        self.s = state
        self.lock = asyncio.Lock()
        self.transitions_this_run = 0
        self.signals_this_run = 0
        # Runs from before the patch keep their unbounded queue and continue as new only idle.
        self.bounded: bool | None = None
        self.rolling_forward = False

    def _bounded(self) -> bool:
        """Repeated minor events folded, and the run continued as new before Temporal's caps
        whatever it is doing (patch bounded-run; asked once per run)."""
        if self.bounded is None:
            self.bounded = workflow.patched("bounded-run")
        return self.bounded

    @workflow.run
    async def run(self, state: NodeLifecycleState) -> NodeLifecycleState:
        show_details(self.s)
        self.details_kept = asyncio.create_task(keep_details_current(lambda: self.s))  # ends with the run
        self._bounded()
        while True:
            await workflow.wait_condition(
                lambda: bool(self.s.work) or self._retired() or self._should_continue_as_new()
            )
            if self.s.work and not self._retired() and not (self.bounded and self._should_continue_as_new()):
                item = self._next_item()
                # Busy from the moment the item leaves the queue (each kind names itself more
                # precisely as it goes): a query never sees an idle node with work in hand.
                self.s.activity = item.kind.value.replace("_", " ")
                show_queue(self.s)
                try:
                    await self._perform(item)
                except CarriedToNextRun:
                    pass  # the item waits at the queue's front; the run continues as new below
                self.s.activity = ""
                show_details(self.s)  # the outcome may wait for an operator now (no runbook handled it)
                show_queue(self.s)
                continue
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self._retired():
                workflow.deprecate_patch("report-scheduler-state")  # the queue is not worked once retired
                await report_state(self.s, self.s.last_outcome)
                return self.s
            # The queue goes with it (a drain's wait in progress at its front): the next run
            # works it on, and takes signals again.
            self.s.activity = ""
            workflow.continue_as_new(self.s)

    def _retired(self) -> bool:
        return self.s.state == NodeState.RETIRED.value

    def _enqueue(self, item: WorkItem) -> None:
        item.queued_at = workflow.now().timestamp()
        self.s.work.append(item)
        if len(self.s.work) == 1:  # behind others, it is not the oldest: nothing to show
            show_queue(self.s)

    def _critical_index(self) -> int | None:
        """Where the first critical health event waits in the queue, None if none does."""
        return next(
            (
                i
                for i, w in enumerate(self.s.work)
                if w.kind is WorkKind.HEALTH_EVENT and w.event is not None and is_critical(w.event)
            ),
            None,
        )

    def _critical_waiting(self) -> bool:
        return self._critical_index() is not None

    def _next_item(self) -> WorkItem:
        """The oldest item, unless a critical health event waits behind it: that one first;
        but a drain at the front (one carried from the last run) goes on first, since its wait
        ends on that event and turns critical (the event alone would find the node draining
        and restart none of its jobs)."""
        index = self._critical_index()
        carried_drain = self.bounded and self.s.work[0].kind is WorkKind.DRAIN_FOLLOWUP
        if index and not carried_drain:
            workflow.deprecate_patch("critical-events-preempt")
            return self.s.work.pop(index)
        return self.s.work.pop(0)

    def _carry(self, item: WorkItem, waited_s: float) -> NoReturn:
        """Hand `item`'s wait to the next run (CarriedToNextRun): back at the queue's front,
        with how long it has waited."""
        self.s.work.insert(0, dataclasses.replace(item, drain_waited_s=waited_s))
        raise CarriedToNextRun

    def _carry_due(self) -> bool:
        return bool(self.bounded) and self._should_continue_as_new()

    async def _record_interrupted(self, what: str) -> None:
        """A step cut short by a critical event: recorded as interrupted (it neither passed nor
        failed), where fleet status and `node show` list automation."""
        index = self._critical_index()
        waiting = self.s.work[index].event if index is not None else None
        by = (
            f"{waiting.source} {waiting.code}"
            if waiting is not None and waiting.code is not None
            else "a critical event"
        )
        self.s.last_outcome = f"{what}: interrupted by {by}"
        await record_automation(
            AutomationRecord(
                kind="interrupted",
                reason=self.s.last_outcome,
                actor="lifecycle",
                node=self.s.node,
                key=f"{workflow.info().workflow_id}/interrupted/{workflow.now().timestamp()}",
            )
        )

    def _should_continue_as_new(self) -> bool:
        return (
            self.rolling_forward
            or workflow.info().is_continue_as_new_suggested()
            or self.transitions_this_run >= self.s.transitions_per_run
            or (bool(self.bounded) and self.signals_this_run >= self.s.signals_per_run)
        )

    # -- messages ------------------------------------------------------------------------

    @workflow.update
    async def transition(self, req: TransitionRequest) -> TransitionResult:
        req = dataclasses.replace(req, cause=bounded(req.cause), actor=bounded(req.actor, 255))
        async with self.lock:
            if req.request_id and req.request_id in self.s.recent_requests:
                previous = self.s.recent_requests[req.request_id]
                return TransitionResult(**{**previous.__dict__, "repeated": True})
            # The validator ran before we held the lock; another handler may have moved the
            # node since. Check again so two racing commands give exactly one transition.
            target = self._target_or_reject(req.trigger, req.actor_kind)
            result = await self._apply(req, target)
        if target == NodeState.DRAINING.value:
            # The drain's event says what it is (maintenance, a fault) for the record; only
            # automation's drains start a runbook: an operator's node is the operator's to fix.
            self._enqueue(
                WorkItem(
                    WorkKind.DRAIN_FOLLOWUP,
                    actor=req.actor,
                    cause=req.cause,
                    remediation_event=req.event if req.actor_kind != Actor.OPERATOR.value else None,
                )
            )
        elif target == NodeState.RMA.value and req.actor_kind == Actor.OPERATOR.value:
            # A runbook's RMA step opens its own record (with its run); an operator's needs one.
            self._enqueue(WorkItem(WorkKind.OPEN_RMA, actor=req.actor, cause=req.cause))
        return result

    @transition.validator
    def validate_transition(self, req: TransitionRequest) -> None:
        if req.request_id and req.request_id in self.s.recent_requests:
            return
        self._target_or_reject(req.trigger, req.actor_kind)
        refuse_ungranted_drain(req, self.s.node, self.s.state_version)

    @workflow.update
    def admit(self, req: PhaseRequest) -> PhaseAccepted:
        self._enqueue(WorkItem(WorkKind.ADMIT, actor=req.actor, suite=req.suite or "burn-in"))
        return PhaseAccepted(self.s.node, "admit", req.suite or "burn-in", len(self.s.work) - 1)

    @admit.validator
    def validate_admit(self, req: PhaseRequest) -> None:
        if self.s.state not in ADMITTABLE:
            raise ApplicationError(
                f"{self.s.node}: cannot admit a node in {self.s.state} (allowed from: {', '.join(ADMITTABLE)})",
                type="IllegalTransition",
                non_retryable=True,
            )
        if any(w.kind is WorkKind.ADMIT for w in self.s.work):
            raise ApplicationError(
                f"{self.s.node}: admission already in progress", type="IllegalTransition", non_retryable=True
            )

    @workflow.update
    def recheck(self, req: PhaseRequest) -> PhaseAccepted:
        self._enqueue(WorkItem(WorkKind.RECHECK, actor=req.actor, suite=req.suite or "quick"))
        return PhaseAccepted(self.s.node, "recheck", req.suite or "quick", len(self.s.work) - 1)

    @recheck.validator
    def validate_recheck(self, req: PhaseRequest) -> None:
        if self._retired():
            raise ApplicationError(f"{self.s.node}: retired", type="IllegalTransition", non_retryable=True)

    @workflow.update
    async def release_gpu(self, req: GpuQuarantineRequest) -> str:
        """An operator puts a GPU taken out alone back in the node's scheduler (after its reset
        and recheck by hand); under the lock, as a transition."""
        async with self.lock:
            try:
                self.s.last_outcome = await workflow.execute_activity_method(
                    GpuQuarantineActivities.release_gpu, req, **SCHEDULER
                )
            except ActivityError as exc:  # the update fails with the reason, never the workflow
                raise ApplicationError(failure_message(exc), type="NotReleased", non_retryable=True) from None
            return self.s.last_outcome

    @release_gpu.validator
    def validate_release_gpu(self, req: GpuQuarantineRequest) -> None:
        if self._retired():
            raise ApplicationError(f"{self.s.node}: retired", type="IllegalTransition", non_retryable=True)

    @workflow.signal
    def health_event(self, ev: HealthEventInput) -> None:
        ev = bounded_event(ev)
        # The sender's clock is believed only when it agrees with ours: windows and restart
        # latencies then run on times that are comparable across senders.
        ev.received_at = workflow.now().timestamp()
        # A logged record's own time is believed however long it waited in a spool.
        if ev.at_from_record:
            workflow.deprecate_patch("record-times-kept")
        ev.at = plausible_time(ev.at, ev.received_at, ev.at_from_record)
        item = WorkItem(WorkKind.HEALTH_EVENT, actor=ev.actor, event=ev, fault_seen_at=ev.at)
        if not self._bounded():
            self._enqueue(item)
            return
        # Counted toward the run's signals (continue-as-new before Temporal refuses any), and
        # folded into the queued event it repeats, if any.
        self.signals_this_run += 1
        item.queued_at = workflow.now().timestamp()
        was_empty = not self.s.work
        if not queue_health_event(self.s.work, item):
            self.s.minor_events_dropped += 1
        elif was_empty:
            show_queue(self.s)

    @workflow.signal(name=ROLL_FORWARD_SIGNAL)
    def roll_forward(self) -> None:
        """Continue as new as soon as the work in hand allows (a drain's wait is carried): an
        idle node reaches none of the run's caps, and only a new run leaves the branches that
        retired patches removed (docs/decisions/0023-retiring-patches.md)."""
        self.rolling_forward = True

    @workflow.query
    def current(self) -> NodeLifecycleState:
        """The node's state with the first WORK_SHOWN items of its queue and their count
        (`work_total`): bounded, however much is queued."""
        return dataclasses.replace(self.s, work=self.s.work[:WORK_SHOWN], work_total=len(self.s.work))

    # -- work ----------------------------------------------------------------------------

    async def _perform(self, item: WorkItem) -> None:
        match item.kind:
            case WorkKind.ADMIT:
                await self._admit(item)
            case WorkKind.RECHECK:
                await self._recheck(item)
            case WorkKind.HEALTH_EVENT:
                if item.event is None:
                    return
                workflow.deprecate_patch("health-events-critical-first")
                await self._health_events(next_health_events(self.s.work, item))
            case WorkKind.DRAIN_FOLLOWUP:
                await self._after_drain(item)
            case WorkKind.RESUME_IN_SCHEDULER:
                await self._resume_in_scheduler()
            case WorkKind.RELEASE_HOLD:
                await release_hold(
                    SchedulerHold(self.s.node, recheck_hold_reason(item.suite)),
                    item.actor or "recheck",
                    f"{workflow.info().workflow_id}/release@{workflow.now().timestamp()}",
                )
            case WorkKind.REPORT_STATE:
                await report_state(self.s, item.cause)
            case WorkKind.OPEN_RMA:
                await workflow.execute_activity_method(
                    RemediationActivities.open_rma,
                    RmaRequest(
                        self.s.node,
                        item.cause,
                        item.actor,
                        idempotency_key=f"{workflow.info().workflow_id}@{self.s.state_version}/rma",
                    ),
                    **MESSAGE,
                )
            case _:
                # Fails the workflow task (retried, and shown as Stalled), never the node's
                # workflow: a worker that knows the kind works it on.
                raise ValueError(f"{self.s.node}: no branch works a {item.kind!r} item")

    async def _admit(self, item: WorkItem) -> None:
        self.s.activity = f"admit: {item.suite}"
        # Histories recorded before the hold run their checks on a node the scheduler may fill.
        if workflow.patched("fence-burn-in") and not await self._hold_until_admitted(item):
            return
        workflow.deprecate_patch("firmware-phase")
        if not await self._firmware_phase(item):
            return
        if not await self._move("begin_burn_in", f"{item.actor}: admit with suite {item.suite}", item.actor):
            return
        checks = await self._suite_checks(item.suite)
        if checks is None:
            await self._move("phase_failed", f"burn-in: {self.s.last_outcome}")
            return
        run_ids: list[int] = []
        base = f"{workflow.info().workflow_id}@{self.s.state_version}"
        index, attempt = 0, 0
        while index < len(checks):
            check = checks[index]
            self.s.activity = f"burn_in: {check} ({index + 1}/{len(checks)})"
            # A check cut short is run again (under a new key) when the event that cut it
            # turns out not to stop the burn-in: the catalog judged it minor.
            key = f"{base}/{index}" + (f"/again-{attempt}" if attempt else "")
            outcome = await self._check_unless_critical(check, item.suite, key, f"burn-in: {check}")
            if outcome is not None and outcome.check_run_id is not None:
                run_ids.append(outcome.check_run_id)
            if await self._health_events_during_phase():
                await self._move("phase_failed", "burn-in: a critical health event arrived during burn-in")
                return
            if outcome is None:
                attempt += 1
                continue
            index, attempt = index + 1, 0
            if outcome.status not in ("pass", "warn"):
                moved = await self._move("phase_failed", f"burn-in: {check}: {outcome.status}: {outcome.reason}")
                if moved and outcome.status == "fail":  # an `error` says nothing about the hardware
                    await self._remediate(check_event(check, "fail", outcome.reason), item.actor)
                return
        if not await self._move("begin_admission", f"burn-in passed: {len(checks)} checks"):
            return
        self.s.activity = "admission: judging against the profile and the fleet"
        verdict: AdmissionVerdict = await workflow.execute_activity_method(
            CheckActivities.judge_admission, AdmissionRequest(self.s.node, run_ids), **QUICK
        )
        if verdict.passed:
            await self._move("enter_production", f"admission: {verdict.reason}")
        elif await self._move("phase_failed", f"admission: {verdict.reason}"):
            await self._remediate(check_event(verdict.failed_check or "admission", "fail", verdict.reason), item.actor)

    async def _hold_until_admitted(self, item: WorkItem) -> bool:
        """Hold the node in its scheduler until it is admitted (import took the hold; taken
        again for a node admitted from maintenance or RMA, or one imported before holds), then
        wait for the jobs that landed before the hold to end, as a drain waits for them.
        Entering production lifts it (resume_in_scheduler). False: jobs still run after the
        drain's wait, the scheduler refused, or a critical event came: no check runs, the node
        stays where it is, held, and says why."""
        hold = SchedulerHold(self.s.node, BURN_IN_HOLD)
        key = f"{workflow.info().workflow_id}@{self.s.state_version}/hold"
        waited = item.drain_waited_s
        while True:
            self.s.activity = "admit: holding the node in its scheduler"
            try:
                held: HeldNode = await workflow.execute_activity_method(
                    NodeActivities.hold_in_scheduler, hold, **SCHEDULER_ROUND
                )
            except ActivityError as exc:
                self.s.last_outcome = f"admit: not started: the scheduler refused the hold: {failure_message(exc)}"
                await record_automation(
                    AutomationRecord(
                        kind="scheduler_error",
                        reason=bounded(self.s.last_outcome),
                        actor="lifecycle",
                        node=self.s.node,
                        key=key,
                    )
                )
                return False
            if not held.running_jobs:
                return True
            jobs = ", ".join(held.running_jobs)
            if waited >= self.s.drain_job_wait_s:
                self.s.last_outcome = (
                    f"admit: not started: job {jobs} still running on the held node after "
                    f"{waited:g} s; admit again once it has ended"
                )
                return False
            self.s.activity = f"admit: waiting for job {jobs} to end on the held node"
            if await self._wait_unless_critical(self.s.drain_job_poll_s, item, waited):
                self.s.last_outcome = "admit: not started: a critical health event arrived"
                return False
            waited += self.s.drain_job_poll_s

    async def _firmware_phase(self, item: WorkItem) -> bool:
        """Bring the node to the fleet's firmware baseline, through the same update path as a
        roll-out. Skipped when no baseline is set or the node already matches it. False: the
        node failed the phase (it is in maintenance now) or moved on."""
        baseline_id = await workflow.execute_activity_method(FirmwareActivities.current_baseline_id, "", **QUICK)
        if not baseline_id:
            return True
        base = f"{workflow.info().workflow_id}@{self.s.state_version}/firmware"
        drift = await self._firmware_drift(baseline_id, f"{base}/before")
        if drift.status != "drift":
            return True  # matches (or nothing to compare): burn-in judges the rest
        cause = f"firmware: off the baseline: {'; '.join(drift.drifts)}"
        if not await self._move("begin_firmware", cause, item.actor):
            return False
        self.s.activity = "firmware: updating"
        try:
            applied: UpdateOutcome = await self._flash(baseline_id)
        except ActivityError as exc:
            # Never retried blindly (a half-flashed part is the vendor's to judge), and never
            # the end of this workflow: the node goes to maintenance with the reason.
            applied = UpdateOutcome(False, f"the update did not finish: {failure_message(exc)}")
        if applied.ok:
            after = await self._firmware_drift(baseline_id, f"{base}/after")
            if after.status == "ok":
                self.s.last_outcome = f"firmware updated: {applied.detail}"
                return True
            reason = f"still off the baseline after the update: {'; '.join(after.drifts)}"
        else:
            reason = f"update failed: {applied.detail}"
        await self._move("phase_failed", f"firmware: {reason}")
        return False

    async def _flash(self, baseline_id: int) -> UpdateOutcome:
        """The firmware update, never cut short: a half-flashed part can brick a GPU or a NIC,
        so a critical event waits for it, and the node's activity says so."""
        flash = workflow.execute_activity_method(
            FirmwareActivities.apply_updates, DriftRequest(self.s.node, baseline_id), **bulk(FIRMWARE_UPDATE)
        )
        workflow.deprecate_patch("critical-events-preempt")
        task = asyncio.ensure_future(flash)
        await workflow.wait_condition(lambda: task.done() or self._critical_waiting())
        if not task.done():
            self.s.activity = "firmware: updating; a critical event waits for the flash to finish"
        return await task

    async def _firmware_drift(self, baseline_id: int, key: str) -> DriftReport:
        """Read the node's firmware inventory (recorded as check runs), then compare."""
        for index, check in enumerate(FIRMWARE_CHECKS):
            self.s.activity = f"firmware: {check}"
            await self._run_check(check, "firmware", f"{key}/{index}")
        return await workflow.execute_activity_method(
            FirmwareActivities.node_drift, DriftRequest(self.s.node, baseline_id), **QUICK
        )

    async def _recheck(self, item: WorkItem) -> None:
        checks = await self._suite_checks(item.suite)
        if checks is None:
            return
        base = f"{workflow.info().workflow_id}/recheck@{workflow.now().timestamp()}"
        if self.s.state == NodeState.PRODUCTION.value and workflow.patched("fence-checks"):
            self.s.activity = f"recheck {item.suite}: holding the node in its scheduler"
            skipped = await hold_for_check(
                SchedulerHold(self.s.node, recheck_hold_reason(item.suite)), item.actor or "recheck", base
            )
            if skipped:
                self.s.last_outcome = f"recheck {item.suite}: skipped: {skipped}"
                return
            # Lifted once the recheck is over, behind any critical event it leaves queued: that
            # event's drain keeps the node out, as a failed check's does (release_hold lifts
            # only this hold, on a node still in production).
            self._enqueue(WorkItem(WorkKind.RELEASE_HOLD, actor=item.actor, suite=item.suite))
        failed: CheckOutcome | None = None
        for index, check in enumerate(checks):
            self.s.activity = f"recheck: {check} ({index + 1}/{len(checks)})"
            outcome = await self._check_unless_critical(
                check, item.suite, f"{base}/{index}", f"recheck {item.suite}: {check}"
            )
            if outcome is None:
                return  # the critical event is next, and it decides what the node does
            if outcome.status == "fail":
                failed = outcome
                break
        if failed is None:
            self.s.last_outcome = f"recheck {item.suite}: passed"
            return
        cause = f"recheck {item.suite}: {failed.check}: {failed.reason}"
        self.s.last_outcome = cause
        if self.s.state == NodeState.PRODUCTION.value:
            await self._guarded_drain(
                cause,
                critical=False,
                actor=item.actor or "recheck",
                event=check_event(failed.check, "fail", failed.reason),
                check=failed.check,
            )

    async def _health_events(self, items: list[WorkItem]) -> None:
        """A burst recorded in one activity (critical events ahead of minor ones), then each
        verdict acted on in order."""
        self.s.activity = f"health events: {len(items)}"
        recorded = await record_health_events(self.s.node, [event_of(w) for w in items])
        self.s.last_outcome = recorded.last_reason or self.s.last_outcome
        for refusal in filter(None, recorded.refusals):
            self.s.last_outcome = f"health event not recorded: {refusal}"
        for verdict in recorded.acted:
            await self._health_event(event_of(items[verdict.index]), verdict)

    async def _health_event(self, ev: HealthEventInput, verdict: HealthEventVerdict) -> None:
        self.s.last_outcome = verdict.reason
        cause = bounded(f"health: {verdict.reason}" + (f": {ev.message}" if ev.message else ""))
        if (
            verdict.drain_now
            and verdict.critical
            and self.s.state == NodeState.MAINTENANCE.value
            and workflow.patched("remediation-interrupt")
            and await self._remediate_instead(ev, cause)
        ):
            return
        if verdict.drain_now and self.s.state != NodeState.PRODUCTION.value:
            await self._record_refused_drain(cause, ev.actor or "health-event")
        elif (
            verdict.drain_now
            and verdict.gpu
            and workflow.patched("gpu-quarantine")
            and await self._quarantine_gpu(ev, verdict, cause)
        ):
            return
        elif verdict.drain_now:
            await self._guarded_drain(
                cause,
                verdict.critical,
                ev.actor or "health-event",
                ev.at,
                ev.event_id,
                fault_event(ev),
                signature=ev.signature,
            )

    async def _quarantine_gpu(self, ev: HealthEventInput, verdict: HealthEventVerdict, cause: str) -> bool:
        """Take the one GPU a fault is confined to out of the node's scheduler, through the
        capacity guard (1/N of the node); the node stays in production. False when the fault
        must drain the node after all (another GPU is out, the scheduler cannot or refused)."""
        actor = ev.actor or "health-event"
        req = GpuQuarantineRequest(
            self.s.node,
            verdict.gpu,
            ev.code,
            cause,
            actor,
            ev.event_id or f"{workflow.info().workflow_id}@{self.s.state_version}/gpu/{verdict.gpu}",
        )
        self.s.activity = f"GPU {verdict.gpu}: quarantine"
        plan: GpuQuarantinePlan = await workflow.execute_activity_method(
            GpuQuarantineActivities.plan_gpu_quarantine, req, **QUICK
        )
        self.s.last_outcome = f"{cause}: {plan.reason}"
        if plan.action == QuarantineAction.DRAIN_NODE.value:
            return False
        if plan.action != QuarantineAction.QUARANTINE_GPU.value:
            return True  # the GPU is out already
        removal = RemovalRequest(
            node=self.s.node,
            rack=plan.rack,
            reason=cause,
            actor=actor,
            critical=verdict.critical,
            # Its own: a drain of the node for the same event (when the GPU cannot go out) is recorded too.
            request_id=f"{req.request_id}/gpu",
            gpu=plan.gpu,
            gpus_on_node=plan.gpus_on_node,
        )
        decision = await ask_guard(removal)
        if not decision.granted:
            self.s.last_outcome = f"GPU {plan.gpu} held by the capacity guard: {decision.reason}"
            return True
        try:
            self.s.last_outcome = await workflow.execute_activity_method(
                GpuQuarantineActivities.quarantine_gpu, req, **SCHEDULER
            )
        except ActivityError as exc:
            self.s.last_outcome = f"GPU {plan.gpu} not taken out: {failure_message(exc)}; draining the node"
            return False
        return True

    async def _health_events_during_phase(self) -> bool:
        """Judge queued health events now; True when one means the node must not be admitted."""
        queued = [w for w in self.s.work if w.kind is WorkKind.HEALTH_EVENT and w.event is not None]
        if not queued:
            return False
        workflow.deprecate_patch("health-events-critical-first")
        taken = {id(w) for w in queued}
        self.s.work[:] = [w for w in self.s.work if id(w) not in taken]
        recorded = await record_health_events(self.s.node, [event_of(w) for w in queued])
        return bool(recorded.acted)

    async def _guarded_drain(
        self,
        cause: str,
        critical: bool,
        actor: str,
        fault_seen_at: float = 0.0,
        request_id: str = "",
        event: dict[str, Any] | None = None,
        check: str = "",
        signature: str = "",
    ) -> None:
        """Drain the node for its fault through the guard; a fault of its NVLink domain's fabric
        (a failed `check` or a health event's catalog `signature`: removals_for) asks for the
        whole domain and drains the domain's other nodes first (this node's own drain then
        waits for its jobs)."""
        facts: NodeFacts = await quick_local(NodeActivities.node_facts, self.s.node)
        request_id = request_id or f"{workflow.info().workflow_id}@{self.s.state_version}"
        removals = await removals_for(
            RemovalRequest(
                node=self.s.node, rack=facts.rack, reason=cause, actor=actor, critical=critical, request_id=request_id
            ),
            check,
            signature,
        )
        if not removals:
            return  # already out: held with its domain by another node's request for the same fault
        decision = await ask_guard(removals[0])
        if not decision.granted:
            self.s.last_outcome = f"drain held by the capacity guard: {decision.reason}"
            return
        await hold_nvlink_domain(removals, decision, cause, request_id)
        if await self._move("drain", cause, actor, Actor.AUTOMATION.value, event):
            await self._after_drain(
                WorkItem(
                    WorkKind.DRAIN_FOLLOWUP,
                    actor=actor,
                    cause=cause,
                    critical=critical,
                    fault_seen_at=fault_seen_at or workflow.now().timestamp(),
                    remediation_event=event,
                )
            )
        else:
            await self._record_refused_drain(cause, actor)

    async def _record_refused_drain(self, cause: str, actor: str) -> None:
        """An automated drain that lost a race (an operator moved the node first) is recorded
        with its actor, as the CLI records an operator's refused command."""
        await record_automation(
            AutomationRecord(
                kind="rejected",
                reason=f"drain: {cause}: the node is already {self.s.state}",
                actor=actor,
                node=self.s.node,
                key=f"{workflow.info().workflow_id}/refused/{workflow.now().timestamp()}",
            )
        )

    async def _after_drain(self, item: WorkItem) -> None:
        """Cordon in the scheduler, then either restart the node's jobs elsewhere (critical:
        they are lost anyway) or wait for them to finish; then hand the node to maintenance."""
        self.s.activity = "draining: cordon in the scheduler"
        if item.critical:
            workflow.deprecate_patch("critical-cordon")
        scheduler = await self._cordon(item.cause, item.critical)
        if scheduler is None:
            return  # the node left draining (undrained, retired) while the scheduler refused
        self.s.activity = "draining: jobs"
        jobs = await self._running_jobs()
        if jobs is None:
            return  # the node left draining while the scheduler could not be asked
        # The node's pods (any, labelled as a job or not) are moved by the drain policy each
        # poll and hold the drain while they stay; a critical drain leaves them to its taint.
        moves_pods = not item.critical
        if moves_pods:
            workflow.deprecate_patch("drain-moves-pods")
        pods_holding = moves_pods and await move_pods(self.s, deadline_passed=False)
        waited = item.drain_waited_s
        while (
            (jobs or pods_holding)
            and not item.critical
            and waited < self.s.drain_job_wait_s
            and self.s.state == NodeState.DRAINING.value
        ):
            if await self._wait_unless_critical(self.s.drain_job_poll_s, item, waited):
                critical = await self._critical_during_drain(item)
                if critical is not None:
                    # The node is known bad now: its jobs are lost anyway, move them at once
                    # (the taint too), and remediate the fault rather than the planned work.
                    item = critical
                    self.s.activity = "draining: a critical event: restarting the jobs now"
                    if await self._cordon(item.cause, True) is None:
                        return
                    jobs = await self._running_jobs()
                    if jobs is None:
                        return
                    pods_holding = False
                    break
                continue
            waited += self.s.drain_job_poll_s
            jobs = await self._running_jobs()
            if jobs is None:
                return
            pods_holding = moves_pods and await move_pods(self.s, deadline_passed=False)
        if pods_holding and self.s.state == NodeState.DRAINING.value:
            # The wait is over: the policy decides (delete what it deletes at the deadline),
            # then only the jobs still running are restarted.
            await move_pods(self.s, deadline_passed=True)
            jobs = await self._running_jobs()
            if jobs is None:
                return
        if jobs and (item.critical or self.s.state == NodeState.DRAINING.value):
            # Critical from the start or since, the jobs are lost anyway: moved at once, as of
            # the fault. Jobs that outlived the drain's wait on a node known to be bad are moved
            # now (checkpoint and restart elsewhere) rather than let remediation reboot under them.
            fault_seen_at = workflow.now().timestamp()
            if item.critical:
                fault_seen_at = item.fault_seen_at or fault_seen_at
            else:
                workflow.deprecate_patch("drain-deadline-restarts-jobs")
                self.s.last_outcome = (
                    f"jobs still running after {self.s.drain_job_wait_s:g} s of drain: restarting them elsewhere"
                )
            await self._restart_jobs(jobs, scheduler, item, fault_seen_at)
        if (
            self.s.state == NodeState.DRAINING.value
            and await self._move(
                "drain_complete", f"drained: {item.cause}", item.actor or "drain", Actor.AUTOMATION.value
            )
            and item.remediation_event
        ):
            await self._remediate(item.remediation_event, item.actor)

    async def _wait_unless_critical(self, seconds: float, item: WorkItem, waited_s: float) -> bool:
        """Wait `seconds`; True when a critical health event ended the wait first. When the run
        must continue as new (before Temporal refuses its signals), the wait is carried to the
        next run instead (`item`, having waited `waited_s`: CarriedToNextRun)."""
        workflow.deprecate_patch("critical-events-preempt")
        if self._carry_due():
            self._carry(item, waited_s)
        try:
            await workflow.wait_condition(
                lambda: self._critical_waiting() or self._carry_due(), timeout=timedelta(seconds=seconds)
            )
        except TimeoutError:
            return False
        if not self._critical_waiting():
            self._carry(item, waited_s)
        return True

    async def _critical_during_drain(self, item: WorkItem) -> WorkItem | None:
        """Record the critical events queued while a drain waits; the drain as a critical one
        (cause, time and remediation of the first event the catalog judged critical), or None
        when none was: then the drain waits on."""
        queued = [
            w for w in self.s.work if w.kind is WorkKind.HEALTH_EVENT and w.event is not None and is_critical(w.event)
        ]
        taken = {id(w) for w in queued}
        self.s.work[:] = [w for w in self.s.work if id(w) not in taken]
        recorded = await record_health_events(self.s.node, [event_of(w) for w in queued])
        for verdict in recorded.acted:
            ev = event_of(queued[verdict.index])
            if verdict.critical:
                return WorkItem(
                    WorkKind.DRAIN_FOLLOWUP,
                    actor=ev.actor or "health-event",
                    critical=True,
                    cause=bounded(f"health: {verdict.reason}" + (f": {ev.message}" if ev.message else "")),
                    fault_seen_at=ev.at or workflow.now().timestamp(),
                    remediation_event=fault_event(ev),
                )
        self.s.last_outcome = recorded.last_reason or self.s.last_outcome
        return None

    async def _remediate(self, event: dict[str, Any], actor: str, busy_note: bool = True) -> bool:
        """Start the runbook that handles `event` on this node (in maintenance now). It runs as
        its own workflow and moves the node through this one's updates, like any other actor.
        False only when a remediation of the node is still running."""
        plan: RemediationPlan = await workflow.execute_activity_method(
            NodeActivities.choose_remediation, RemediationChoice(self.s.node, event), **QUICK
        )
        if plan.runbook is None:
            self.s.last_outcome += "; no runbook handles it: waiting for an operator"
            return True
        try:
            await workflow.start_child_workflow(
                Remediation.run,
                RemediationInput(self.s.node, plan.runbook, plan.event, plan.mode, actor or "lifecycle", plan.critical),
                id=remediation_id(self.s.node),
                parent_close_policy=ParentClosePolicy.ABANDON,
            )
            self.s.last_outcome += f"; remediation: {plan.runbook['name']}"
        except WorkflowAlreadyStartedError:
            if busy_note:
                self.s.last_outcome += "; a remediation is already running"
            return False
        return True

    async def _remediate_instead(self, ev: HealthEventInput, cause: str) -> bool:
        """A critical event on a node a runbook is working on (in maintenance): the run is told
        to stop (its step in flight is cut short), then the runbook for this event starts.
        False when no remediation was running: the node waits for an operator, as before."""
        try:
            await workflow.get_external_workflow_handle(remediation_id(self.s.node)).signal(
                REMEDIATION_INTERRUPT_SIGNAL, RemediationInterrupt(cause)
            )
        except FailureError:
            return False  # no run in flight: an operator's maintenance is the operator's
        event = fault_event(ev)
        self.s.last_outcome = f"{cause}: the running remediation is interrupted"
        for _ in range(REMEDIATION_HANDOVER_TRIES):  # until the interrupted run has ended
            if await self._remediate(event, ev.actor or "health-event", busy_note=False):
                return True
            await workflow.sleep(REMEDIATION_HANDOVER_POLL)
        self.s.last_outcome += "; it did not end: waiting for an operator"
        return True

    async def _resume_in_scheduler(self) -> None:
        """Undo fleetctl's own drain in the scheduler; a drain someone else made stays, and
        is recorded so that `fleetctl reconcile` and fleet status show the disagreement."""
        if self.s.state != NodeState.PRODUCTION.value:
            return
        self.s.activity = "resuming in the scheduler"
        try:
            await workflow.execute_activity_method(NodeActivities.resume_in_scheduler, self.s.node, **SCHEDULER)
        except ActivityError as exc:
            message = failure_message(exc)
            self.s.last_outcome = f"not resumed in the scheduler: {message}"
            await record_automation(
                AutomationRecord(
                    kind="scheduler_error",
                    reason=f"resume: {message}",
                    actor="lifecycle",
                    node=self.s.node,
                    key=f"{workflow.info().workflow_id}@{self.s.state_version}/resume",
                )
            )

    async def _running_jobs(self) -> list[str] | None:
        """The node's running jobs, asked of its scheduler as the cordon is: a scheduler that
        cannot answer is retried and shown in fleet status, never read as "no jobs". None
        when the node left draining meanwhile."""
        while self.s.state == NodeState.DRAINING.value:
            try:
                return await workflow.execute_activity_method(
                    NodeActivities.running_jobs_on, self.s.node, **SCHEDULER_ROUND
                )
            except ActivityError as exc:
                await self._scheduler_refused(f"cannot list the node's jobs: {failure_message(exc)}", "jobs")
        return None

    async def _scheduler_refused(self, message: str, what: str) -> None:
        """Record the scheduler's refusal where fleet status shows it, then wait a round."""
        self.s.last_outcome = f"scheduler refused the drain: {message}; retrying"
        await record_automation(
            AutomationRecord(
                kind="scheduler_error",
                reason=message,
                actor="lifecycle",
                node=self.s.node,
                key=f"{workflow.info().workflow_id}/{what}/{workflow.now().timestamp()}",
            )
        )
        await workflow.sleep(timedelta(seconds=self.s.scheduler_retry_s))

    async def _cordon(self, reason: str, critical: bool) -> str | None:
        """The scheduler's answer is retried with backoff; while it refuses, the node stays in
        draining (never reported drained when it is not) and fleet status shows why."""
        while self.s.state == NodeState.DRAINING.value:
            try:
                return await workflow.execute_activity_method(
                    NodeActivities.cordon_in_scheduler,
                    SchedulerCordon(self.s.node, reason, critical),
                    **SCHEDULER_ROUND,
                )
            except ActivityError as exc:
                await self._scheduler_refused(failure_message(exc), "cordon")
        return None

    async def _restart_jobs(self, jobs: list[str], scheduler: str, item: WorkItem, fault_seen_at: float) -> None:
        """Restart the node's jobs elsewhere, each as the restart of this drain's fault
        (fault_restart_id): a runbook's restart_jobs step or an operator's `job restart` for the
        same fault finds it started, running or ended, and never restarts the job again."""
        restart_id = fault_restart_id(self.s.node, self.s.state_version)
        # Histories from before the key let a restart that had ended be started again.
        keyed = workflow.patched("restart-keyed-by-fault")
        failure = Event.from_dict(item.remediation_event).failure if item.remediation_event else ""
        seen = datetime.fromtimestamp(fault_seen_at, UTC).isoformat()
        for job in jobs:
            try:
                await workflow.start_child_workflow(
                    JobRestart.run,
                    JobRestartInput(
                        job_id=job,
                        scheduler=scheduler,
                        bad_nodes=[self.s.node],
                        cause=item.cause,
                        actor=item.actor or "lifecycle",
                        fault_seen_at=seen,
                        restart_id=restart_id,
                        failure=failure,
                    ),
                    id=job_restart_id(job, restart_id),
                    # The restart outlives this node's part in it (and a continue-as-new of ours).
                    parent_close_policy=ParentClosePolicy.ABANDON,
                    id_reuse_policy=(
                        WorkflowIDReusePolicy.REJECT_DUPLICATE if keyed else WorkflowIDReusePolicy.ALLOW_DUPLICATE
                    ),
                )
            except WorkflowAlreadyStartedError:
                pass  # this fault already restarted this job

    # -- helpers -------------------------------------------------------------------------

    async def _suite_checks(self, suite: str) -> list[str] | None:
        """The suite's checks, or None (and why, in last_outcome) when the worker does not
        know the suite: a bad request must not end the node's only writer."""
        try:
            return await workflow.execute_activity_method(
                CheckActivities.suite_checks, SweepScope(suite=suite), **QUICK
            )
        except ActivityError as exc:
            self.s.last_outcome = f"cannot run suite {suite}: {failure_message(exc)}"
            return None

    async def _run_check(self, check: str, suite: str, run_key: str) -> CheckOutcome:
        return await run_check(CheckRequest(self.s.node, check, suite, run_key, CHECK_ATTEMPTS))

    async def _check_unless_critical(self, check: str, suite: str, run_key: str, what: str) -> CheckOutcome | None:
        """The check's outcome, or None when a critical health event cut it short (recorded
        as interrupted)."""
        workflow.deprecate_patch("critical-events-preempt")
        finished, outcome = await unless(self._run_check(check, suite, run_key), self._critical_waiting)
        if not finished:
            await self._record_interrupted(what)
        return outcome

    async def _move(
        self,
        trigger: str,
        cause: str,
        actor: str = "lifecycle",
        actor_kind: str = Actor.AUTOMATION.value,
        event: dict[str, Any] | None = None,
    ) -> bool:
        """Apply an automated transition; False (and nothing changes) if the node moved on."""
        async with self.lock:
            try:
                target = next_state(self.s.state, trigger, actor_kind).value
            except IllegalTransition as exc:
                self.s.last_outcome = f"stopped: {exc}"
                return False
            await self._apply(
                TransitionRequest(trigger=trigger, actor=actor, actor_kind=actor_kind, cause=cause, event=event), target
            )
            self.s.last_outcome = cause
            return True

    def _target_or_reject(self, trigger: str, actor_kind: str) -> str:
        try:
            return next_state(self.s.state, trigger, actor_kind).value
        except (IllegalTransition, ValueError) as exc:
            raise ApplicationError(f"{self.s.node}: {exc}", type="IllegalTransition", non_retryable=True) from None

    async def _apply(self, req: TransitionRequest, target: str) -> TransitionResult:
        info = workflow.info()
        record = TransitionRecord(
            node_name=self.s.node,
            from_state=self.s.state,
            to_state=target,
            trigger=req.trigger,
            cause=req.cause,
            actor=req.actor,
            actor_kind=req.actor_kind,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            expected_version=self.s.state_version,
            # The workflow is the only writer, so (node, version) names this transition uniquely.
            idempotency_key=f"{info.workflow_id}@{self.s.state_version + 1}",
            failure=Event.from_dict(req.event).failure if req.event else "",
        )
        version = await record_transition(record)
        result = TransitionResult(
            node=self.s.node,
            from_state=self.s.state,
            to_state=target,
            state_version=version,
            trigger=req.trigger,
            actor=req.actor,
        )
        self.s.state, self.s.state_version = target, version
        self.transitions_this_run += 1
        show_details(self.s)
        # Back in service: the scheduler may place work on the node again.
        if target == NodeState.PRODUCTION.value:
            workflow.deprecate_patch("resume-in-scheduler")
            self._enqueue(WorkItem(WorkKind.RESUME_IN_SCHEDULER, actor=req.actor, cause=req.cause))
        elif target not in SAID_BY_PLACEMENT:
            workflow.deprecate_patch("report-scheduler-state")
            self._enqueue(WorkItem(WorkKind.REPORT_STATE, actor=req.actor, cause=req.cause))
        if req.request_id:
            self.s.recent_requests[req.request_id] = result
            while len(self.s.recent_requests) > RECENT_REQUESTS_KEPT:
                self.s.recent_requests.pop(next(iter(self.s.recent_requests)))
        return result
