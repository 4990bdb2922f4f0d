"""Activities of a node's own life: its facts, transitions and health events, its
scheduler's view (cordon, resume, jobs), its remediation choice, and the answer of its
workflow to another workflow's transition request."""

from __future__ import annotations

import dataclasses
import time
from datetime import UTC, datetime

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from fleetctl.checks.xid_policy import FaultScope, fault_scope
from fleetctl.config import Settings, xid_policy
from fleetctl.db import queries
from fleetctl.db import spares as spare_store
from fleetctl.db.models import AutomationEvent, HealthEvent
from fleetctl.durations import as_utc
from fleetctl.nodes import reachability
from fleetctl.nodes.capacity import FLEET_LABEL
from fleetctl.nodes.gpu_quarantine import named_gpu
from fleetctl.nodes.health import checked_severity, judge_health_event, occurrences, plausible_time
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.nodes.reachability import ReachabilityPolicy, judge_fleet_silence, judge_reachability
from fleetctl.schedulers.base import (
    DrainsPods,
    FleetctlDoesNotOwnDrain,
    ReportsNodeState,
    SchedulerError,
    is_check_hold,
    work_on_node,
)
from fleetctl.text import bounded, failure_message
from fleetctl.workflows.activities.database import (
    BAD_DATA_ERRORS,
    DatabaseActivities,
    bad_data,
    not_storable,
    storable_key,
)
from fleetctl.workflows.activities.heartbeat import heartbeating
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.activities.spares import refill_spares
from fleetctl.workflows.api import (
    TRANSITION_UPDATE,
    AgentSilence,
    AutomationRecord,
    HealthEventBatch,
    HealthEventBatchResult,
    HealthEventInput,
    HealthEventVerdict,
    HeldNode,
    NodeCommandOutcome,
    NodeFacts,
    PodDrainOutcome,
    PodDrainRequest,
    ReachabilityVerdict,
    RecordedTransition,
    RemediationChoice,
    RemediationPlan,
    SchedulerCordon,
    SchedulerHold,
    SchedulerStateReport,
    SweepScope,
    TransitionRecord,
    TransitionRequest,
    TransitionResult,
    node_workflow_id,
    remediation_mode,
)

# health_events.code is an INTEGER column: 32 bits in PostgreSQL.
HEALTH_EVENT_CODE_MAX = 2**31 - 1


def health_event_refusal(ev: HealthEventInput) -> str:
    """Why the event cannot be recorded (bad data, refused without retries), or ""."""
    if ev.code is not None and not 0 <= ev.code <= HEALTH_EVENT_CODE_MAX:
        shown = str(ev.code) if len(str(ev.code)) <= 24 else f"{str(ev.code)[:20]}..."
        return f"{ev.node}: code {shown} is outside 0..{HEALTH_EVENT_CODE_MAX}: not a health event code"
    try:
        checked_severity(ev.severity)
    except ValueError as exc:
        return f"{ev.node}: {exc}"
    return ""


def storable_event(ev: HealthEventInput) -> HealthEventInput:
    """The event with every text field as a row holds it (bounded, nothing that
    cannot be encoded or stored) and its id as its unique index holds it."""
    return dataclasses.replace(
        ev,
        source=bounded(ev.source, 64),
        message=bounded(ev.message),
        actor=bounded(ev.actor, 255),
        event_id=storable_key(ev.event_id) if ev.event_id else "",
        severity=bounded(ev.severity, 64),
        gpu=bounded(ev.gpu, 64),
    )


def same_reason(seen: str | None, reason: str) -> bool:
    """Whether a drain reason the scheduler shows is `reason` as fleetctl wrote it (bounded,
    its whitespace as the adapters fold it)."""
    return " ".join((seen or "").split()) == " ".join(bounded(reason).split())


def storable_record(record: TransitionRecord) -> TransitionRecord:
    return dataclasses.replace(
        record, cause=bounded(record.cause), actor=bounded(record.actor, 255), failure=bounded(record.failure, 255)
    )


class NodeActivities(DatabaseActivities):
    def __init__(self, settings: Settings, schedulers: SchedulerRegistry):
        super().__init__(settings)
        self.schedulers = schedulers

    @activity.defn
    def record_transition(self, record: TransitionRecord) -> int:
        record = storable_record(record)
        try:
            return queries.record_transition(self.engine, **record.__dict__)
        except BAD_DATA_ERRORS as exc:
            raise not_storable(f"{record.node_name}: transition {record.trigger}", exc) from None
        except queries.StaleStateVersion as exc:
            raise ApplicationError(str(exc), type="StaleStateVersion", non_retryable=True) from None
        except LookupError as exc:
            raise ApplicationError(str(exc), type="UnknownNode", non_retryable=True) from None

    @activity.defn
    def record_transition_with_facts(self, record: TransitionRecord) -> RecordedTransition:
        """record_transition, and the node's facts read after it: the workflow shows them in
        Temporal without a second activity per transition."""
        return RecordedTransition(self.record_transition(record), self.node_facts(record.node_name))

    @activity.defn
    def node_facts(self, name: str) -> NodeFacts:
        n = self._node(name)
        return NodeFacts(
            n.name, n.rack, n.profile, n.scheduler, n.state, str(n.labels.get(FLEET_LABEL, self.settings.fleet))
        )

    @activity.defn
    def record_health_event(self, ev: HealthEventInput) -> HealthEventVerdict:
        """Bad data (a code no column holds, a row the database refuses) fails once, without
        retries (BAD_DATA): the workflow records the refusal and its queue moves on."""
        ev = storable_event(ev)
        refusal = health_event_refusal(ev)
        if refusal:
            raise bad_data(refusal)
        try:
            return self._record_health_events(ev.node, [ev])[0]
        except BAD_DATA_ERRORS as exc:
            raise not_storable(f"{ev.node}: health event from {ev.source}", exc) from None

    @activity.defn
    def record_health_events(self, batch: HealthEventBatch) -> HealthEventBatchResult:
        """A burst of the node's events in one activity and one transaction. An event that
        cannot be recorded is refused alone (recorded as such) and the others are recorded:
        when the database refuses the burst, each event is recorded alone, so the one it
        refuses is the one refused."""
        events = [storable_event(ev) for ev in batch.events]
        refusals = [health_event_refusal(ev) for ev in events]
        good = [i for i, refusal in enumerate(refusals) if not refusal]
        try:
            recorded = self._record_health_events(batch.node, [events[i] for i in good]) if good else []
        except BAD_DATA_ERRORS:
            recorded = []
            for i in list(good):
                try:
                    recorded += self._record_health_events(batch.node, [events[i]])
                except BAD_DATA_ERRORS as exc:
                    refusals[i] = not_storable(f"{batch.node}: health event from {events[i].source}", exc).message
                    good.remove(i)
        verdicts = iter(recorded)
        info = activity.info()
        for ev, refusal in zip(events, refusals, strict=False):
            if refusal:
                self.record_automation_event(
                    AutomationRecord(
                        kind="rejected",
                        reason=f"health event from {ev.source}: {refusal}",
                        actor=ev.actor or "health-event",
                        node=batch.node,
                        key=f"{info.workflow_id}/bad-event/{ev.event_id or info.activity_id}",
                    )
                )
        result = HealthEventBatchResult(refusals=refusals)
        for index, refusal in enumerate(refusals):
            if not refusal:
                verdict = next(verdicts)
                result.last_reason = verdict.reason
                if verdict.drain_now:
                    result.acted.append(dataclasses.replace(verdict, index=index))
        return result

    def _record_health_events(self, node: str, events: list[HealthEventInput]) -> list[HealthEventVerdict]:
        policy = xid_policy(self.settings)
        # Not the sender's clock alone: one days off would move the event out of (or into)
        # the escalation window of the events other senders reported. An event resent (after
        # a laptop slept, say) keeps the time it was first recorded with.
        times = [plausible_time(ev.at, ev.received_at or time.time(), ev.at_from_record) for ev in events]
        keys = [ev.event_id or f"{ev.node}/{ev.source}/{ev.code}/{at}" for ev, at in zip(events, times, strict=False)]

        def judge(i: int, at: float, earlier: list[float]) -> tuple[HealthEvent, HealthEventVerdict]:
            ev = events[i]
            if ev.code is None:
                # No Xid to judge by: the sender's severity says what it is (a sampled finding,
                # a signature the catalog rates); none given is a warning, as it always was.
                severity = ev.severity or "warning"
                critical = severity == "critical"
                verdict = HealthEventVerdict(
                    node, severity, "reset_gpu", critical, critical, ev.message or "operator report"
                )
            else:
                # A folded repeat (HealthEventInput.repeat_count) counts toward escalation as often as it was seen.
                v = judge_health_event(ev.code, earlier + occurrences(at, ev.repeat_count)[1:], at, policy=policy)
                verdict = HealthEventVerdict(
                    node,
                    v.severity,
                    v.action,
                    v.drain_now,
                    v.severity == "critical",
                    v.reason,
                    # The node's workflow decides with the GPUs out now (GpuQuarantineActivities).
                    gpu=named_gpu(ev.gpu) if fault_scope(policy, ev.code) is FaultScope.GPU else "",
                )
            return HealthEvent(
                node_name=node,
                source=ev.source,
                code=ev.code,
                severity=verdict.severity,
                action=verdict.action,
                message=ev.message,
                at=datetime.fromtimestamp(at, UTC),
                idempotency_key=keys[i],
                repeat_count=ev.repeat_count,
            ), verdict

        return queries.record_health_events(
            self.engine,
            node,
            [(k, ev.code, at, ev.repeat_count) for k, ev, at in zip(keys, events, times, strict=False)],
            judge,
        )

    @activity.defn
    def judge_reachability(self, name: str) -> ReachabilityVerdict:
        """Whether the node is suspect: its latest check runs could not reach it, so many times
        in a row (settings.suspect_after_unreachable). A suspect node is recorded as such
        (once per run that made it so), where `node list` and fleet status show it."""
        policy = ReachabilityPolicy(self.settings.suspect_after_unreachable)
        runs = queries.latest_checks(self.engine, name, limit=policy.unreachable_runs)
        verdict = judge_reachability([r.error_kind for r in runs], policy)
        if verdict.suspect:
            self.record_automation_event(
                AutomationRecord(
                    kind="suspect",
                    reason=verdict.reason,
                    actor="reachability",
                    node=name,
                    fleet=self.settings.fleet,
                    key=f"suspect/{name}/{runs[0].id}",
                )
            )
        return ReachabilityVerdict(name, verdict.suspect, verdict.reason)

    @activity.defn
    def judge_agent_silence(self, scope: SweepScope) -> AgentSilence:
        """The fleet's production nodes whose agent has been silent longer than
        settings.agent_silence_s (nodes never heard from are not judged), the longest silent
        first and at most SILENT_ASKED_PER_SWEEP of them, and how many there are. Each named
        is recorded as suspect once per silence (keyed by when it was last heard), where
        `node list` and fleet status show it until it is heard again."""
        if self.settings.agent_silence_s <= 0:
            return AgentSilence()
        judged = judge_fleet_silence(
            (
                (n.name, as_utc(n.agent_seen_at) if n.agent_seen_at else None, as_utc(n.state_since))
                for n in self._fleet_nodes(scope.fleet, state="production")
            ),
            datetime.now(UTC),
            self.settings.agent_silence_s,
            reachability.SILENT_ASKED_PER_SWEEP,
        )
        for name, seen, verdict in judged.silent:
            self.record_automation_event(
                AutomationRecord(
                    kind="suspect",
                    reason=verdict.reason,
                    actor=queries.AGENT_SILENCE_ACTOR,
                    node=name,
                    fleet=self.settings.fleet,
                    key=f"suspect/{name}/agent/{seen.timestamp():.6f}",
                )
            )
        return AgentSilence(
            judged.with_agent,
            [ReachabilityVerdict(name, True, verdict.reason) for name, _, verdict in judged.silent],
            judged.silent_total,
        )

    @activity.defn
    def record_automation_event(self, rec: AutomationRecord) -> None:
        # Every field storable: this records why something else was refused, and must not
        # itself be refused (the workflow would fail with it).
        key = storable_key(rec.key or f"{activity.info().workflow_id}/{activity.info().activity_id}")
        queries.insert_once(
            self.engine,
            AutomationEvent(
                fleet=bounded(rec.fleet, 255),
                kind=bounded(rec.kind, 64),
                node_name=rec.node,
                reason=bounded(rec.reason),
                actor=bounded(rec.actor, 255),
                idempotency_key=key,
            ),
            AutomationEvent.idempotency_key,
            key,
        )

    @activity.defn
    @heartbeating
    def idle_production_nodes(self, scope: SweepScope) -> list[str]:
        """The fleet's production nodes running no job: active checks never disturb training.
        One question per scheduler, not per node."""
        nodes = self._fleet_nodes(scope.fleet, state="production")
        busy: dict[str, set[str] | None] = {}
        for kind in sorted({n.scheduler for n in nodes} - {"none"}):
            try:
                busy[kind] = self.schedulers.get(kind).busy_nodes()
            except SchedulerError as exc:
                activity.logger.warning(
                    "%s cannot say which nodes are busy (%s): none of its nodes is checked", kind, exc
                )
                busy[kind] = None  # unknown means busy: never check a node that may be training
        return [
            n.name
            for n in nodes
            if n.scheduler == "none" or ((running := busy[n.scheduler]) is not None and n.name not in running)
        ]

    @activity.defn
    @heartbeating
    def running_jobs_on(self, name: str) -> list[str]:
        """Jobs running on the node, as its scheduler sees them."""
        node = self._node(name)
        if node.scheduler == "none":
            return []
        try:
            jobs = self.schedulers.get(node.scheduler).jobs_on_node(name)
        except SchedulerError as exc:
            raise ApplicationError(f"{node.scheduler}: {exc}", type="SchedulerError") from None
        return [j.job_id for j in jobs if j.state == "running"]

    @activity.defn
    def choose_remediation(self, choice: RemediationChoice) -> RemediationPlan:
        from fleetctl.remediation.events import Event
        from fleetctl.remediation.matching import runbook_for
        from fleetctl.remediation.runbooks import RUNBOOKS_DIR, load_runbooks
        from fleetctl.remediation.sandbox import RunbookError

        event = Event.from_dict(choice.event)
        try:
            books = load_runbooks(self.settings.runbooks_dir or RUNBOOKS_DIR)
        except RunbookError as exc:
            # A broken runbook set must not stop the node's lifecycle: it waits in maintenance.
            activity.logger.error("runbooks not loaded: %s", exc)
            return RemediationPlan(None, event.to_dict())
        book = runbook_for(books.values(), event, event.message)
        shadow = self.settings.remediation_shadow or self.settings.automation_dry_run
        return RemediationPlan(
            book.to_dict() if book else None,
            event.to_dict(),
            remediation_mode(dry_run=False, shadow=shadow),
            event.critical,
        )

    @activity.defn
    @heartbeating
    def resume_in_scheduler(self, name: str) -> None:
        node = self._node(name)
        if node.scheduler == "none":
            return
        try:
            self.schedulers.get(node.scheduler).resume(name)
        except FleetctlDoesNotOwnDrain as exc:
            raise ApplicationError(str(exc), type="DrainedBySomeoneElse", non_retryable=True) from None
        except SchedulerError as exc:
            raise ApplicationError(f"{node.scheduler} refused to resume {name}: {exc}", type="SchedulerError") from None
        # Back in production, idle: its island's pool of hot spares may take it.
        refill_spares(self.engine, self.settings, self.schedulers, f"{name} back in production", node.island)

    @activity.defn
    @heartbeating
    def cordon_in_scheduler(self, req: SchedulerCordon) -> str:
        """Take the node out of its scheduler's placement; idempotent. Returns the scheduler."""
        node = self._node(req.node)
        if node.scheduler != "none":
            try:
                # Bounded again here (the adapters bound it too): every scheduler, the simulated
                # one included, takes any cause a workflow hands it.
                self.schedulers.get(node.scheduler).drain(req.node, bounded(req.reason), critical=req.critical)
            except SchedulerError as exc:
                raise ApplicationError(
                    f"{node.scheduler} refused to drain {req.node}: {exc}", type="SchedulerError"
                ) from None
        # A hot spare that leaves production leaves its pool, and another takes its place. Only
        # then: a node running a job is being drained for a restart that should not wait.
        held = spare_store.held(self.engine)
        if req.node in held:
            refill_spares(self.engine, self.settings, self.schedulers, f"spare {req.node} drained", held[req.node])
        return node.scheduler

    @activity.defn
    @heartbeating
    def hold_in_scheduler(self, req: SchedulerHold) -> HeldNode:
        """Hold the node for fleetctl's checks (drain it with the hold's reason), then read
        its running jobs: read after the hold, they are all the jobs the checks could meet.
        Idempotent. A drain someone else made stays theirs, and fences the node as well. Not
        cordon_in_scheduler: a hot spare held for a check stays in its pool."""
        node = self._node(req.node)
        if node.scheduler == "none":
            return HeldNode(req.node)
        scheduler = self.schedulers.get(node.scheduler)
        try:
            seen = scheduler.node_state(req.node)
            if seen.drained and is_check_hold(seen.reason) and not same_reason(seen.reason, req.reason):
                return HeldNode(req.node, held_by=seen.reason or "")  # a recheck's, a sweep's: theirs
            scheduler.drain(req.node, bounded(req.reason))
            # Where work need not be a job (an unlabelled inference pod), all of it.
            running = work_on_node(scheduler, req.node)
        except SchedulerError as exc:
            raise ApplicationError(
                f"{node.scheduler} refused to hold {req.node}: {exc}", type="SchedulerError"
            ) from None
        return HeldNode(req.node, running)

    @activity.defn
    @heartbeating
    def release_hold(self, req: SchedulerHold) -> bool:
        """Lift the hold the caller took: only while the node is in production and its drain
        is still that hold. A drain taken since (the node's workflow draining it for a fault,
        an operator's) stays. True when released."""
        node = self._node(req.node)
        if node.scheduler == "none" or node.state != NodeState.PRODUCTION.value:
            return False
        scheduler = self.schedulers.get(node.scheduler)
        try:
            seen = scheduler.node_state(req.node)
            if not seen.drained or not same_reason(seen.reason, req.reason):
                return False
            scheduler.resume(req.node)
        except FleetctlDoesNotOwnDrain:
            return False  # someone else drained it between the read and the resume: theirs
        except SchedulerError as exc:
            raise ApplicationError(
                f"{node.scheduler} refused to release {req.node}: {exc}", type="SchedulerError"
            ) from None
        return True

    @activity.defn
    @heartbeating
    def drain_pods_on(self, req: PodDrainRequest) -> PodDrainOutcome:
        """One round of moving the cordoned node's pods off it, by the drain policy (a
        scheduler that places pods: Kubernetes); nothing to do, and nothing holding, for the others."""
        node = self._node(req.node)
        scheduler = None if node.scheduler == "none" else self.schedulers.get(node.scheduler)
        if not isinstance(scheduler, DrainsPods):
            return PodDrainOutcome(req.node)
        try:
            progress = scheduler.drain_pods(req.node, critical=req.critical, deadline_passed=req.deadline_passed)
        except SchedulerError as exc:
            raise ApplicationError(
                f"{node.scheduler} could not move the pods off {req.node}: {exc}", type="SchedulerError"
            ) from None
        return PodDrainOutcome(
            req.node, list(progress.evicted), list(progress.deleted), list(progress.holding), list(progress.left)
        )

    @activity.defn
    @heartbeating
    def report_state(self, req: SchedulerStateReport) -> None:
        """Say the node's lifecycle state on the scheduler's node object, where the scheduler
        has one to say it on (Kubernetes: label, conditions, an Event); placement is untouched."""
        node = self._node(req.node)
        scheduler = None if node.scheduler == "none" else self.schedulers.get(node.scheduler)
        if not isinstance(scheduler, ReportsNodeState):
            return
        try:
            scheduler.set_state(req.node, req.state, bounded(req.reason))
        except SchedulerError as exc:
            raise ApplicationError(
                f"{node.scheduler} could not show {req.node} as {req.state}: {exc}", type="SchedulerError"
            ) from None


class NodeCommandActivities:
    """Workflows cannot send Updates to other workflows; this activity does it for them. One
    call per attempt: a call that times out fails the attempt, and the caller's retry policy
    (a preset of workflows.definitions.shared) sends it again with the same request id,
    which the node's workflow answers once."""

    def __init__(self, client: Client):
        self.client = client

    @activity.defn
    async def command_node(self, cmd: TransitionRequest) -> NodeCommandOutcome:
        handle = self.client.get_workflow_handle(node_workflow_id(cmd.node))
        try:
            r = await handle.execute_update(TRANSITION_UPDATE, cmd, result_type=TransitionResult)
        except WorkflowUpdateFailedError as exc:
            # A refusal is an answer (the node moved on), not a failure to retry.
            return NodeCommandOutcome(cmd.node, False, message=failure_message(exc))
        except RPCError as exc:
            if "not found" in str(exc).lower() or "already completed" in str(exc).lower():
                return NodeCommandOutcome(
                    cmd.node,
                    False,
                    message=f"{cmd.node}: no lifecycle workflow is running (retired, or never imported)",
                )
            raise
        return NodeCommandOutcome(cmd.node, True, r.from_state, r.to_state)
