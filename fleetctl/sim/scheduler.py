"""The simulated scheduler: jobs and their placement live in the database, for the demo and
benchmarks. It behaves like a small Slurm seen through the Scheduler protocol.

Placement: the queue in submission order, each job that fits runs at once on the first
free nodes by name, never on a node a restart told it to avoid (kept, as Slurm keeps a
job's ExcNodeList) and only on the nodes it was named onto until they are released
(ReqNodeList). A node is free, as in Slurm, when this scheduler has not drained it, no
other job runs there and it is not held as a spare, whatever fleetctl's state: a node new
to fleetctl, in burn-in or under a check takes work unless fleetctl holds it (drains it
with a hold's reason, fleetctl.schedulers.base). A node's GPUs are its GRES, as Slurm's
`Gres=gpu:8`: a GPU fleetctl took out (quarantine_gpu) leaves 7, and a job that asks for 8 GPUs
per node no longer fits there, while one of 7 does. A job asking for more GPUs than a node has
asks for the whole node (jobs submitted before GPU counts mattered ask for 8 on 4-GPU trays).
There is no
scheduler loop: every call runs one scheduling pass first, as a real scheduler's loop
would have by then.

Nodes are the inventory's nodes with `scheduler: sim`. A drain by hand (an operator's, not
fleetctl's) is a drain whose reason lacks fleetctl's prefix, as with Slurm.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.engine import Engine

from fleetctl.db import jobs as store
from fleetctl.db import spares as spare_store
from fleetctl.db.jobs import QueuedJob, SimNodeView
from fleetctl.db.models import Job
from fleetctl.nodes.gpu_quarantine import gpus_usable
from fleetctl.schedulers.base import (
    REASON_PREFIX,
    FleetctlDoesNotOwnDrain,
    JobHistory,
    SchedulerError,
    SchedulerJob,
    SchedulerNodeState,
)
from fleetctl.sim.profiles import sim_profile


def gpus_fit(job: QueuedJob, node: SimNodeView) -> bool:
    """Whether the node's GPUs left in its GRES hold the job's GPUs per node."""
    count = sim_profile(node.profile).gpu_count
    return min(job.gpus_per_node, count) <= gpus_usable(count, len(node.gpus_out))


def place_first_fit(queue: Sequence[QueuedJob], nodes: Sequence[SimNodeView]) -> dict[str, list[str]]:
    """In queue order, each job that fits gets the first `node_count` free nodes it may use
    (with its GPUs per node left in their GRES); a job given its nodes gets exactly those,
    when all are free."""
    views = {n.name: n for n in nodes}
    free = [n.name for n in nodes if not n.drained and not n.jobs and not n.spare]
    placements: dict[str, list[str]] = {}
    for job in queue:
        fitting = {name for name in free if gpus_fit(job, views[name])}
        if job.nodes:
            if set(job.nodes) <= fitting - job.exclude:
                placements[job.job_id] = list(job.nodes)
                free = [name for name in free if name not in job.nodes]
            continue
        usable = [name for name in free if name not in job.exclude and name in fitting]
        if len(usable) >= job.node_count:
            placements[job.job_id] = usable[: job.node_count]
            free = [name for name in free if name not in placements[job.job_id]]
    return placements


class SimScheduler:
    """The Scheduler protocol over the `jobs` and `sim_scheduler_nodes` tables."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def __repr__(self) -> str:
        return "SimScheduler()"

    def submit(self, name: str, node_count: int, gpus_per_node: int = 8) -> SchedulerJob:
        """Queue a job that needs `node_count` nodes; it runs at once if they are free."""
        if node_count < 1:
            raise SchedulerError(f"a job needs at least one node, not {node_count}")
        job_id = store.add_sim_job(self.engine, name, node_count, gpus_per_node)
        return self.job(job_id)

    def drain(self, node: str, reason: str, critical: bool = False) -> None:
        """Drain with fleetctl's reason; a drain by someone else stays theirs (as with Slurm,
        and like Slurm's, a critical drain is the same drain)."""
        current = self._node(node)
        if current.drained and not _owned_by_fleetctl(current.reason):
            return
        reason = " ".join(reason.split())
        store.set_sim_drain(
            self.engine, node, True, reason if reason.startswith(REASON_PREFIX) else f"{REASON_PREFIX} {reason}"
        )

    def quarantine_gpu(self, node: str, gpu: str, reason: str) -> None:
        """Take `gpu` out of the node's GRES (as an operator shrinks Slurm's Gres=gpu:N); the
        job running there keeps its GPUs until it ends, as Slurm lets it."""
        current = self._node(node)
        self._check_gpus(node, current, [*current.gpus_out, gpu])
        store.set_sim_gpus_out(self.engine, node, [*current.gpus_out, gpu])

    def release_gpu(self, node: str, gpu: str) -> None:
        """Put `gpu` back in the node's GRES; work may be placed on it at once."""
        current = self._node(node)
        store.set_sim_gpus_out(self.engine, node, [g for g in current.gpus_out if g != gpu])
        self._schedule()

    def gpus_out(self, node: str) -> list[str]:
        return list(self._node(node).gpus_out)

    def _check_gpus(self, node: str, current: SimNodeView, gpus: Sequence[str]) -> None:
        count = sim_profile(current.profile).gpu_count
        if len(set(gpus)) > count:
            raise SchedulerError(f"{node} has {count} GPUs: cannot take {len(set(gpus))} out of its GRES")

    def resume(self, node: str, force: bool = False) -> None:
        current = self._node(node)
        if not current.drained:
            return
        if not _owned_by_fleetctl(current.reason) and not force:
            raise FleetctlDoesNotOwnDrain(
                f"{node} was drained with reason {current.reason!r}, not by fleetctl; resume it with force to override"
            )
        store.set_sim_drain(self.engine, node, False, None)
        self._schedule()

    def node_state(self, node: str) -> SchedulerNodeState:
        self._schedule()
        return _node_state(self._node(node))

    def node_states(self, nodes: Sequence[str]) -> dict[str, SchedulerNodeState]:
        self._schedule()
        return {view.name: _node_state(view) for view in store.sim_nodes(self.engine, list(nodes))}

    def jobs_on_node(self, node: str) -> list[SchedulerJob]:
        self._schedule()
        return [self.job(job_id) for job_id in self._node(node).jobs]

    def busy_nodes(self) -> set[str]:
        self._schedule()
        return {view.name for view in store.sim_nodes(self.engine) if view.jobs}

    def job(self, job_id: str) -> SchedulerJob:
        self._schedule()
        job = store.get_job(self.engine, job_id)
        if job is None or job.scheduler != store.SIM:
            raise SchedulerError(f"the simulated scheduler does not know job {job_id}")
        return _scheduler_job(job)

    def jobs(self) -> list[SchedulerJob]:
        """Every job, queued ones too (simulated scheduler only: it keeps its whole queue)."""
        self._schedule()
        return [_scheduler_job(job) for job in store.list_jobs(self.engine, scheduler=store.SIM)]

    def job_history(self) -> list[JobHistory]:
        """Every job of its queue, as Slurm's squeue --states=all lists them (the rows it keeps
        are the ones reconciliation writes: the report reads them the same way)."""
        self._schedule()
        return [
            JobHistory(
                job_id=j.job_id,
                name=j.name,
                state=j.state,
                nodes=tuple(j.nodes),
                node_count=j.node_count,
                submitted_at=j.submitted_at,
                started_at=j.run_started_at or j.started_at,  # as Slurm: its latest run's
                ended_at=j.ended_at,
                restart_count=j.restart_count,
                gpus_per_node=j.gpus_per_node,
            )
            for j in store.list_jobs(self.engine, scheduler=store.SIM)
        ]

    def restart_job(self, job_id: str, exclude_nodes: Sequence[str]) -> None:
        """Requeue the job and place it at once off exclude_nodes if enough nodes are free;
        otherwise it stays pending. As Slurm's ExcNodeList, the exclusions are added to the
        job's and kept: no later pass places it on any of them, however long it waits."""
        try:
            store.sim_scheduling_pass(self.engine, place_first_fit, requeue=job_id, exclude=exclude_nodes)
        except store.UnknownJob as exc:
            raise SchedulerError(str(exc)) from None

    def restart_job_on(self, job_id: str, exclude_nodes: Sequence[str], nodes: Sequence[str]) -> None:
        """restart_job onto exactly `nodes`: the job waits for them until release_nodes, as
        Slurm's ReqNodeList."""
        if not nodes:
            raise SchedulerError(f"restart of job {job_id} onto named nodes names none")
        if both := sorted(set(nodes) & set(exclude_nodes)):
            raise SchedulerError(f"restart of job {job_id}: {both[0]} is both excluded and asked for")
        try:
            store.sim_scheduling_pass(
                self.engine, place_first_fit, requeue=job_id, exclude=exclude_nodes, place_on=nodes
            )
        except store.UnknownJob as exc:
            raise SchedulerError(str(exc)) from None

    def release_nodes(self, job_id: str) -> None:
        """The pending job may run on any nodes again; its exclusions stay."""
        try:
            store.sim_scheduling_pass(self.engine, place_first_fit, release=job_id)
        except store.UnknownJob as exc:
            raise SchedulerError(str(exc)) from None

    def spares(self) -> dict[str, tuple[str, ...]]:
        """Its hold is fleetctl's own record of the pools (the `spares` table): a held node
        takes no job, as in Slurm's reservation, until a restart takes it out."""
        pools: dict[str, list[str]] = {}
        for name, island in sorted(spare_store.held(self.engine).items()):
            pools.setdefault(island, []).append(name)
        return {island: tuple(nodes) for island, nodes in pools.items()}

    def set_spares(self, island: str, nodes: Sequence[str]) -> None:
        """As Slurm does, a node that runs a job is not held."""
        self._schedule()
        busy = sorted(set(nodes) & self.busy_nodes())
        if busy:
            raise SchedulerError(f"cannot hold {', '.join(busy)} as spares of {island}: requested nodes are busy")
        spare_store.record_pool(self.engine, island, nodes)

    def _schedule(self) -> None:
        store.sim_scheduling_pass(self.engine, place_first_fit)

    def _node(self, node: str) -> SimNodeView:
        found = store.sim_nodes(self.engine, [node])
        if not found:
            raise SchedulerError(f"the simulated scheduler does not know node {node}")
        return found[0]


SIM_NODE_STATES = {(True, True): "draining", (True, False): "drain", (False, True): "allocated", (False, False): "idle"}


def _node_state(current: SimNodeView) -> SchedulerNodeState:
    # As sinfo names them: drained with a job still running is draining.
    state = SIM_NODE_STATES[(current.drained, bool(current.jobs))]
    return SchedulerNodeState(
        node=current.name,
        state=state,
        drained=current.drained,
        reason=current.reason,
        owned_by_fleetctl=_owned_by_fleetctl(current.reason),
    )


def _scheduler_job(job: Job) -> SchedulerJob:
    return SchedulerJob(
        job_id=job.job_id, name=job.name, state=job.state, nodes=tuple(job.nodes) if job.state == "running" else ()
    )


def _owned_by_fleetctl(reason: str | None) -> bool:
    return bool(reason and reason.startswith(REASON_PREFIX))
