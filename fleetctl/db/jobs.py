"""Training jobs, the simulated scheduler's node drains, and job restarts.

Each function opens its own short session. Where simulated jobs go is the simulated
scheduler's rule (fleetctl/sim/scheduler.py): `sim_scheduling_pass` only gives it the
queue and the nodes, and writes its placements in the same transaction.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import overload

from sqlalchemy import text
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from fleetctl.db import queries
from fleetctl.db.models import HealthEvent, Job, JobCheckpoint, JobRestart, Node, SimSchedulerNode, Spare, utcnow
from fleetctl.durations import as_utc
from fleetctl.inventory.names import scheduler_members
from fleetctl.jobs.placement import Where, held_domains, landed
from fleetctl.nodes.capacity import DOMAIN_FABRIC_CHECKS
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.schedulers.base import JobHistory

SIM = "sim"
# pg_advisory_xact_lock key serialising the simulated scheduler's passes ("fsim" in ASCII).
_SIM_SCHEDULER_LOCK = 0x6673696D
_RESTART_STEP_FIELDS = frozenset(
    {
        "drained_at",
        "requeued_at",
        "running_at",
        "new_nodes",
        "nodes_before",
        "status",
        "error",
        "island",
        "placement",
        "placement_detail",
        "placed_on",
        "landed",
        "spares_taken",
    }
)


@dataclass(frozen=True)
class SimNodeView:
    """A node of the simulated scheduler as it sees it."""

    name: str
    drained: bool
    reason: str | None
    jobs: tuple[str, ...]  # running jobs placed on it
    spare: bool = False  # held as a hot spare: no job is placed on it (fleetctl.jobs.spares)
    profile: str = ""  # the inventory's GPU profile: how many GPUs the node has
    gpus_out: tuple[str, ...] = ()  # GPUs taken out of its GRES (set_sim_gpus_out): no work placed on them


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    node_count: int
    # Never these nodes (Slurm's ExcNodeList: every restart's bad and unfit nodes, kept).
    exclude: frozenset[str]
    # Exactly these nodes or wait, until released (a restart placed in its island,
    # fleetctl.jobs.placement; Slurm's ReqNodeList).
    nodes: tuple[str, ...] = ()
    gpus_per_node: int = 8


# (queue in FIFO order, every simulated node) -> {job id: the nodes it now runs on}
PlacementPolicy = Callable[[Sequence[QueuedJob], Sequence[SimNodeView]], dict[str, list[str]]]


class UnknownJob(LookupError):
    pass


def _sim_nodes(session: Session, names: Sequence[str] | None = None) -> list[SimNodeView]:
    # Not fleetctl's state: like Slurm, the simulated scheduler knows only its own drains.
    query = select(Node.name, Node.profile).where(Node.scheduler == SIM).order_by(Node.name)
    if names is not None:
        query = query.where(col(Node.name).in_(list(names)))
    profiles = dict(session.exec(query).all())
    nodes = list(profiles)
    drains = {d.node_name: d for d in session.exec(select(SimSchedulerNode))}
    spares = set(session.exec(select(Spare.node_name)))
    placed: dict[str, list[str]] = {}
    for job in session.exec(select(Job).where(Job.scheduler == SIM, Job.state == "running").order_by(col(Job.id))):
        for node in job.nodes:
            placed.setdefault(node, []).append(job.job_id)
    return [
        SimNodeView(
            name,
            bool(drains.get(name) and drains[name].drained),
            drains[name].reason if name in drains else None,
            tuple(placed.get(name, ())),
            name in spares,
            profiles[name],
            tuple(drains[name].gpus_out) if name in drains else (),
        )
        for name in nodes
    ]


def sim_nodes(engine: Engine, names: Sequence[str] | None = None) -> list[SimNodeView]:
    """Every node whose inventory scheduler is "sim" (or those of `names` that are)."""
    with Session(engine) as session:
        return _sim_nodes(session, names)


def set_sim_drain(engine: Engine, node: str, drained: bool, reason: str | None) -> None:
    with Session(engine) as session:
        row = session.exec(select(SimSchedulerNode).where(SimSchedulerNode.node_name == node)).first()
        row = row or SimSchedulerNode(node_name=node)
        row.drained, row.reason, row.updated_at = drained, reason, utcnow()
        session.add(row)
        try:
            session.commit()
        except IntegrityError:  # a concurrent first drain of the same node inserted the row
            session.rollback()
            set_sim_drain(engine, node, drained, reason)


def set_sim_gpus_out(engine: Engine, node: str, gpus: Sequence[str]) -> None:
    """The simulated scheduler's GRES of `node` leaves out exactly `gpus` from now on."""
    with Session(engine) as session:
        row = session.exec(select(SimSchedulerNode).where(SimSchedulerNode.node_name == node)).first()
        row = row or SimSchedulerNode(node_name=node)
        row.gpus_out, row.updated_at = sorted(set(gpus)), utcnow()
        session.add(row)
        try:
            session.commit()
        except IntegrityError:  # a concurrent first write of the same node inserted the row
            session.rollback()
            set_sim_gpus_out(engine, node, gpus)


def get_job(engine: Engine, job_id: str) -> Job | None:
    with Session(engine) as session:
        return session.exec(select(Job).where(Job.job_id == job_id)).first()


def list_jobs(engine: Engine, scheduler: str | None = None, node: str | None = None) -> list[Job]:
    """Jobs stored in the database (the simulated scheduler's), optionally only those on `node`."""
    with Session(engine) as session:
        query = select(Job).order_by(col(Job.id))
        if scheduler:
            query = query.where(Job.scheduler == scheduler)
        jobs = list(session.exec(query))
    return [j for j in jobs if node in j.nodes] if node else jobs


def add_sim_job(engine: Engine, name: str, node_count: int, gpus_per_node: int) -> str:
    """Queue a simulated job; its id is `sim-<row id>`."""
    with Session(engine) as session:
        # The id comes from the row's number, known once inserted; a unique placeholder until then.
        job = Job(
            job_id=f"sim-new-{uuid.uuid4().hex}",
            name=name,
            scheduler=SIM,
            state="pending",
            node_count=node_count,
            gpus_per_node=gpus_per_node,
        )
        session.add(job)
        session.flush()
        job.job_id = f"sim-{job.id}"
        session.add(job)
        session.commit()
        return job.job_id


def _lock_sim_scheduler(session: Session) -> None:
    """Hold the simulated scheduler for the rest of this transaction, across processes."""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _SIM_SCHEDULER_LOCK})
    else:
        # SQLite: a write as the transaction's first statement takes the database's write
        # lock now, waiting out a concurrent pass; taken at the first real write instead,
        # after reads, it would fail at once with SQLITE_BUSY.
        session.execute(text("UPDATE sim_scheduler_nodes SET node_name = node_name WHERE 1 = 0"))


def sim_scheduling_pass(
    engine: Engine,
    place: PlacementPolicy,
    requeue: str | None = None,
    exclude: Sequence[str] = (),
    place_on: Sequence[str] | None = None,
    release: str | None = None,
) -> None:
    """One pass of the simulated scheduler: put `requeue` (if given) back in the queue with
    `exclude` added to the nodes it never runs on and `place_on` as the nodes it runs on
    (None: those it asked for that are not excluded), forget the nodes `release` asked for,
    then run every queued job that `place` finds nodes for, each off its excluded nodes."""
    with Session(engine) as session:
        pending = select(Job).where(Job.scheduler == SIM, Job.state == "pending")
        if requeue is None and release is None and session.exec(pending.limit(1)).first() is None:
            return  # nothing to place: no need to take the lock
        _lock_sim_scheduler(session)
        if requeue is not None:
            job = session.exec(select(Job).where(Job.scheduler == SIM, Job.job_id == requeue)).first()
            if job is None:
                raise UnknownJob(f"the simulated scheduler does not know job {requeue}")
            if job.state == "running":
                job.state, job.nodes = "pending", []
                job.restart_count += 1  # as Slurm counts a requeue
            excluded = list(dict.fromkeys([*job.excluded_nodes, *exclude]))
            job.excluded_nodes = excluded
            job.required_nodes = (
                list(place_on) if place_on is not None else [n for n in job.required_nodes if n not in excluded]
            )
            session.add(job)
            session.flush()
        if release is not None:
            job = session.exec(select(Job).where(Job.scheduler == SIM, Job.job_id == release)).first()
            if job is None:
                raise UnknownJob(f"the simulated scheduler does not know job {release}")
            job.required_nodes = []
            session.add(job)
            session.flush()
        queue = list(session.exec(pending.order_by(col(Job.submitted_at), col(Job.id))))
        if queue:
            placements = place(
                [
                    QueuedJob(
                        j.job_id, j.node_count, frozenset(j.excluded_nodes), tuple(j.required_nodes), j.gpus_per_node
                    )
                    for j in queue
                ],
                _sim_nodes(session),
            )
            now = utcnow()
            for job in queue:
                if placements.get(job.job_id):
                    # started_at is the job's first start: its wall time runs through its restarts;
                    # run_started_at this run's, as Slurm moves a requeued job's start time.
                    job.state, job.nodes, job.started_at, job.run_started_at = (
                        "running",
                        list(placements[job.job_id]),
                        job.started_at or now,
                        now,
                    )
                    session.add(job)
        session.commit()


def record_restart_started(
    engine: Engine,
    *,
    workflow_id: str,
    job_id: str,
    scheduler: str,
    bad_nodes: Sequence[str],
    cause: str,
    actor: str,
    restart_id: str,
    fault_seen_at: datetime,
    failure: str = "",
) -> JobRestart:
    """The restart's row, created once per workflow id (a retry finds the first one)."""
    with Session(engine) as session:
        existing = session.exec(select(JobRestart).where(JobRestart.workflow_id == workflow_id)).first()
        if existing is not None:
            return existing
        row = JobRestart(
            workflow_id=workflow_id,
            job_id=job_id,
            scheduler=scheduler,
            bad_nodes=list(bad_nodes),
            cause=cause,
            failure=failure,
            actor=actor,
            restart_id=restart_id,
            fault_seen_at=fault_seen_at,
        )
        session.add(row)
        try:
            session.commit()
        except IntegrityError:  # a concurrent retry stored it first
            session.rollback()
            return session.exec(select(JobRestart).where(JobRestart.workflow_id == workflow_id)).one()
        session.refresh(row)
        return row


def record_restart_step(engine: Engine, workflow_id: str, **values: object) -> None:
    """Set step times / outcome on a restart. Setting the same values again changes nothing."""
    unknown = set(values) - _RESTART_STEP_FIELDS
    if unknown:
        raise ValueError(f"not a restart step field: {', '.join(sorted(unknown))}")
    with Session(engine) as session:
        row = session.exec(select(JobRestart).where(JobRestart.workflow_id == workflow_id)).first()
        if row is None:
            raise LookupError(f"no job restart recorded for workflow {workflow_id}")
        for key, value in values.items():
            setattr(row, key, value)
        session.add(row)
        session.commit()


def fabric(engine: Engine) -> dict[str, Where]:
    """Every node's place in the fabric, from the inventory."""
    with Session(engine) as session:
        return {
            name: Where(switch, island, domain)
            for name, switch, island, domain in session.exec(
                select(Node.name, Node.switch, Node.island, Node.nvlink_domain)
            )
        }


# A tray in these states is no longer part of its domain's fabric (with the vendor, or gone):
# its last imex check says nothing of the domain now, and would hold it out of restarts for ever.
_LEFT_THE_DOMAIN = (NodeState.RMA.value, NodeState.RETIRED.value)


def _domain_trays(engine: Engine, domains: Sequence[str] | None = None) -> dict[str, str]:
    """{node: its NVLink domain} of the trays still in their domain (neither RMA'd nor retired)."""
    query = select(Node.name, Node.nvlink_domain).where(
        Node.nvlink_domain != "", col(Node.state).not_in(_LEFT_THE_DOMAIN)
    )
    if domains is not None:
        query = query.where(col(Node.nvlink_domain).in_(list(domains)))
    with Session(engine) as session:
        return dict(session.exec(query).all())


def held_nvlink_domains(engine: Engine) -> set[str]:
    """The NVLink domains a restart takes no node of (fleetctl.jobs.placement.held_domains):
    those whose fabric the latest checks of one of their trays still in the domain find failed."""
    domain_of = _domain_trays(engine)
    latest = queries.latest_check_per_kind(engine, list(domain_of)) if domain_of else {}
    return held_domains((domain_of[node], run.kind, run.status) for node, runs in latest.items() for run in runs)


@dataclass(frozen=True)
class DomainWitnesses:
    """What else says an NVLink domain's fabric failed since a moment (nvlink_domain_witnesses)."""

    reporters: list[str]  # trays with a critical health event without an Xid (a fabric signature's kind)
    check_failed: bool  # a tray's imex check (the domain's own IMEX state) failed


def nvlink_domain_witnesses(engine: Engine, domain: str, since: datetime) -> DomainWitnesses:
    """The trays of `domain` still in it that reported a critical fault without an Xid code
    since `since` (the rows keep no signature: a fatal SXid and a Fabric Manager abort are
    such faults), and whether one's imex check failed since then."""
    trays = list(_domain_trays(engine, [domain]))
    if not trays:
        return DomainWitnesses([], False)
    with Session(engine) as session:
        reporters = session.exec(
            select(HealthEvent.node_name)
            .where(
                col(HealthEvent.node_name).in_(trays),
                col(HealthEvent.code).is_(None),
                HealthEvent.severity == "critical",
                HealthEvent.at >= since,
            )
            .distinct()
        ).all()
    latest = queries.latest_check_per_kind(engine, trays)
    failed = any(
        run.kind in DOMAIN_FABRIC_CHECKS and run.status == "fail" and as_utc(run.finished_at) >= as_utc(since)
        for runs in latest.values()
        for run in runs
    )
    return DomainWitnesses(sorted(reporters), failed)


def health_event_source(engine: Engine, node: str, key: str) -> str | None:
    """The source `node`'s health event recorded under idempotency key `key` came from, or None."""
    with Session(engine) as session:
        return session.exec(
            select(HealthEvent.source).where(HealthEvent.node_name == node, HealthEvent.idempotency_key == key)
        ).first()


def restart_candidates(engine: Engine, scheduler: str) -> list[str]:
    """The nodes a restarted job of `scheduler` may be placed on: in production in fleetctl
    and run by that scheduler (alone or with others); the caller leaves out busy ones."""
    with Session(engine) as session:
        rows = session.exec(select(Node.name, Node.scheduler).where(Node.state == "production"))
        return [name for name, kinds in rows if scheduler in scheduler_members(kinds)]


def restart_placement(engine: Engine, workflow_id: str) -> tuple[str, list[str]]:
    """The placement recorded on a restart and the nodes it named (("", []) when none)."""
    with Session(engine) as session:
        row = session.exec(
            select(JobRestart.placement, JobRestart.placed_on).where(JobRestart.workflow_id == workflow_id)
        ).first()
        return (row[0], list(row[1] or [])) if row is not None else ("", [])


def restart_spares(engine: Engine, workflow_id: str) -> tuple[str, list[str]]:
    """The island of a restart and the hot spares its placement took (("", []) when none)."""
    with Session(engine) as session:
        row = session.exec(
            select(JobRestart.island, JobRestart.spares_taken).where(JobRestart.workflow_id == workflow_id)
        ).first()
        return (row[0], list(row[1] or [])) if row is not None else ("", [])


def record_restart_landing(engine: Engine, workflow_id: str, new_nodes: Sequence[str]) -> str:
    """Where the restarted job ran again (fleetctl.jobs.placement.landed), written on its restart."""
    with Session(engine) as session:
        row = session.exec(select(JobRestart).where(JobRestart.workflow_id == workflow_id)).first()
        if row is None:
            raise LookupError(f"no job restart recorded for workflow {workflow_id}")
        row.landed = landed(row.island, new_nodes, fabric(engine))
        session.add(row)
        session.commit()
        return row.landed


def restart_placements(engine: Engine, since: datetime, until: datetime) -> list[tuple[str, str]]:
    """(placement, landed) of every restart whose fault was seen in [since, until]."""
    with Session(engine) as session:
        return [
            (placement, landed)
            for placement, landed in session.exec(
                select(JobRestart.placement, JobRestart.landed).where(
                    JobRestart.fault_seen_at >= since, JobRestart.fault_seen_at <= until
                )
            )
        ]


def restarts_on_spares(engine: Engine, since: datetime, until: datetime) -> int:
    """How many restarts whose fault was seen in [since, until] took a hot spare."""
    with Session(engine) as session:
        taken = session.exec(
            select(JobRestart.spares_taken).where(JobRestart.fault_seen_at >= since, JobRestart.fault_seen_at <= until)
        )
        return sum(1 for spares in taken if spares)


def job_restarts(engine: Engine, job_id: str) -> list[JobRestart]:
    """Every restart of the job, oldest fault first."""
    with Session(engine) as session:
        query = (
            select(JobRestart)
            .where(JobRestart.job_id == job_id)
            .order_by(col(JobRestart.fault_seen_at), col(JobRestart.id))
        )
        return list(session.exec(query))


def restart_schedulers(engine: Engine, job_id: str) -> list[str]:
    """The schedulers that ran restarts of a job with this id (to find a job by its id alone)."""
    with Session(engine) as session:
        return sorted(set(session.exec(select(JobRestart.scheduler).where(JobRestart.job_id == job_id))))


@overload
def _earliest(first: datetime | None, second: datetime, /, *rest: datetime | None) -> datetime: ...
@overload
def _earliest(*values: datetime | None) -> datetime | None: ...
def _earliest(*values: datetime | None) -> datetime | None:
    present = [as_utc(v) for v in values if v is not None]
    return min(present) if present else None


def reconcile_jobs(
    engine: Engine,
    scheduler: str,
    observed: Sequence[JobHistory],
    seen_at: datetime,
    gpus_per_node: Callable[[Sequence[str]], int | None] = lambda nodes: None,
) -> int:
    """Write what `scheduler` says of its jobs into `jobs`; how many jobs it listed.

    Slurm moves a requeued job's submit and start times to the latest run; the row keeps the
    earliest it saw, or that fleetctl knows the job ran by (its first restart's fault, its
    first checkpoint), so a job's wall time runs through its restarts. A job an earlier sync
    saw, not ended, that the scheduler no longer lists ended when fleetctl last saw it. `gpus_per_node` gives a job's GPUs per node from its nodes when the scheduler does
    not say (the inventory's profiles); a row keeps its value when neither knows.
    """
    try:
        _reconcile_jobs(engine, scheduler, observed, seen_at, gpus_per_node)
    except IntegrityError:  # a concurrent sync inserted one of the new jobs first: once more, as an update
        _reconcile_jobs(engine, scheduler, observed, seen_at, gpus_per_node)
    return len(observed)


def record_checkpoint(engine: Engine, job_id: str, at: datetime) -> bool:
    """A checkpoint the job reported; False when that one was recorded already."""
    with Session(engine) as session:
        session.add(JobCheckpoint(job_id=job_id, at=at))
        try:
            session.commit()
        except IntegrityError:
            return False
        job = session.exec(select(Job).where(Job.job_id == job_id)).first()
        if job is not None and (job.last_checkpoint_at is None or as_utc(job.last_checkpoint_at) < as_utc(at)):
            job.last_checkpoint_at = at
            session.add(job)
            session.commit()
    return True


def job_checkpoints(engine: Engine, job_id: str) -> list[datetime]:
    with Session(engine) as session:
        return [
            as_utc(c.at)
            for c in session.exec(
                select(JobCheckpoint).where(JobCheckpoint.job_id == job_id).order_by(col(JobCheckpoint.at))
            )
        ]


def _reconcile_jobs(
    engine: Engine,
    scheduler: str,
    observed: Sequence[JobHistory],
    seen_at: datetime,
    gpus_per_node: Callable[[Sequence[str]], int | None],
) -> None:
    with Session(engine) as session:
        if scheduler == SIM:
            # The simulated scheduler's passes write these rows too: none runs while this
            # does, and a row a pass changed since it was listed waits for the next sync.
            _lock_sim_scheduler(session)
        rows = {j.job_id: j for j in session.exec(select(Job).where(Job.scheduler == scheduler))}
        ids = [seen.job_id for seen in observed]
        ran_by: dict[str, datetime] = {}
        for job_id, when in [
            *session.exec(
                select(JobRestart.job_id, JobRestart.fault_seen_at).where(
                    col(JobRestart.job_id).in_(ids), JobRestart.scheduler == scheduler
                )
            ),
            *session.exec(select(JobCheckpoint.job_id, JobCheckpoint.at).where(col(JobCheckpoint.job_id).in_(ids))),
        ]:
            ran_by[job_id] = _earliest(ran_by.get(job_id), when)
        for seen in observed:
            row = rows.get(seen.job_id) or Job(job_id=seen.job_id, scheduler=scheduler)
            if scheduler == SIM and row.id is not None and (row.state, tuple(row.nodes)) != (seen.state, seen.nodes):
                continue
            row.name, row.state, row.node_count = seen.name, seen.state, seen.node_count
            if seen.nodes:
                row.nodes = list(seen.nodes)
            gpus = seen.gpus_per_node or gpus_per_node(seen.nodes)
            if gpus:
                row.gpus_per_node = gpus
            row.submitted_at = _earliest(row.submitted_at if row.id else None, seen.submitted_at) or seen_at
            row.started_at = _earliest(
                row.started_at, seen.started_at, ran_by.get(seen.job_id) if seen.started_at or row.started_at else None
            )
            row.ended_at = seen.ended_at
            if seen.state == "running" and seen.started_at is not None:
                row.run_started_at = seen.started_at  # its latest run's: Slurm moves it at a requeue
            row.restart_count = max(row.restart_count or 0, seen.restart_count)
            row.seen_at = seen_at
            session.add(row)
        listed = {seen.job_id for seen in observed}
        for job_id, row in rows.items():
            # Only a job an earlier sync saw: one that began after the listing is not gone.
            if job_id not in listed and row.ended_at is None and row.seen_at is not None:
                row.ended_at = row.seen_at
                row.state = "gone" if row.state in ("running", "pending") else row.state
                session.add(row)
        session.commit()
