"""Pre- and post-job checks: a short suite run on a node just before a job starts there (the
Slurm Prolog, through `fleetctl node prolog`) or just after one ended (the Epilog, `fleetctl
node epilog`: a node that broke during a long job is caught before the next). Not an activity, but the same I/O: the job waits
for the answer, so the checks run in the calling process, one after another, each recorded
as a check run; only a failure goes to the node's workflow, as a drain through the capacity
guard (workflows.client)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import TYPE_CHECKING, Any

from fleetctl.checks import judge, load_profile
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.result import CheckResult, Status
from fleetctl.checks.suites import load_suite
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.models import CheckRun, utcnow
from fleetctl.executors.base import ExecutorError
from fleetctl.remediation.events import Event, EventKind
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


class JobGate(str, Enum):
    """When around a job the suite runs: the runs' ids, the drain's cause and actor say it."""

    PROLOG = "prolog"  # before the job starts on the node
    EPILOG = "epilog"  # after it ended there


@dataclass(frozen=True)
class PrejobFinding:
    node: str
    suite: str
    status: str  # "pass", "fail" (a check failed), "error" (none failed, one could not be judged)
    check: str = ""  # the check that failed, or the first that could not be judged
    reason: str = ""
    checked: list[str] = field(default_factory=list)
    gate: JobGate = JobGate.PROLOG

    @property
    def cause(self) -> str:
        return f"{self.gate.value} {self.suite}: {self.check}: {self.reason}"

    @property
    def event(self) -> dict[str, Any]:
        """The failed check as the event the drain acts on (recorded as the failure `check <name>`)."""
        return Event(EventKind.CHECK, check=self.check, status="fail", message=self.reason).to_dict()


def run_prejob_suite(
    settings: Settings, engine: Engine, node_name: str, suite: str, run_id: str, gate: JobGate = JobGate.PROLOG
) -> PrejobFinding:
    """Run `suite` on the node, stopping at the first failure. LookupError for an unknown
    node; checks.suites.SuiteError for an unknown suite."""
    node = queries.get_node(engine, node_name)
    if node is None:
        raise LookupError(f"unknown node: {node_name}")
    checks = load_suite(suite, settings.suites_dir or None).checks
    profile = load_profile(node.profile, settings.profiles_dir or None) if node.profile else None
    target = target_for(node)
    executor = ExecutorRegistry(settings).for_target(target)
    first_error: tuple[str, str] | None = None
    checked = []
    for check in checks:
        spec = CHECKS[check]
        if not spec.applies_to(profile):
            continue  # not the node's to be judged by (imex on HGX): not run, not recorded, not listed
        started = utcnow()
        raw, truncated, error_kind = "", False, None
        try:
            result = executor.run(target, spec.argv_for(profile), timeout_s=max(30.0, spec.typical_duration_s * 3))
            raw, truncated = result.stdout + (("\n" + result.stderr) if result.stderr else ""), result.truncated
            judged = judge(spec.kind, result.stdout, node.profile, settings.profiles_dir or None)
            if judged.status is Status.ERROR and result.stderr.strip():
                judged = judge(
                    spec.kind, f"{result.stdout}\n{result.stderr}", node.profile, settings.profiles_dir or None
                )
        except ExecutorError as exc:
            judged, error_kind = CheckResult(Status.ERROR, {}, [], f"{exc.kind}: {exc.message}"), exc.kind
        key = f"{gate.value}/{node_name}/{run_id}/{check}"
        queries.insert_once(
            engine,
            CheckRun(
                node_name=node_name,
                check_name=check,
                kind=spec.kind,
                suite=suite,
                status=judged.status.value,
                metrics=judged.to_dict()["metrics"],
                findings=judged.to_dict()["findings"],
                reason=judged.reason,
                raw_output=raw,
                output_truncated=truncated,
                error_kind=error_kind or ("unjudgeable" if judged.status is Status.ERROR else None),
                started_at=started,
                finished_at=utcnow(),
                workflow_id=f"{gate.value}/{run_id}",
                idempotency_key=key,
            ),
            CheckRun.idempotency_key,
            key,
        )
        checked.append(check)
        if judged.status is Status.FAIL:
            return PrejobFinding(node_name, suite, "fail", check, judged.reason, checked, gate)
        if judged.status is Status.ERROR and first_error is None:
            first_error = (check, judged.reason)
    if first_error is not None:
        return PrejobFinding(node_name, suite, "error", *first_error, checked, gate)
    return PrejobFinding(node_name, suite, "pass", checked=checked, gate=gate)
