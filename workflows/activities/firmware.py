"""Activities of the FirmwareRollout workflow: drift from the baseline, apply updates,
record progress. Updates go through the node's BMC (`fleetctl.bmc.bmc_for`: Redfish
SimpleUpdate, or the simulated BMC) or an SSH command from the baseline's template."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.bmc import bmc_for
from fleetctl.bmc.base import BmcError
from fleetctl.checks import judge
from fleetctl.checks.result import CheckResult, Status
from fleetctl.config import Settings
from fleetctl.db import firmware as db
from fleetctl.db import queries
from fleetctl.db.models import Node, utcnow
from fleetctl.executors.base import ExecutorError
from fleetctl.remediation import firmware
from fleetctl.workflows.activities.database import DatabaseActivities, stored_id
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for
from fleetctl.workflows.api import DriftReport, DriftRequest, NodeResult, RolloutProgress, UpdateOutcome

UPDATE_TIMEOUT_S = 3600.0
# The BMC's firmware is read inside node_drift: at most this share of the activity's
# start-to-close timeout, leaving the rest for the database and the comparison.
BMC_READ_SHARE = 0.5
DEFAULT_DRIFT_TIMEOUT = timedelta(seconds=10)  # QUICK's, for a caller that sets none


class FirmwareActivities(DatabaseActivities):
    def __init__(self, settings: Settings, executors: ExecutorRegistry):
        super().__init__(settings)
        self.executors = executors

    def _baseline(self, baseline_id: int) -> firmware.Baseline:
        row = db.get_baseline(self.engine, baseline_id)
        if row is None:
            raise ApplicationError(f"no firmware baseline {baseline_id}", type="UnknownBaseline", non_retryable=True)
        return firmware.Baseline.from_dict(row.document)

    @activity.defn
    def node_drift(self, req: DriftRequest) -> DriftReport:
        node = queries.get_node(self.engine, req.node)
        if node is None:
            raise ApplicationError(f"unknown node {req.node}", type="UnknownNode", non_retryable=True)
        self._read_bmc_firmware(node)
        reported = db.reported_components(self.engine, req.node).get(req.node)
        found = firmware.node_drift(self._baseline(req.baseline_id), node.name, node.profile, reported)
        return DriftReport(
            node.name,
            found.status,
            [f"{d.component or d.pattern}: {d.actual or 'not reported'} -> {d.expected}" for d in found.drifts],
            {d.component or d.pattern: [d.actual, d.expected] for d in found.drifts},
        )

    def _read_bmc_firmware(self, node: Node) -> None:
        """Record the firmware the node's BMC reports (its own, the HMC's, the tray's), so the
        drift covers it beside the checks' VBIOS and ConnectX. Read here, in the activity that
        compares, so no workflow runs anything new. It may take a share of this activity's
        own time only; a BMC that does not answer in it is recorded as an error run, and the
        drift goes on with what was recorded before."""
        if not node.bmc_address:
            return
        info = activity.info()
        budget_s = (info.start_to_close_timeout or DEFAULT_DRIFT_TIMEOUT).total_seconds() * BMC_READ_SHARE
        started = utcnow()
        try:
            text = bmc_for(node.name, node.bmc_address, self.settings).firmware_report(budget_s)
        except (BmcError, ValueError) as exc:
            text, result = "", CheckResult(Status.ERROR, {}, [], f"BMC firmware not read: {exc}")
        else:
            if not text:
                return  # a BMC that reports no firmware of its own (the simulated one)
            result = judge("firmware", text, node.profile, self.settings.profiles_dir or None)
        key = f"{info.workflow_run_id}/{info.activity_id}/{info.attempt}/{db.FirmwareSource.BMC.value}"
        db.record_firmware(
            self.engine, node.name, db.FirmwareSource.BMC, result, text, started, info.workflow_id or "", key
        )

    @activity.defn
    def current_baseline_id(self, _fleet: str) -> int:
        """The baseline set last (`firmware baseline set`); 0 when none is set."""
        baseline = db.current_baseline(self.engine)
        return stored_id(baseline.id) if baseline else 0

    @activity.defn
    def apply_updates(self, req: DriftRequest) -> UpdateOutcome:
        """Apply every baseline entry the node drifts from; the caller re-checks afterwards."""
        node = self._node(req.node)
        baseline = self._baseline(req.baseline_id)
        reported = db.reported_components(self.engine, req.node).get(req.node) or {}
        drifts = firmware.drift(baseline.profiles.get(node.profile, ()), reported)
        specs = firmware.updates_for(baseline, node.profile, drifts)
        if not specs:
            return UpdateOutcome(True, "nothing to update")
        done: list[str] = []
        for spec in specs:
            activity.heartbeat(f"updating {spec.pattern}")
            problem = self._update(node, spec)
            if problem:
                return UpdateOutcome(
                    False,
                    f"{spec.pattern} -> {spec.version}: {problem}" + (f" (after {', '.join(done)})" if done else ""),
                )
            done.append(f"{spec.pattern} -> {spec.version}")
        return UpdateOutcome(True, "; ".join(done))

    def _update(self, node: Node, spec: firmware.ComponentSpec) -> str:
        target = target_for(node)
        executor = self.executors.for_target(target)
        if spec.update is None:
            return "the baseline gives no update path for this component"
        if spec.update.method == "redfish":
            if not node.bmc_address:
                return "the node has no BMC address in the inventory"
            try:
                bmc_for(node.name, node.bmc_address, self.settings).update_firmware(
                    spec.update.image, spec.update.targets, timeout_s=UPDATE_TIMEOUT_S
                )
            except (BmcError, ValueError) as exc:
                return str(exc)
            return ""
        argv = firmware.update_argv(spec, {"node": node.name})
        try:
            result = executor.run(target, argv, UPDATE_TIMEOUT_S)
        except ExecutorError as exc:
            return f"{exc.kind}: {exc.message}"
        if result.exit_status != 0:
            return f"{argv[0]} exited {result.exit_status}: {' '.join((result.stderr or result.stdout).split())[-200:]}"
        return ""

    @activity.defn
    def record_node(self, r: NodeResult) -> None:
        db.record_node(self.engine, r.rollout_id, r.node, r.batch_index, r.status, r.detail, r.components)

    @activity.defn
    def record_progress(self, p: RolloutProgress) -> None:
        db.update_rollout(
            self.engine, p.rollout_id, status=p.status, total=p.total, done=p.done, failed=p.failed, detail=p.detail
        )
