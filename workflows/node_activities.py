"""Activities of the node phases: run a check, judge admission, record health events,
and the fleet facts the capacity guard and the sweeps decide on."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone

from temporalio import activity
from temporalio.exceptions import ApplicationError

from checks import judge
from checks.catalog import CHECKS
from checks.result import CheckResult, Status
from fleetctl.capacity import FleetSnapshot, snapshot_from_states
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.models import AutomationEvent, CheckRun, HealthEvent, utcnow
from fleetctl.executors.base import ExecutorError
from fleetctl.health import judge_health_event, plausible_time
from fleetctl.schedulers.base import FleetctlDoesNotOwnDrain, SchedulerError
from workflows.activities import DatabaseActivities
from workflows.executor_registry import ExecutorRegistry, target_for
from workflows.messages import HealthEventInput  # defined there (light, for the CLI); re-exported here
from workflows.scheduler_registry import SchedulerRegistry

HEARTBEAT_EVERY_S = 2.0



@dataclass
class CheckRequest:
    node: str
    check: str
    suite: str = ""
    # Stable per step of the caller, so a retried activity writes one row.
    run_key: str = ""
    # Executor errors and unjudgeable output are retried this many times in all; only then
    # is the result recorded, as `error` (never as a failed node).
    max_attempts: int = 3


@dataclass
class CheckOutcome:
    node: str
    check: str
    status: str
    reason: str
    metrics: dict = field(default_factory=dict)
    error_kind: str | None = None
    check_run_id: int | None = None


@dataclass
class AdmissionRequest:
    node: str
    check_run_ids: list[int]


@dataclass
class AdmissionVerdict:
    node: str
    passed: bool
    reason: str
    stragglers: list[str] = field(default_factory=list)


@dataclass
class HealthEventVerdict:
    node: str
    severity: str
    action: str
    drain_now: bool
    critical: bool
    reason: str


@dataclass
class AutomationRecord:
    kind: str
    reason: str
    actor: str
    node: str | None = None
    fleet: str = "default"
    key: str = ""


@dataclass
class NodeFacts:
    name: str
    rack: str
    profile: str
    scheduler: str
    state: str


@dataclass
class SweepScope:
    fleet: str = "default"
    suite: str = "quick"


@dataclass
class RemediationChoice:
    node: str
    event: dict  # fleetctl.runbooks.Event.to_dict()


@dataclass
class RemediationPlan:
    runbook: dict | None  # Runbook.to_dict(), None when no runbook handles the event
    event: dict = field(default_factory=dict)  # the event in the runbooks' own form
    mode: str = "live"
    critical: bool = False


@dataclass
class SchedulerCordon:
    node: str
    reason: str


class NodeActivities(DatabaseActivities):
    def __init__(self, settings: Settings, executors: ExecutorRegistry, schedulers: SchedulerRegistry):
        super().__init__(settings)
        self.executors = executors
        self.schedulers = schedulers

    @activity.defn
    def node_facts(self, name: str) -> NodeFacts:
        n = self._node(name)
        return NodeFacts(n.name, n.rack, n.profile, n.scheduler, n.state)

    @activity.defn
    def suite_checks(self, scope: SweepScope) -> list[str]:
        from checks.suites import SuiteError, load_suite

        try:
            return list(load_suite(scope.suite, self.settings.suites_dir or None).checks)
        except SuiteError as exc:
            raise ApplicationError(str(exc), type="UnknownSuite", non_retryable=True) from None

    @activity.defn
    def run_check(self, req: CheckRequest) -> CheckOutcome:
        info = activity.info()
        key = req.run_key or f"{info.workflow_id}/{info.activity_id}"
        done = queries.check_run_by_key(self.engine, key)
        if done is not None:
            return _outcome(done)
        node = self._node(req.node)
        spec = CHECKS.get(req.check)
        if spec is None:
            raise ApplicationError(f"unknown check {req.check}", type="UnknownCheck", non_retryable=True)
        target = target_for(node)
        started = utcnow()
        raw, truncated, error_kind = "", False, None
        last_attempt = info.attempt >= req.max_attempts
        try:
            result = _run_with_heartbeat(self.executors.for_target(target), target, spec.argv,
                                         timeout_s=max(30.0, spec.typical_duration_s * 3))
            raw, truncated = result.stdout + (("\n" + result.stderr) if result.stderr else ""), result.truncated
            judged = judge(spec.kind, result.stdout, node.profile)
            if judged.status is Status.ERROR and result.stderr.strip():
                # Some tools say why they failed on stderr only (perftest's "Couldn't ...").
                judged = judge(spec.kind, f"{result.stdout}\n{result.stderr}", node.profile)
            if judged.status is Status.ERROR and not last_attempt:
                raise ApplicationError(f"{req.node} {req.check}: {judged.reason}", type="UnjudgeableOutput")
        except ExecutorError as exc:
            if not last_attempt:
                raise ApplicationError(str(exc), type=f"Executor.{exc.kind}") from None
            judged, error_kind = CheckResult(Status.ERROR, {}, [], f"{exc.kind}: {exc.message}"), exc.kind
        run = CheckRun(
            node_name=req.node, check_name=req.check, kind=spec.kind, suite=req.suite, status=judged.status.value,
            metrics=judged.to_dict()["metrics"], findings=judged.to_dict()["findings"], reason=judged.reason,
            raw_output=raw, output_truncated=truncated, error_kind=error_kind or (
                "unjudgeable" if judged.status is Status.ERROR else None),
            started_at=started, finished_at=utcnow(), workflow_id=info.workflow_id, idempotency_key=key,
        )
        return _outcome(queries.insert_once(self.engine, run, CheckRun.idempotency_key, key))

    @activity.defn
    def judge_admission(self, req: AdmissionRequest) -> AdmissionVerdict:
        """Burn-in results against the profile (already in their status) and against the fleet."""
        from checks.stragglers import STRAGGLER_METRICS, find_stragglers

        node = self._node(req.node)
        runs = queries.check_runs(self.engine, req.check_run_ids)
        bad = [r for r in runs if r.status not in ("pass", "warn")]
        if bad:
            return AdmissionVerdict(req.node, False, f"{bad[0].check_name}: {bad[0].status}: {bad[0].reason}")
        stragglers = []
        for check, metric, higher in STRAGGLER_METRICS:
            mine = next((r.metrics[metric] for r in reversed(runs) if r.check_name == check
                         and isinstance(r.metrics.get(metric), (int, float))), None)
            if mine is None:
                continue
            peers = queries.peer_metrics(self.engine, node.profile, check, metric, exclude=req.node)
            verdict = find_stragglers({**peers, req.node: float(mine)}, higher_is_better=higher)[req.node]
            if verdict.straggler:
                stragglers.append(f"{check} {metric}: {verdict.reason}")
        if stragglers:
            return AdmissionVerdict(req.node, False, f"straggler: {stragglers[0]}", stragglers)
        return AdmissionVerdict(req.node, True, f"burn-in passed ({len(runs)} checks) and within the fleet")

    @activity.defn
    def record_health_event(self, ev: HealthEventInput) -> HealthEventVerdict:
        from checks.xid import xid_action

        # Not the sender's clock alone: one days off would move the event out of (or into)
        # the escalation window of the events other senders reported. An event resent (after
        # a laptop slept, say) keeps the time it was first recorded with.
        now = plausible_time(ev.at, ev.received_at or time.time())
        key = ev.event_id or f"{ev.node}/{ev.source}/{ev.code}/{now}"
        now = queries.health_event_time(self.engine, key) or now
        earlier = [] if ev.code is None else queries.health_event_times(self.engine, ev.node, ev.code, key)
        if ev.code is None:
            verdict_sev, verdict_action, drain, reason = "warning", "reset_gpu", False, ev.message or "operator report"
            critical = False
        else:
            v = judge_health_event(ev.code, earlier, now)
            verdict_sev, verdict_action, drain, reason = v.severity, v.action, v.drain_now, v.reason
            critical = xid_action(ev.code).severity == "critical"
        queries.insert_once(self.engine, HealthEvent(
            node_name=ev.node, source=ev.source, code=ev.code, severity=verdict_sev, action=verdict_action,
            message=ev.message, at=datetime.fromtimestamp(now, timezone.utc), idempotency_key=key,
        ), HealthEvent.idempotency_key, key)
        return HealthEventVerdict(ev.node, verdict_sev, verdict_action, drain, critical, reason)

    @activity.defn
    def fleet_snapshot(self, fleet: str) -> FleetSnapshot:
        return snapshot_from_states([(n.rack, n.state) for n in queries.list_nodes(self.engine)])

    @activity.defn
    def state_versions(self, names: list[str]) -> dict[str, int]:
        """Each node's state version: it changes with every transition of the node."""
        return {n.name: n.state_version for n in queries.nodes_named(self.engine, names)}

    @activity.defn
    def record_automation_event(self, rec: AutomationRecord) -> None:
        key = rec.key or f"{activity.info().workflow_id}/{activity.info().activity_id}"
        queries.insert_once(self.engine, AutomationEvent(fleet=rec.fleet, kind=rec.kind, node_name=rec.node,
                                                         reason=rec.reason, actor=rec.actor, idempotency_key=key),
                            AutomationEvent.idempotency_key, key)

    @activity.defn
    def idle_production_nodes(self, scope: SweepScope) -> list[str]:
        """Production nodes running no job: active checks never disturb training. One question
        per scheduler, not per node."""
        nodes = queries.list_nodes(self.engine, state="production")
        busy: dict[str, set[str] | None] = {}
        for kind in sorted({n.scheduler for n in nodes} - {"none"}):
            try:
                busy[kind] = self.schedulers.get(kind).busy_nodes()
            except SchedulerError as exc:
                activity.logger.warning("%s cannot say which nodes are busy (%s): none of its nodes is checked", kind, exc)
                busy[kind] = None  # unknown means busy: never check a node that may be training
        return [n.name for n in nodes
                if n.scheduler == "none" or (busy[n.scheduler] is not None and n.name not in busy[n.scheduler])]

    @activity.defn
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
        from fleetctl.runbooks import RUNBOOKS_DIR, Event, RunbookError, load_runbooks, runbook_for
        from workflows.remediation_starter import is_critical, mode_for

        event = Event.from_dict(choice.event)
        try:
            books = load_runbooks(self.settings.runbooks_dir or RUNBOOKS_DIR)
        except RunbookError as exc:
            # A broken runbook set must not stop the node's lifecycle: it waits in maintenance.
            activity.logger.error("runbooks not loaded: %s", exc)
            return RemediationPlan(None, event.to_dict())
        book = runbook_for(books.values(), event, event.message)
        return RemediationPlan(book.to_dict() if book else None, event.to_dict(), mode_for(self.settings, dry_run=False),
                               is_critical(event))

    @activity.defn
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

    @activity.defn
    def cordon_in_scheduler(self, req: SchedulerCordon) -> str:
        """Take the node out of its scheduler's placement; idempotent. Returns the scheduler."""
        node = self._node(req.node)
        if node.scheduler != "none":
            try:
                self.schedulers.get(node.scheduler).drain(req.node, req.reason)
            except SchedulerError as exc:
                raise ApplicationError(f"{node.scheduler} refused to drain {req.node}: {exc}", type="SchedulerError") from None
        return node.scheduler


def _outcome(run: CheckRun) -> CheckOutcome:
    return CheckOutcome(run.node_name, run.check_name, run.status, run.reason, dict(run.metrics), run.error_kind, run.id)


def _run_with_heartbeat(executor, target, argv, timeout_s: float):
    """Run the (blocking) command in a thread and heartbeat while it runs."""
    box: dict = {}

    def body() -> None:
        try:
            box["result"] = executor.run(target, argv, timeout_s)
        except BaseException as exc:  # noqa: BLE001 - re-raised in the activity thread
            box["error"] = exc

    thread = threading.Thread(target=body, name=f"check-{target.name}", daemon=True)
    thread.start()
    while thread.is_alive():
        thread.join(HEARTBEAT_EVERY_S)
        if thread.is_alive():
            activity.heartbeat()
    if "error" in box:
        raise box["error"]
    return box["result"]
