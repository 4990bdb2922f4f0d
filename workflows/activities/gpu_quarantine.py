"""Activities of a GPU's quarantine: what a fault confined to one GPU takes out now, and the
GPU taken out of (or put back in) its node's scheduler, as the database records it."""

from __future__ import annotations

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.checks.profiles import load_profile
from fleetctl.config import Settings, xid_policy
from fleetctl.db import gpu_quarantines
from fleetctl.nodes.gpu_quarantine import QuarantineAction, decide_scope
from fleetctl.schedulers.base import QuarantinesGpus, SchedulerError
from fleetctl.text import bounded
from fleetctl.workflows.activities.database import DatabaseActivities, storable_key
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import GpuQuarantinePlan, GpuQuarantineRequest


class GpuQuarantineActivities(DatabaseActivities):
    def __init__(self, settings: Settings, schedulers: SchedulerRegistry):
        super().__init__(settings)
        self.schedulers = schedulers

    def _gpu_scheduler(self, scheduler: str) -> QuarantinesGpus | None:
        found = self.schedulers.get(scheduler)
        return found if isinstance(found, QuarantinesGpus) else None

    @activity.defn
    def plan_gpu_quarantine(self, req: GpuQuarantineRequest) -> GpuQuarantinePlan:
        """The scope decided again with the node's GPUs out now (another event's quarantine may
        have landed since the verdict); the node, when its scheduler cannot take one GPU out."""
        node = self._node(req.node)
        verdict = decide_scope(
            xid_policy(self.settings), req.code, req.gpu, gpu_quarantines.gpus_out(self.engine, req.node)
        )
        gpus = load_profile(node.profile).gpu_count
        if verdict.action is QuarantineAction.QUARANTINE_GPU and self._gpu_scheduler(node.scheduler) is None:
            reason = f"the node: its scheduler ({node.scheduler}) cannot take one GPU out"
            return GpuQuarantinePlan(QuarantineAction.DRAIN_NODE.value, "", reason, node.rack, gpus)
        return GpuQuarantinePlan(verdict.action.value, verdict.gpu, verdict.reason, node.rack, gpus)

    @activity.defn
    def quarantine_gpu(self, req: GpuQuarantineRequest) -> str:
        """Take the GPU out of the node's scheduler, then record it (a retry finds both done).
        A scheduler's refusal is retried, then fails the activity: the node drains instead."""
        node = self._node(req.node)
        scheduler = self._gpu_scheduler(node.scheduler)
        if scheduler is None:
            raise SchedulerError(f"{req.node}: its scheduler ({node.scheduler}) cannot take one GPU out")
        reason = bounded(req.reason)
        if req.gpu not in scheduler.gpus_out(req.node):
            scheduler.quarantine_gpu(req.node, req.gpu, reason)
        gpu_quarantines.record_quarantine(
            self.engine,
            req.node,
            req.gpu,
            req.code,
            reason,
            bounded(req.actor, 255),
            storable_key(req.request_id or f"{req.node}/gpu/{req.gpu}/{activity.info().workflow_run_id}"),
        )
        return f"GPU {req.gpu} out of the scheduler; the node's other GPUs keep working: {reason}"

    @activity.defn
    def release_gpu(self, req: GpuQuarantineRequest) -> str:
        """Put the GPU back in the node's scheduler, then record it released. A GPU that is
        not out is refused (non-retryable), naming the GPUs that are."""
        node = self._node(req.node)
        out = gpu_quarantines.gpus_out(self.engine, req.node)
        scheduler = self._gpu_scheduler(node.scheduler)
        if req.gpu not in out and (scheduler is None or req.gpu not in scheduler.gpus_out(req.node)):
            raise ApplicationError(
                f"{req.node}: GPU {req.gpu} is not out (out: {', '.join(out) or 'none'})",
                type="NotQuarantined",
                non_retryable=True,
            )
        if scheduler is not None:
            scheduler.release_gpu(req.node, req.gpu)
        gpu_quarantines.record_release(self.engine, req.node, req.gpu, bounded(f"{req.actor}: {req.reason}"))
        return f"{req.node}: GPU {req.gpu} back in the scheduler"
