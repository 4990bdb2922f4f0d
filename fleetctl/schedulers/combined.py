"""A node that several schedulers run, as one scheduler (SUNK: Slurm on Kubernetes).

Under SUNK every GPU node is a Kubernetes node running a slurmd pod (owned by the Slurm
operator's NodeSet), which makes it a Slurm node of the same name too. Taking it out means
both: Slurm first (its jobs are the training jobs, and a Slurm drain lets them be requeued),
then the Kubernetes cordon; bringing it back reverses the order. Its jobs are the jobs of
every member; a job is restarted by the member that knows it, so a Slurm job on a SUNK node
is requeued through Slurm. The slurmd pod is the node's infrastructure, not a workload
(the Kubernetes adapter's infrastructure owner kinds), so it neither makes the node busy
nor is evicted.
"""

from __future__ import annotations

from collections.abc import Sequence

from fleetctl.schedulers.base import (
    DrainsPods,
    PodDrainProgress,
    ReportsNodeState,
    Scheduler,
    SchedulerError,
    SchedulerJob,
    SchedulerNodeState,
    work_on_node,
)


class CombinedScheduler:
    """The Scheduler protocol over `members` ((kind, adapter) in drain order)."""

    def __init__(self, members: Sequence[tuple[str, Scheduler]]) -> None:
        if len(members) < 2:
            raise ValueError("a combined scheduler has two or more members")
        self.members = tuple(members)

    def __repr__(self) -> str:
        return f"CombinedScheduler({', '.join(repr(s) for _, s in self.members)})"

    def drain(self, node: str, reason: str, critical: bool = False) -> None:
        for _, scheduler in self.members:
            scheduler.drain(node, reason, critical=critical)

    def resume(self, node: str, force: bool = False) -> None:
        # Reversed: the node takes Kubernetes pods again only once Slurm has it back, and a
        # member that refuses (someone else's drain) stops the rest, so it stays out of all.
        for _, scheduler in reversed(self.members):
            scheduler.resume(node, force=force)

    def node_state(self, node: str) -> SchedulerNodeState:
        """Drained when any member has it drained (fleetctl's only if every such drain is);
        reconcile compares the members one by one (fleetctl.nodes.scheduler_sync)."""
        states = [scheduler.node_state(node) for _, scheduler in self.members]
        drained = [s for s in states if s.drained]
        shown = drained[0] if drained else next((s for s in states if s.state != "idle"), states[0])
        return SchedulerNodeState(
            node=node,
            state=shown.state,
            drained=bool(drained),
            reason=shown.reason,
            owned_by_fleetctl=bool(drained) and all(s.owned_by_fleetctl for s in drained),
        )

    def jobs_on_node(self, node: str) -> list[SchedulerJob]:
        return [job for _, scheduler in self.members for job in scheduler.jobs_on_node(node)]

    def workloads_on_node(self, node: str) -> list[str]:
        """Every member's work on the node (a SUNK node's Slurm jobs and its other pods)."""
        return sorted({work for _, scheduler in self.members for work in work_on_node(scheduler, node)})

    def busy_nodes(self) -> set[str]:
        return set().union(*(scheduler.busy_nodes() for _, scheduler in self.members))

    def job(self, job_id: str) -> SchedulerJob:
        return self._owner(job_id)[1]

    def restart_job(self, job_id: str, exclude_nodes: Sequence[str]) -> None:
        self._owner(job_id)[0].restart_job(job_id, exclude_nodes)

    def drain_pods(self, node: str, critical: bool = False, deadline_passed: bool = False) -> PodDrainProgress:
        rounds = [s.drain_pods(node, critical, deadline_passed) for _, s in self.members if isinstance(s, DrainsPods)]
        return PodDrainProgress(
            node=node,
            evicted=tuple(p for r in rounds for p in r.evicted),
            deleted=tuple(p for r in rounds for p in r.deleted),
            holding=tuple(p for r in rounds for p in r.holding),
            left=tuple(p for r in rounds for p in r.left),
        )

    def set_state(self, node: str, state: str, reason: str) -> None:
        for _, scheduler in self.members:
            if isinstance(scheduler, ReportsNodeState):
                scheduler.set_state(node, state, reason)

    def member_for(self, job_id: str) -> tuple[str, Scheduler]:
        """The kind and adapter of the member that runs the job: what a restart places it
        through (fleetctl.jobs.placement)."""
        owner = self._owner(job_id)[0]
        return next((kind, scheduler) for kind, scheduler in self.members if scheduler is owner)

    def _owner(self, job_id: str) -> tuple[Scheduler, SchedulerJob]:
        """The member that knows the job (Slurm's numeric ids, Kubernetes' namespace/name)."""
        refusals = []
        for kind, scheduler in self.members:
            try:
                return scheduler, scheduler.job(job_id)
            except SchedulerError as exc:
                refusals.append(f"{kind}: {exc}")
        raise SchedulerError(f"no member scheduler knows job {job_id}: {'; '.join(refusals)}")
