"""Activities of GpuReturns: the quarantined GPUs due back, each one's reset and recheck on the
node (through the executor registry: SSH, or the simulated node), its failures recorded, and its
return through its node's workflow (the `release_gpu` update an operator's release sends)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC

from temporalio import activity
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from fleetctl.checks import judge
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.nvidia_smi import parse_nvidia_smi
from fleetctl.checks.result import Status
from fleetctl.config import Settings
from fleetctl.db import gpu_quarantines, queries
from fleetctl.db.models import AutomationEvent, utcnow
from fleetctl.executors.base import CommandResult, ExecutorError
from fleetctl.nodes.capacity import FLEET_LABEL, in_fleet
from fleetctl.nodes.gpu_return import RETURN_CHECKS, ReturnStep, due, return_step
from fleetctl.text import bounded, failure_message
from fleetctl.workflows.activities.database import DatabaseActivities, storable_key
from fleetctl.workflows.activities.executors import ExecutorRegistry, target_for
from fleetctl.workflows.api import (
    RELEASE_GPU_UPDATE,
    GpuQuarantineRequest,
    GpuReturnAttempt,
    GpuReturnCandidate,
    GpuReturnsInput,
    node_workflow_id,
)

# nvidia-smi(1), -r/--gpu-reset: "Trigger a reset of one or more GPUs ... There can't be any
# applications using these devices"; it refuses (non-zero) a GPU a process still uses. -i takes
# the GPU's PCI bus id (domain:bus:device.function), so the GPU is named as it was taken out.
RESET_TIMEOUT_S = 300.0
# One check on one GPU: DCGM's short diagnostic takes about a minute on a real GPU.
CHECK_TIMEOUT_S = 300.0
# The activity's bound: the reset and each check at their limits, and a minute's margin.
RESET_AND_RECHECK_S = RESET_TIMEOUT_S + len(RETURN_CHECKS) * CHECK_TIMEOUT_S + 60.0


def bus_id(gpu: str) -> str:
    """A GPU's key (0000:2b:00) as nvidia-smi's -i takes it: with the PCI function."""
    return f"{gpu}.0"


class GpuReturnActivities(DatabaseActivities):
    def __init__(self, settings: Settings, executors: ExecutorRegistry, client: Client | None = None):
        super().__init__(settings)
        self.executors = executors
        self.client = client  # for the node workflows' release_gpu update

    @activity.defn
    def gpus_due_for_return(self, req: GpuReturnsInput) -> list[GpuReturnCandidate]:
        """The fleet's GPUs out for `settle_s` or more, oldest first, each with what its Xid's
        catalog action asks before its recheck and its failed returns so far."""
        now = utcnow()
        found = []
        for q in gpu_quarantines.open_quarantines(self.engine):
            node = queries.get_node(self.engine, q.node_name)
            since = q.quarantined_at if q.quarantined_at.tzinfo else q.quarantined_at.replace(tzinfo=UTC)
            if (
                node is None
                or not in_fleet(node.labels, req.fleet)
                or not due((now - since).total_seconds(), req.settle_s)
            ):
                continue
            step, why = return_step(q.code)
            assert q.id is not None  # a stored row
            found.append(
                GpuReturnCandidate(
                    q.node_name,
                    q.gpu,
                    q.code,
                    q.id,
                    step.value,
                    why,
                    gpu_quarantines.failed_returns(self.engine, q.id),
                    node.rack,
                )
            )
        return found

    def _run(self, node_name: str, argv: Sequence[str], timeout_s: float) -> CommandResult:
        node = self._node(node_name)
        target = target_for(node)
        return self.executors.for_target(target).run(target, list(argv), timeout_s)

    @activity.defn
    def reset_and_recheck(self, gpu: GpuReturnCandidate) -> GpuReturnAttempt:
        """Reset the GPU when its Xid's catalog action says so, then run RETURN_CHECKS on it
        alone. `failure` the first step that failed ("" none); `evidence` what each said."""
        evidence: list[str] = []
        try:
            if gpu.step == ReturnStep.RESET_THEN_CHECK.value:
                argv = ("nvidia-smi", "-r", "-i", bus_id(gpu.gpu))
                reset = self._run(gpu.node, argv, RESET_TIMEOUT_S)
                said = " ".join((reset.stdout + reset.stderr).split())[-300:]
                if reset.exit_status != 0:
                    return GpuReturnAttempt(f"nvidia-smi -r exited {reset.exit_status}: {said}", "; ".join(evidence))
                evidence.append("nvidia-smi -r: reset")
            index = ""
            for check in RETURN_CHECKS:
                failure, said, index = self._check(gpu, check, index)
                evidence.append(f"{check}: {said}")
                if failure:
                    return GpuReturnAttempt(f"{check}: {said}", "; ".join(evidence))
        except ExecutorError as exc:
            return GpuReturnAttempt(f"{exc.kind}: {exc.message}", "; ".join(evidence))
        return GpuReturnAttempt("", "; ".join(evidence))

    def _check(self, gpu: GpuReturnCandidate, check: str, index: str) -> tuple[bool, str, str]:
        """Run one catalog check on the GPU alone: nvidia-smi's -i takes its bus id, DCGM's -i
        its index (which nvidia-smi's answer gave). (failed, what it said, the GPU's index)."""
        spec = CHECKS[check]
        node = self._node(gpu.node)
        nvidia_smi = spec.argv[0] == "nvidia-smi"
        if not nvidia_smi and not index:
            return True, "the GPU's index is not known: nvidia-smi did not list it", index
        argv = (*spec.argv, "-i", bus_id(gpu.gpu) if nvidia_smi else index)
        result = self._run(gpu.node, argv, CHECK_TIMEOUT_S)
        judged = judge(spec.kind, result.stdout, node.profile, self.settings.profiles_dir or None)
        if nvidia_smi:
            listed = parse_nvidia_smi(result.stdout).gpus
            index = str(listed[0].index) if len(listed) == 1 and listed[0].index is not None else ""
        return judged.status is not Status.PASS, judged.reason, index

    @activity.defn
    def record_failed_return(self, gpu: GpuReturnCandidate, run: str, reason: str, actor: str) -> None:
        """Record why the GPU stayed out (kind gpu_return_failed, the node's): counted per quarantine."""
        key = storable_key(gpu_quarantines.return_key(gpu.quarantine_id, run))
        queries.insert_once(
            self.engine,
            AutomationEvent(
                fleet=str(self._node(gpu.node).labels.get(FLEET_LABEL, self.settings.fleet)),
                kind=gpu_quarantines.RETURN_FAILED,
                node_name=gpu.node,
                reason=bounded(f"GPU {gpu.gpu}: {reason}"),
                actor=bounded(actor, 255),
                idempotency_key=key,
            ),
            AutomationEvent.idempotency_key,
            key,
        )

    @activity.defn
    async def return_gpu(self, gpu: GpuReturnCandidate, run: str, reason: str, actor: str) -> GpuReturnAttempt:
        """Put the GPU back through its node's workflow (the `release_gpu` update, under the
        node's lock as an operator's release). A refusal is an answer (`failure`): the GPU stays out."""
        if self.client is None:
            raise ApplicationError("no Temporal client to reach the node's workflow", non_retryable=True)
        handle = self.client.get_workflow_handle(node_workflow_id(gpu.node))
        req = GpuQuarantineRequest(gpu.node, gpu.gpu, gpu.code, reason, actor, f"gpu-return/{gpu.quarantine_id}/{run}")
        try:
            done: str = await handle.execute_update(RELEASE_GPU_UPDATE, req, result_type=str)
        except WorkflowUpdateFailedError as exc:
            return GpuReturnAttempt(f"the node's workflow refused: {failure_message(exc)}", "")
        return GpuReturnAttempt("", done)
