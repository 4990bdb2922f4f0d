"""Activities of checks: which checks a suite runs, run one on a node (recorded once per
run key, heartbeating while it runs), judge a burn-in for admission, and judge a node in
service against its peers."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.checks import judge, load_profile
from fleetctl.checks.catalog import CHECKS, NOT_APPLICABLE, CheckSpec
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Status
from fleetctl.checks.transcript import with_stderr
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.models import CheckRun, Node, utcnow
from fleetctl.executors.base import CommandResult, Executor, ExecutorError, NodeTarget
from fleetctl.workflows.activities.check_plans import NoPartner, choose_partners, run_pairs, run_rails
from fleetctl.workflows.activities.database import DatabaseActivities, calling_workflow_id
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for
from fleetctl.workflows.activities.heartbeat import run_heartbeating
from fleetctl.workflows.api import (
    AdmissionRequest,
    AdmissionVerdict,
    CheckOutcome,
    CheckRequest,
    PeerVerdict,
    SweepScope,
)


class CheckActivities(DatabaseActivities):
    def __init__(self, settings: Settings, executors: ExecutorRegistry):
        super().__init__(settings)
        self.executors = executors

    @activity.defn
    def suite_checks(self, scope: SweepScope) -> list[str]:
        from fleetctl.checks.suites import SuiteError, load_suite

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
        # The operator's profiles too, as the judge reads them.
        profile = load_profile(node.profile, self.settings.profiles_dir or None) if node.profile else None
        if profile is not None and not spec.applies_to(profile):  # a profile unknown: it applies
            # Not run and not recorded: no row says `pass`, so admission (which reads the recorded
            # runs), placement and the fleet's figures never count it. The outcome is one every
            # caller passes over (a pass with no run behind it), so suites list the check for all.
            return CheckOutcome(
                req.node,
                req.check,
                Status.PASS.value,
                f"{NOT_APPLICABLE}: profile {profile.name} has no multi-node NVLink domain",
            )
        started = utcnow()
        raw, truncated, error_kind = "", False, None
        last_attempt = info.attempt >= req.max_attempts
        try:
            result = self._execute(spec, node, profile)
            raw, truncated = result.stdout + (("\n" + result.stderr) if result.stderr else ""), result.truncated
            judged = judge(spec.kind, result.stdout, node.profile, self.settings.profiles_dir or None)
            if judged.status is Status.ERROR and result.stderr.strip():
                # Some tools say why they failed on stderr only (perftest's "Couldn't ...").
                judged = judge(
                    spec.kind,
                    with_stderr(result.stdout, result.stderr),
                    node.profile,
                    self.settings.profiles_dir or None,
                )
            if judged.status is Status.ERROR and not last_attempt:
                raise ApplicationError(f"{req.node} {req.check}: {judged.reason}", type="UnjudgeableOutput")
        except ExecutorError as exc:
            if not last_attempt:
                raise ApplicationError(str(exc), type=f"Executor.{exc.kind}") from None
            judged, error_kind = CheckResult(Status.ERROR, {}, [], f"{exc.kind}: {exc.message}"), exc.kind
        except NoPartner as exc:
            judged, error_kind = CheckResult(Status.ERROR, {}, [], str(exc)), "no_partner"
        run = CheckRun(
            node_name=req.node,
            check_name=req.check,
            kind=spec.kind,
            suite=req.suite,
            status=judged.status.value,
            metrics=judged.to_dict()["metrics"],
            findings=judged.to_dict()["findings"],
            reason=judged.reason,
            raw_output=raw,
            output_truncated=truncated,
            error_kind=error_kind or ("unjudgeable" if judged.status is Status.ERROR else None),
            started_at=started,
            finished_at=utcnow(),
            workflow_id=calling_workflow_id(),
            idempotency_key=key,
        )
        return _outcome(queries.insert_once(self.engine, run, CheckRun.idempotency_key, key))

    def _execute(self, spec: CheckSpec, node: Node, profile: GpuProfile | None) -> CommandResult:
        """The check's command on the node (with the profile's GPU count where the tool takes
        one), or its plan's commands (check_plans)."""
        timeout_s = max(30.0, spec.typical_duration_s * 3)

        def run_on(target: NodeTarget, argv: Sequence[str]) -> CommandResult:
            return _run_with_heartbeat(self.executors.for_target(target), target, argv, timeout_s)

        if spec.plan == "bmc":
            return self._read_bmc(spec, node)
        target = target_for(node)
        if spec.plan == "rails":
            return run_rails(lambda argv: run_on(target, argv), spec, profile)
        if spec.plan == "pairs":
            if profile is None:
                raise ApplicationError(
                    f"{node.name} has no GPU profile: its pairs cannot be sized",
                    type="UnknownProfile",
                    non_retryable=True,
                )
            nodes = {n.name: n for n in queries.list_nodes(self.engine)}
            partners = choose_partners(node, list(nodes.values()))
            return run_pairs(
                lambda name, argv: run_on(target_for(nodes[name]), argv), spec, node.name, partners, profile.gpu_count
            )
        return run_on(target, spec.argv_for(profile))

    def _read_bmc(self, spec: CheckSpec, node: Node) -> CommandResult:
        """A chassis check: the node's BMC read for its report, as a command's output (a BMC
        that cannot be read is a failed command: its words are the check's error)."""
        from fleetctl.bmc import bmc_for
        from fleetctl.bmc.base import BmcError

        if not node.bmc_address:
            raise ApplicationError(f"{node.name} has no BMC address in the inventory", type="NoBmc", non_retryable=True)
        started = time.monotonic()
        try:
            text, status, error = bmc_for(node.name, node.bmc_address, self.settings).health_report(spec.argv[1]), 0, ""
        except BmcError as exc:
            text, status, error = "", 1, str(exc)
        return CommandResult(spec.argv, status, text, error, time.monotonic() - started)

    @activity.defn
    def judge_admission(self, req: AdmissionRequest) -> AdmissionVerdict:
        """Burn-in results against the profile (already in their status) and against the fleet."""
        node = self._node(req.node)
        runs = queries.check_runs(self.engine, req.check_run_ids)
        bad = [r for r in runs if r.status not in ("pass", "warn")]
        if bad:
            return AdmissionVerdict(
                req.node,
                False,
                f"{bad[0].check_name}: {bad[0].status}: {bad[0].reason}",
                failed_check=bad[0].check_name,
            )
        stragglers: list[tuple[str, str]] = []  # (check, finding)
        for check in dict.fromkeys(r.check_name for r in runs):
            last = next(r for r in reversed(runs) if r.check_name == check)
            stragglers += [(check, finding) for finding in self._straggler_findings(node, check, last.metrics)]
        if stragglers:
            (check, finding), *_ = stragglers
            return AdmissionVerdict(req.node, False, f"straggler: {finding}", [f for _, f in stragglers], check)
        return AdmissionVerdict(req.node, True, f"burn-in passed ({len(runs)} checks) and within the fleet")

    @activity.defn
    def judge_against_peers(self, outcome: CheckOutcome) -> PeerVerdict:
        """A passed check of a node in service against the latest of its peers of the same
        profile: a sweep's absolute floors do not see a node that degraded to well below a
        fleet that is well above them."""
        findings = self._straggler_findings(self._node(outcome.node), outcome.check, outcome.metrics)
        if findings:
            return PeerVerdict(outcome.node, outcome.check, True, f"straggler: {'; '.join(findings)}")
        return PeerVerdict(outcome.node, outcome.check, False, "within its peers")

    def _straggler_findings(self, node: Node, check: str, metrics: dict[str, Any]) -> list[str]:
        """What is off on `check`'s straggler metrics (checks.stragglers.STRAGGLER_METRICS) of
        one run, compared with the same profile's nodes; a metric the run lacks says nothing."""
        from fleetctl.checks.stragglers import STRAGGLER_METRICS, find_stragglers

        findings = []
        for metric, higher in ((m, h) for c, m, h in STRAGGLER_METRICS if c == check):
            mine = metrics.get(metric)
            if not isinstance(mine, (int, float)) or isinstance(mine, bool):
                continue
            peers = queries.peer_metrics(self.engine, node.profile, check, metric, exclude=node.name)
            verdict = find_stragglers({**peers, node.name: float(mine)}, higher_is_better=higher)[node.name]
            if verdict.straggler:
                findings.append(f"{check} {metric}: {verdict.reason}")
        return findings


def _outcome(run: CheckRun) -> CheckOutcome:
    return CheckOutcome(
        run.node_name, run.check_name, run.status, run.reason, dict(run.metrics), run.error_kind, run.id
    )


def _run_with_heartbeat(executor: Executor, target: NodeTarget, argv: Sequence[str], timeout_s: float) -> CommandResult:
    """Run the (blocking) command and heartbeat while it runs."""
    return run_heartbeating(lambda: executor.run(target, argv, timeout_s))
