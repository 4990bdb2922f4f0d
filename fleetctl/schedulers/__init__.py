"""The schedulers that place training jobs: Slurm, Kubernetes and a simulated one."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fleetctl.config import Settings
    from fleetctl.schedulers.base import Scheduler
    from fleetctl.schedulers.slurm import CommandRunner

# What a node's inventory `scheduler` may name, besides "none" (a node no scheduler uses);
# a node several run names them joined ("slurm+kubernetes", fleetctl.inventory.names.SCHEDULER_JOIN).
SCHEDULER_KINDS = ("slurm", "kubernetes", "sim")
# Those whose adapters list every job they remember (base.ListsJobHistory), so that asking
# for the jobs never builds an adapter that cannot (a test holds the two together).
JOB_HISTORY_KINDS = ("slurm", "kubernetes", "sim")


def scheduler_for(kind: str, settings: Settings, slurm_runner: CommandRunner | None = None) -> Scheduler:
    """The adapter for a node's `scheduler`, configured from settings. slurm_runner runs
    Slurm's commands elsewhere (fleetctl.connections.slurm_client: over SSH on settings.slurm_host);
    without one they run on this host.

    Only the chosen adapter's module is imported: the kubernetes client alone costs half a
    second, and most commands never talk to Kubernetes. Several kinds joined give one
    scheduler over all of them (fleetctl.schedulers.combined).
    """
    from fleetctl.inventory.names import scheduler_members

    if len(members := scheduler_members(kind)) > 1:
        from fleetctl.schedulers.combined import CombinedScheduler

        return CombinedScheduler([(member, scheduler_for(member, settings, slurm_runner)) for member in members])
    if kind == "sim":
        from fleetctl.db.engine import get_engine
        from fleetctl.sim.scheduler import SimScheduler

        return SimScheduler(get_engine(settings.db_url))
    if kind == "slurm":
        if settings.slurm_host and slurm_runner is None:
            # Running them here instead would act on whatever cluster this host belongs to.
            raise ValueError(
                f"slurm_host is {settings.slurm_host}: Slurm's commands need its SSH runner (fleetctl.connections.slurm_client)"
            )
        from fleetctl.schedulers.slurm import LocalCommandRunner, SlurmScheduler

        return SlurmScheduler(
            run=slurm_runner
            or LocalCommandRunner(env={"SLURM_CONF": settings.slurm_conf} if settings.slurm_conf else None)
        )
    if kind == "kubernetes":
        from fleetctl.schedulers.kubernetes import KubernetesScheduler
        from fleetctl.schedulers.kubernetes_drain import kubernetes_options

        return KubernetesScheduler(
            kubeconfig=settings.kubeconfig or None,
            context=settings.kube_context or None,
            options=kubernetes_options(settings),
        )
    raise ValueError(f"no scheduler adapter for {kind!r} (one of: {', '.join(SCHEDULER_KINDS)})")
