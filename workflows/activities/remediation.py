"""Activities of the Remediation workflow: record the run and its steps, render step
templates in the sandbox, act on the hardware (GPU reset, BMC reboot), notify, open RMAs.

Hardware actions reach a node through the executor registry (SSH, or the simulated node)
and its BMC through `fleetctl.bmc.bmc_for` (Redfish, or the simulated BMC); nothing here
knows which. The node must answer afterwards, or the step fails.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from fleetctl.bmc import bmc_for
from fleetctl.bmc.base import BmcError, BootNotSeen
from fleetctl.config import Settings, guard_policy
from fleetctl.db import queries
from fleetctl.db import remediation as db
from fleetctl.db.models import RmaRecord, utcnow
from fleetctl.durations import as_utc, parse_seconds
from fleetctl.executors.base import CommandResult, Executor, ExecutorError, NodeTarget
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.remediation.lemons import LemonPolicy
from fleetctl.remediation.runbooks import Step
from fleetctl.remediation.sandbox import TemplateRefused, evaluate, render_value
from fleetctl.text import bounded, failure_message
from fleetctl.workflows.activities.database import DatabaseActivities, stored_id
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for
from fleetctl.workflows.api import (
    ADMIT_UPDATE,
    ActionOutcome,
    AdmitRequest,
    BurstAnswer,
    BurstQuery,
    HardwareRequest,
    NotifyRequest,
    PhaseAccepted,
    PhaseRequest,
    PreparedStep,
    RmaDecided,
    RmaDecision,
    RmaOpened,
    RmaRequest,
    RunContext,
    RunEnd,
    RunStart,
    StepInput,
    StepRecord,
    node_workflow_id,
)

BOOT_ID_ARGV = ("cat", "/proc/sys/kernel/random/boot_id")
COMPUTE_APPS_ARGV = ("nvidia-smi", "--query-compute-apps=pid", "--format=csv,noheader")
POLL_S = 5.0


# ---- the activities -------------------------------------------------------------------------


class RemediationActivities(DatabaseActivities):
    def __init__(self, settings: Settings, executors: ExecutorRegistry, client: Client | None = None):
        super().__init__(settings)
        self.executors = executors
        self.client = client  # for asking node workflows to admit

    @activity.defn
    def begin_run(self, start: RunStart) -> RunContext:
        node = self._node(start.node)
        db.start_run(
            self.engine,
            run_key=start.run_key,
            node_name=start.node,
            runbook=start.runbook,
            event=start.event,
            mode=start.mode,
            actor=start.actor,
            started_at=start.started_at,
        )
        policy = LemonPolicy(self.settings.lemon_threshold, timedelta(days=self.settings.lemon_window_days))
        times = db.times_remediated(self.engine, start.node, policy, start.started_at)
        lemon = ""
        if start.mode == "live" and times >= policy.threshold:
            lemon = f"lemon: {policy.describe(times)} (limit {policy.threshold})"
        return RunContext(
            node={
                "name": node.name,
                "rack": node.rack,
                "profile": node.profile,
                "scheduler": node.scheduler,
                "labels": dict(node.labels),
                # Runbooks climb their ladder with it: 0 the first remediation since the node
                # was last in production, 1 when burn-in failed after one, and so on.
                "repeats": db.runs_since_production(self.engine, start.node, start.run_key),
            },
            state=node.state,
            lemon=lemon,
        )

    @activity.defn
    def node_state(self, name: str) -> str:
        return self._node(name).state

    @activity.defn
    def prepare_step(self, inp: StepInput) -> PreparedStep:
        """Evaluate `when` and render the parameters; a refused template is the step's failure."""
        step = Step.from_dict(inp.step)
        try:
            if step.when is not None and not evaluate(step.when, inp.context):
                return PreparedStep(run=False)
            params = {k: render_value(v, inp.context) for k, v in step.params.items()}
            for key in ("timeout", "idle_timeout", "duration"):
                if key in params:
                    params[key] = parse_seconds(params[key])
        except (TemplateRefused, ValueError) as exc:
            return PreparedStep(run=False, error=str(exc))
        return PreparedStep(run=True, params=params)

    @activity.defn
    def record_step(self, rec: StepRecord) -> None:
        db.record_step(
            self.engine,
            run_key=rec.run_key,
            node_name=rec.node,
            step_index=rec.index,
            name=rec.name,
            action=rec.action,
            status=rec.status,
            params=rec.params,
            detail=rec.detail,
            started_at=rec.started_at,
            finished_at=rec.finished_at,
        )

    @activity.defn
    def finish_run(self, end: RunEnd) -> None:
        db.finish_run(self.engine, end.run_key, end.status, end.outcome, end.finished_at)

    @activity.defn
    def gpu_reset(self, req: HardwareRequest) -> ActionOutcome:
        """Wait until no process uses the GPUs, then `nvidia-smi -r`."""
        node = self._node(req.node)
        target = target_for(node)
        executor = self.executors.for_target(target)
        deadline = time.monotonic() + float(req.params.get("idle_timeout", 1800))
        try:
            while (busy := _run(executor, target, COMPUTE_APPS_ARGV)).exit_status == 0 and busy.stdout.strip():
                if time.monotonic() >= deadline:
                    return ActionOutcome(
                        False,
                        f"GPUs still busy after {req.params.get('idle_timeout')} s: "
                        f"pids {', '.join(busy.stdout.split())}",
                    )
                activity.heartbeat("waiting for the GPUs to go idle")
                time.sleep(POLL_S)
            gpu = req.params.get("gpu")
            argv = ("nvidia-smi", "-r") + (("-i", str(gpu)) if gpu is not None else ())
            result = _run(executor, target, argv, timeout_s=300)
        except ExecutorError as exc:
            return ActionOutcome(False, f"{exc.kind}: {exc.message}")
        if result.exit_status != 0:
            return ActionOutcome(
                False, f"nvidia-smi -r exited {result.exit_status}: {_tail(result.stdout + result.stderr)}"
            )
        return ActionOutcome(True, _tail(result.stdout) or "GPU reset")

    @activity.defn
    def reboot(self, req: HardwareRequest) -> ActionOutcome:
        """Reboot through the BMC; done when the node answers with a new boot id."""
        node = self._node(req.node)
        target = target_for(node)
        executor = self.executors.for_target(target)
        timeout_s = float(req.params.get("timeout", 900))
        if not node.bmc_address:
            return ActionOutcome(False, "the node has no BMC address in the inventory")
        answered_before = True
        try:
            before = _run(executor, target, BOOT_ID_ARGV).stdout.strip()
        except ExecutorError as exc:
            before = f"unreachable ({exc.kind})"  # a hung node is why we reboot; the new id is still checked
            answered_before = False
        bmc_saw = ""
        try:
            bmc_for(node.name, node.bmc_address, self.settings).reboot(
                req.params.get("reset_type", "ForceRestart"), timeout_s=timeout_s, poll_s=min(POLL_S, timeout_s / 10)
            )
        except BootNotSeen as exc:
            if not answered_before:  # no boot id to compare: the BMC's record was the only evidence
                return ActionOutcome(False, f"BMC reboot failed: {exc}")
            # The reset was accepted; the node's boot id, not the BMC's polls, says whether it rebooted.
            bmc_saw = f" (the BMC showed no boot: {exc})"
        except (BmcError, ValueError) as exc:
            return ActionOutcome(False, f"BMC reboot failed: {exc}")
        deadline = time.monotonic() + timeout_s
        while True:
            activity.heartbeat("waiting for the node to answer")
            try:
                after = _run(executor, target, BOOT_ID_ARGV).stdout.strip()
                if after and after != before:
                    return ActionOutcome(True, f"rebooted through the BMC; boot id {before} -> {after}{bmc_saw}")
                problem = "boot id unchanged"
            except ExecutorError as exc:
                problem = f"{exc.kind}: {exc.message}"
            if time.monotonic() >= deadline:
                return ActionOutcome(
                    False, f"BMC reset done but the node did not come back within {timeout_s:g} s ({problem})"
                )
            time.sleep(POLL_S)

    @activity.defn
    async def admit_node(self, req: AdmitRequest) -> ActionOutcome:
        """Send the node back through burn-in and admission (its own workflow runs them)."""
        assert self.client is not None, "the worker hosts this activity with its client"
        handle = self.client.get_workflow_handle(node_workflow_id(req.node))
        try:
            accepted = await handle.execute_update(
                ADMIT_UPDATE,
                PhaseRequest(actor=req.actor, suite=req.suite, request_id=req.request_id),
                result_type=PhaseAccepted,
            )
        except WorkflowUpdateFailedError as exc:
            return ActionOutcome(False, failure_message(exc))
        return ActionOutcome(True, f"admission queued with suite {accepted.suite}")

    @activity.defn
    def notify(self, req: NotifyRequest) -> ActionOutcome:
        activity.logger.info("runbook notification for %s (%s): %s", req.node, req.severity, req.message)
        if not self.settings.webhook_url:
            return ActionOutcome(True, f"logged ({req.severity}): {req.message}")
        from fleetctl.connections.webhook_client import post_webhook

        status = post_webhook(
            self.settings.webhook_url,
            self.settings.webhook_token,
            {
                "kind": "notification",
                "node": req.node,
                "severity": req.severity,
                "message": req.message,
                "remediation_run": req.run_key,
            },
        )
        return ActionOutcome(True, f"{req.message} (webhook {status})")

    @activity.defn
    def open_rma(self, req: RmaRequest) -> RmaOpened:
        """The node's RMA record with its evidence bundle, sent to the webhook; or, held
        (req.held_reason), recorded as awaiting an operator's confirmation and sent nowhere."""
        from fleetctl.remediation import rma

        node = self._node(req.node)
        key = req.idempotency_key or f"{activity.info().workflow_id}/{activity.info().activity_id}"
        opened_at = utcnow()
        evidence = rma.build_evidence(
            rma_reason=req.reason,
            node=node,
            checks=queries.latest_checks(self.engine, node.name, limit=50),
            health_events=queries.health_events_in_service(self.engine, node.name, coded_only=False),
            remediations=[
                (run, db.steps(self.engine, run.run_key)) for run in db.runs(self.engine, node.name, limit=20)
            ],
            transitions=queries.node_events(self.engine, node.name, limit=50),
            opened_at=opened_at,
            secrets=(self.settings.bmc_password, self.settings.webhook_token),
        )
        record, created = db.open_rma(
            self.engine,
            node_name=node.name,
            reason=req.reason,
            remediation_run=req.remediation_run or None,
            evidence=evidence,
            evidence_markdown=rma.render_markdown(evidence),
            opened_by=req.actor,
            idempotency_key=key,
            held_reason=bounded(req.held_reason),
        )
        if created and not req.held_reason:
            return RmaOpened(stored_id(record.id), created, self._send(record))
        return RmaOpened(stored_id(record.id), created, record.webhook_status or "")

    @activity.defn
    def rma_burst(self, q: BurstQuery) -> BurstAnswer:
        """Whether the node's RMA waits for an operator (rma.burst_verdict), from the fleet's
        critical health events around the node's own and its nodes in production."""
        from fleetctl.checks.xid import xid_action
        from fleetctl.remediation import rma

        policy = guard_policy(self.settings, self.settings.fleet)
        # The node's own critical event since it entered service; none: its RMA is a check's verdict.
        event_at = q.event_at or next(
            (
                as_utc(ev.at).timestamp()
                for ev in queries.health_events_in_service(self.engine, q.node)
                if ev.code is not None and xid_action(ev.code).severity == "critical"
            ),
            None,
        )
        fleet = self._fleet_nodes(self.settings.fleet)
        names = {n.name for n in fleet}
        since = datetime.fromtimestamp((event_at or q.now) - policy.storm_window_s, UTC)
        critical = [
            (ev.node_name, as_utc(ev.at).timestamp())
            for ev in db.coded_health_events_since(self.engine, since)
            if ev.node_name in names and ev.code is not None and xid_action(ev.code).severity == "critical"
        ]
        verdict = rma.burst_verdict(
            policy, critical, [n.name for n in fleet if n.state == NodeState.PRODUCTION.value], q.node, event_at, q.now
        )
        return BurstAnswer(verdict.hold, event_at or 0.0, verdict.wait_until or 0.0)

    @activity.defn
    def decide_rma(self, d: RmaDecision) -> RmaDecided:
        """An operator's answer to a held RMA, recorded; a confirmed one is sent as an opened
        RMA is (the webhook)."""
        try:
            record = db.decide_rma(self.engine, d.rma_id, d.confirm, d.actor, d.reason)
        except (LookupError, db.RmaStatusConflict) as exc:
            raise ApplicationError(str(exc).strip("'\""), type="RmaStatusConflict", non_retryable=True) from exc
        if not d.confirm:
            why = f": {d.reason}" if d.reason else ""
            return RmaDecided(stored_id(record.id), record.status, f"RMA {record.id} rejected by {d.actor}{why}")
        status = record.webhook_status or self._send(record)
        return RmaDecided(
            stored_id(record.id),
            record.status,
            f"RMA {record.id} confirmed by {d.actor}" + (f" (webhook {status})" if status else ""),
        )

    def _send(self, record: RmaRecord) -> str:
        """Post the opened RMA's bundle to the configured webhook; its status ("" without one)."""
        from fleetctl.connections.webhook_client import post_webhook

        if not self.settings.webhook_url:
            return ""
        status = post_webhook(
            self.settings.webhook_url,
            self.settings.webhook_token,
            {"kind": "rma", "rma_id": record.id, "evidence": record.evidence},
        )
        db.set_webhook_status(self.engine, stored_id(record.id), status)
        return status


def _run(executor: Executor, target: NodeTarget, argv: Sequence[str], timeout_s: float = 60.0) -> CommandResult:
    return executor.run(target, list(argv), timeout_s)


def _tail(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text[-limit:]
