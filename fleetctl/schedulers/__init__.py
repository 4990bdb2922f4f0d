"""The schedulers that place training jobs: Slurm, Kubernetes and a simulated one."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetctl.config import Settings
    from fleetctl.schedulers.base import Scheduler

# What a node's inventory `scheduler` may name, besides "none" (a node no scheduler uses).
SCHEDULER_KINDS = ("slurm", "kubernetes", "sim")


def scheduler_for(kind: str, settings: Settings) -> Scheduler:
    """The adapter for a node's `scheduler`, configured from settings.

    Only the chosen adapter's module is imported: the kubernetes client alone costs half a
    second, and most commands never talk to Kubernetes.
    """
    if kind == "sim":
        from fleetctl.db.engine import get_engine
        from fleetctl.schedulers.sim import SimScheduler

        return SimScheduler(get_engine(settings.db_url))
    if kind == "slurm":
        from fleetctl.schedulers.slurm import LocalCommandRunner, SlurmScheduler

        return SlurmScheduler(run=LocalCommandRunner(env={"SLURM_CONF": settings.slurm_conf} if settings.slurm_conf else None))
    if kind == "kubernetes":
        from fleetctl.schedulers.kubernetes import KubernetesScheduler, kubernetes_options

        return KubernetesScheduler(kubeconfig=settings.kubeconfig or None, context=settings.kube_context or None,
                                   options=kubernetes_options(settings))
    raise ValueError(f"no scheduler adapter for {kind!r} (one of: {', '.join(SCHEDULER_KINDS)})")
