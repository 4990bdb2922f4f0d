"""Activities of a validation at cluster scale: which nodes it runs across, and one all-reduce
across a set of them, judged against the profile's multi-node floor and recorded as a check
run (once per run key) of `nccl-validate` on the node MPI launched it on, the run's nodes in
its metrics."""

from __future__ import annotations

from datetime import timedelta

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.checks import judge
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.nccl import hosts_argv
from fleetctl.checks.profiles import load_profile
from fleetctl.checks.result import CheckResult, Status
from fleetctl.checks.transcript import with_stderr
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.models import CheckRun, utcnow
from fleetctl.executors.base import ExecutorError
from fleetctl.inventory.hostlist import compress
from fleetctl.validation.bisect import RunVerdict
from fleetctl.validation.scope import Scope, ScopeError, select_nodes
from fleetctl.workflows.activities.database import DatabaseActivities, calling_workflow_id
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for
from fleetctl.workflows.activities.heartbeat import run_heartbeating
from fleetctl.workflows.api import ValidationNodes, ValidationRun, ValidationRunOutcome

VALIDATE_CHECK = "nccl-validate"
VALIDATE_SUITE = "validate"
# The program each rank runs: the pairs check's all_reduce_perf (1 to 8 GiB, -g 1 per rank),
# so a validation and a node's pairs are held to the same floor at the same sizes.
PROGRAM = CHECKS["nccl-pairs"].argv
# One run: the sizes at NDR speed take tens of seconds; MPI's start across many hosts more.
RUN_TIMEOUT = timedelta(minutes=5)

_VERDICTS = {
    Status.PASS: RunVerdict.PASS,
    Status.WARN: RunVerdict.PASS,
    Status.FAIL: RunVerdict.SLOW,
    Status.ERROR: RunVerdict.ERROR,
}


class ValidationActivities(DatabaseActivities):
    def __init__(self, settings: Settings, executors: ExecutorRegistry):
        super().__init__(settings)
        self.executors = executors

    @activity.defn
    def validation_nodes(self, req: ValidationNodes) -> list[str]:
        """The production nodes of the fleet in the scope (fleetctl.validation.scope)."""
        s = req.scope
        scope = Scope(
            tuple(s.names),
            s.island,
            s.rack,
            s.domain,
            dict(s.labels),
            frozenset(req.idle) if req.idle is not None else None,
        )
        try:
            return select_nodes(self._fleet_nodes(s.fleet), scope)
        except ScopeError as exc:
            raise ApplicationError(str(exc), type="BadScope", non_retryable=True) from None

    @activity.defn
    def run_allreduce(self, run: ValidationRun) -> ValidationRunOutcome:
        """One all-reduce across `run.nodes` (the first launches it), judged and recorded once."""
        done = queries.check_run_by_key(self.engine, run.key)
        if done is None:
            done = queries.insert_once(self.engine, self._run(run), CheckRun.idempotency_key, run.key)
        verdict = _VERDICTS[Status(done.status)]
        busbw = done.metrics.get("busbw_gbps")
        return ValidationRunOutcome(
            run.nodes,
            verdict.value,
            busbw if isinstance(busbw, (int, float)) else None,
            done.reason,
            done.id,
        )

    def _run(self, run: ValidationRun) -> CheckRun:
        nodes = [self._node(n) for n in run.nodes]
        launcher = nodes[0]
        profile = load_profile(launcher.profile, self.settings.profiles_dir or None)
        argv = hosts_argv(tuple(n.name for n in nodes), profile.gpu_count, PROGRAM)
        target = target_for(launcher)
        executor = self.executors.for_target(target)
        started, raw, truncated, error_kind = utcnow(), "", False, None
        try:
            result = run_heartbeating(lambda: executor.run(target, argv, RUN_TIMEOUT.total_seconds()))
            raw, truncated = with_stderr(result.stdout, result.stderr), result.truncated
            judged = judge("nccl", raw, launcher.profile, self.settings.profiles_dir or None)
        except ExecutorError as exc:
            judged, error_kind = CheckResult(Status.ERROR, {}, [], f"{exc.kind}: {exc.message}"), exc.kind
        names = compress(sorted(run.nodes))
        return CheckRun(
            node_name=launcher.name,
            check_name=VALIDATE_CHECK,
            kind="nccl",
            suite=VALIDATE_SUITE,
            status=judged.status.value,
            metrics={**judged.to_dict()["metrics"], "nodes": names, "node_count": len(nodes), "run": run.index},
            findings=judged.to_dict()["findings"],
            reason=f"{len(nodes)}-node all-reduce of {names}: {judged.reason}",
            raw_output=raw,
            output_truncated=truncated,
            error_kind=error_kind or ("unjudgeable" if judged.status is Status.ERROR else None),
            started_at=started,
            finished_at=utcnow(),
            workflow_id=calling_workflow_id(),
            idempotency_key=run.key,
        )
