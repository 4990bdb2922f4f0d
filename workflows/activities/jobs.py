"""Activities of JobRestart: one small step each against a scheduler or the database, safe to
run again (a retry after a lost answer must not restart a job twice or move a timestamp)."""

from __future__ import annotations

import re
import time
from collections.abc import Sequence
from datetime import datetime
from typing import NamedTuple, Protocol

from sqlalchemy.engine import Engine
from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.config import Settings
from fleetctl.db import jobs, queries
from fleetctl.db import spares as spare_store
from fleetctl.db.models import NodeEvent, utcnow
from fleetctl.jobs import spares_sync
from fleetctl.jobs.placement import (
    FLEET_WIDE,
    IN_ISLAND,
    NOT_PLACED,
    Placement,
    healthy_replacements,
    place_restart,
    restart_exclusions,
    restart_island,
    unchecked_nodes,
    unfit,
)
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.nodes.view_store import freshness, node_health
from fleetctl.schedulers.base import (
    HoldsSpares,
    PlacesRestarts,
    RequeuesEarly,
    Scheduler,
    SchedulerError,
    SchedulerJob,
)
from fleetctl.schedulers.combined import CombinedScheduler
from fleetctl.workflows.activities.database import DatabaseActivities, calling_workflow_id
from fleetctl.workflows.activities.heartbeat import heartbeating
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.activities.spares import refill_spares
from fleetctl.workflows.api import (
    DrainNodes,
    RestartJob,
    RestartOutcome,
    RestartStarted,
    RestartStep,
    WaitForJob,
    fault_restart_id,
)


class RestartPlacer(Scheduler, PlacesRestarts, Protocol):
    """A scheduler that can restart a job onto the nodes fleetctl names."""


def running_off(job: SchedulerJob, bad_nodes: list[str]) -> bool:
    """The job runs, and on none of the bad nodes: restarted (or never on them)."""
    return job.state == "running" and not set(job.nodes) & set(bad_nodes)


# A restart whose caller names no failure (the node's workflow's) records its cause as the
# text of the drain behind it: NodeLifecycle's (`XID <code>: ...`, `health: ...`), its
# rechecks', sweeps' and the prolog's (workflows.activities.prejob): "<kind> <suite>: <check>:
# <reason>", or an operator's ("operator: ..."). Its failure is read out of that text once,
# when its row is written, by the rules migration 0018 classified older rows with.
_XID = re.compile(r"\bXID (\d+)", re.IGNORECASE)
# A check the node passed, but well below its peers: "...: <check>: straggler: <finding>".
_CHECK = re.compile(r"^(?:drained: )?(?:recheck|active check|prolog) [^:]*: ([\w.-]+):( straggler:)?")
# A node behind its job's other nodes in production (workflows.definitions.stragglers).
_PRODUCTION_STRAGGLER = re.compile(r"^straggler ([\w.-]+) in job ")


def failure_said_in(cause: str) -> str:
    """`xid <code>`, `check <name>`, `straggler <check or metric>`, `health` or `operator` when
    a restart's cause names one, else ""."""
    if match := _XID.search(cause):
        return f"xid {match[1]}"
    if match := _CHECK.match(cause):
        return f"{'straggler' if match[2] else 'check'} {match[1]}"
    if match := _PRODUCTION_STRAGGLER.match(cause):
        return f"straggler {match[1]}"
    if cause.startswith("health:"):
        return "health"
    return "operator" if cause.startswith("operator") else ""


def fault_drain(events: Sequence[NodeEvent]) -> int | None:
    """The state version of the drain that took the node out of service, while it still is
    (its transitions oldest first); None when it is in service, or left service otherwise
    (a failed burn-in has no fault to restart a job for)."""
    for event in reversed(events):
        if event.to_state == NodeState.DRAINING.value:
            return event.state_version
        if not NodeState(event.to_state).out_of_service:
            return None
    return None


def restart_id_of_fault(engine: Engine, nodes: Sequence[str]) -> str:
    """The restart id of the fault that took `nodes` out of service (fault_restart_id, joined
    for several), or "" when one of them is not out of service for a fault."""
    ids = []
    for node in sorted(set(nodes)):
        version = fault_drain(queries.node_events(engine, node))
        if version is None:
            return ""
        ids.append(fault_restart_id(node, version))
    return "+".join(ids)


class Candidates(NamedTuple):
    """The nodes in production for fleetctl that a restart may take (JobRestartActivities._candidates)."""

    healthy: list[str]
    unfit: dict[str, str]  # with why each may not take it
    unchecked: set[str]  # taken last


class JobRestartActivities(DatabaseActivities):
    def __init__(self, settings: Settings, schedulers: SchedulerRegistry):
        super().__init__(settings)
        self.schedulers = schedulers
        self.scheduler = schedulers.get

    @activity.defn
    def restart_id_of_fault(self, nodes: list[str]) -> str:
        """restart_id_of_fault, for a workflow: a runbook restarting the jobs of its node."""
        return restart_id_of_fault(self.engine, nodes)

    @activity.defn
    def record_restart_started(self, started: RestartStarted) -> None:
        jobs.record_restart_started(
            self.engine,
            workflow_id=started.workflow_id,
            job_id=started.job_id,
            scheduler=started.scheduler,
            bad_nodes=started.bad_nodes,
            cause=started.cause,
            actor=started.actor,
            restart_id=started.restart_id,
            fault_seen_at=datetime.fromisoformat(started.fault_seen_at),
            failure=started.failure or failure_said_in(started.cause),
        )

    @activity.defn
    @heartbeating
    def drain_nodes(self, req: DrainNodes) -> None:
        """Cordon the bad nodes in the scheduler only: their lifecycle state belongs to their
        own workflows. Draining a drained node again changes nothing."""
        scheduler = self.scheduler(req.scheduler)
        for node in req.nodes:
            scheduler.drain(node, req.reason)

    @activity.defn
    @heartbeating
    def restart_job(self, req: RestartJob) -> None:
        """Requeue the job off the bad nodes, onto healthy free nodes of its island when it
        has enough and the scheduler can be told (fleetctl.jobs.placement), and record the choice
        on the restart (keyed by this workflow's id, as the restart's row is)."""
        scheduler = self.scheduler(req.scheduler)
        job = scheduler.job(req.job_id)
        # A retry whose first attempt went through finds the job already off the bad nodes;
        # requeueing it again would cost the job a second restart.
        if running_off(job, req.exclude_nodes):
            return
        workflow_id = calling_workflow_id()
        if job.nodes:  # where it ran when the fault was seen: its replacements are the rest
            jobs.record_restart_step(self.engine, workflow_id, nodes_before=list(job.nodes))
        kind, placer = self._placer(scheduler, req.scheduler, req.job_id)
        if job.nodes and isinstance(placer, RequeuesEarly):
            # The job must wait a moment after its requeue anyway (Slurm: the credential-revoke
            # second): requeue it now and decide its placement in that moment. Retried, it
            # finds the job pending and takes the branch below.
            placer.requeue(req.job_id)
        # Read once for the placement and the exclusions: every node of the kind's health.
        fit = self._candidates(kind)
        if not job.nodes:
            # Pending already: an earlier attempt requeued it after recording its placement,
            # and may have died before naming the nodes; naming them again changes nothing.
            recorded, placed_on = jobs.restart_placement(self.engine, workflow_id)
            if recorded == IN_ISLAND and placed_on and placer is not None:
                self._take_spares(placer, *jobs.restart_spares(self.engine, workflow_id))
                placer.restart_job_on(
                    req.job_id,
                    self._excluded(scheduler, kind, placer, req.job_id, req.exclude_nodes, fit.unfit, placed_on),
                    placed_on,
                )
            else:
                scheduler.restart_job(
                    req.job_id, self._excluded(scheduler, kind, placer, req.job_id, req.exclude_nodes, fit.unfit)
                )
            return
        placement = self._placement(kind, placer, req, job.nodes, fit)
        jobs.record_restart_step(
            self.engine,
            workflow_id,
            island=placement.island,
            placement=placement.placement,
            placement_detail=placement.detail,
            placed_on=list(placement.nodes),
            spares_taken=list(placement.spares),
        )
        if placement.nodes and placer is not None:  # nodes are named only through a placer
            self._take_spares(placer, placement.island, placement.spares)
            placer.restart_job_on(
                req.job_id,
                self._excluded(scheduler, kind, placer, req.job_id, req.exclude_nodes, fit.unfit, placement.nodes),
                placement.nodes,
            )
        else:
            scheduler.restart_job(
                req.job_id, self._excluded(scheduler, kind, placer, req.job_id, req.exclude_nodes, fit.unfit)
            )

    @staticmethod
    def _member(scheduler: Scheduler, kind: str, job_id: str) -> tuple[str, Scheduler]:
        """The kind of scheduler that runs the job, and it: on a node several run (SUNK), the
        member that knows the job."""
        if isinstance(scheduler, CombinedScheduler):
            return scheduler.member_for(job_id)
        return kind, scheduler

    @classmethod
    def _placer(cls, scheduler: Scheduler, kind: str, job_id: str) -> tuple[str, RestartPlacer | None]:
        """The kind of scheduler that runs the job and, when it can be told nodes, it."""
        kind, member = cls._member(scheduler, kind, job_id)
        return kind, member if isinstance(member, PlacesRestarts) else None

    def _placement(
        self, kind: str, placer: RestartPlacer | None, req: RestartJob, job_nodes: Sequence[str], fit: Candidates
    ) -> Placement:
        where = jobs.fabric(self.engine)
        if placer is None:
            return Placement(
                restart_island(job_nodes, req.exclude_nodes, where),
                NOT_PLACED,
                (),
                f"the {kind} scheduler places the job itself",
            )
        busy = placer.busy_nodes()
        free = [n for n in fit.healthy if n not in busy]
        # Spares only where the scheduler holds them: elsewhere a held node is an ordinary one.
        spares = spare_store.held(self.engine) if isinstance(placer, HoldsSpares) else {}
        held = jobs.held_nvlink_domains(self.engine)
        while True:
            placement = place_restart(job_nodes, req.exclude_nodes, where, free, list(spares), held, fit.unchecked)
            # fleetctl may still have in production a node its scheduler has drained (a restart
            # drains its bad nodes in the scheduler only): a job named onto it would wait there
            # until released. The few nodes chosen are asked, and the choice made again without them.
            drained = {n for n in placement.nodes if n not in job_nodes and placer.node_state(n).drained}
            if not drained:
                return placement
            free = [n for n in free if n not in drained]
            spares = {n: island for n, island in spares.items() if n not in drained}

    def _candidates(self, kind: str) -> Candidates:
        """The nodes in production for fleetctl run by `kind`, as (healthy, unfit with why,
        unchecked): a node with a failed or erroring check, a held drain, a suspect or
        straggler finding never takes a restarted job (fleetctl.jobs.placement.unfit); one
        `node list` shows Unchecked (no check yet, or evidence older than the fleet's sweep
        interval) is taken last."""
        candidates = jobs.restart_candidates(self.engine, kind)
        health = node_health(
            self.engine,
            candidates,
            freshness(self.engine, self.settings.fleet, self.settings.agent_silence_s, utcnow()),
        )
        healthy = set(healthy_replacements(health[n] for n in candidates if n in health))
        return Candidates(
            [n for n in candidates if n in healthy],
            {n: unfit(health[n]) if n in health else "unknown to fleetctl" for n in candidates if n not in healthy},
            unchecked_nodes(health.values()),
        )

    def _excluded(
        self,
        scheduler: Scheduler,
        kind: str,
        placer: RestartPlacer | None,
        job_id: str,
        bad_nodes: Sequence[str],
        unfit_nodes: dict[str, str],
        named: Sequence[str] = (),
    ) -> list[str]:
        """The nodes a restarted job must avoid (fleetctl.jobs.placement.restart_exclusions): the
        bad ones and every unfit one, told to a scheduler that can be told (Slurm's ExcNodeList,
        kept when named nodes are released for the fleet; the simulated scheduler's). One that
        cannot (Kubernetes) avoids only cordoned nodes: while an unfit node is open to it the
        restart is refused, a SchedulerError the activity's retries wait out."""
        kind, member = self._member(scheduler, kind, job_id)
        told = placer is not None
        kept_off = () if told else [n for n in unfit_nodes if member.node_state(n).drained]
        exclusions = restart_exclusions(kind, bad_nodes, unfit_nodes, named, told, kept_off)
        if exclusions.refused:
            raise SchedulerError(f"restart of job {job_id}: {exclusions.refused}")
        return list(exclusions.nodes)

    def _take_spares(self, placer: RestartPlacer, island: str, spares: Sequence[str]) -> None:
        """Hand the spares the placement named from the island's pool to the job (the
        scheduler kept every job off them until now); again on a retry, which changes nothing."""
        if spares and isinstance(placer, HoldsSpares):  # a placement names spares only where it holds them
            spares_sync.take(self.engine, placer, island, spares)

    @activity.defn
    def wait_until_running(self, req: WaitForJob) -> list[str]:
        """Poll until the job runs off the bad nodes; its new nodes. Heartbeats every poll."""
        scheduler = self.scheduler(req.scheduler)
        deadline = time.monotonic() + req.timeout_s
        workflow_id = calling_workflow_id()
        # Named island nodes that have not taken the job by then are released (a retry after
        # a lost worker waits again, from its own start: the record says whether it still must).
        release_at = (
            time.monotonic() + self.settings.restart_island_wait_s
            if jobs.restart_placement(self.engine, workflow_id)[0] == IN_ISLAND
            else None
        )
        while True:
            job = scheduler.job(req.job_id)
            if running_off(job, req.exclude_nodes):
                island, taken = jobs.restart_spares(self.engine, workflow_id)
                if taken:
                    # It runs on the spares it took: the island's pool takes idle nodes again.
                    refill_spares(self.engine, self.settings, self.schedulers, f"job {req.job_id} took spares", island)
                return list(job.nodes)
            if release_at is not None and time.monotonic() > release_at and job.state == "pending":
                self._fall_back(self._placer(scheduler, req.scheduler, req.job_id)[1], req.job_id, workflow_id)
                release_at = None
            if time.monotonic() > deadline:
                raise ApplicationError(
                    f"job {req.job_id} not running again after {req.timeout_s:g}s (last seen {job.state})",
                    type="JobNotRunning",
                    non_retryable=True,
                )
            activity.heartbeat(job.state)
            time.sleep(req.poll_interval_s)

    def _fall_back(self, placer: RestartPlacer | None, job_id: str, workflow_id: str) -> None:
        if placer is not None:  # an island placement was made through it
            placer.release_nodes(job_id)
        wait = self.settings.restart_island_wait_s
        jobs.record_restart_step(
            self.engine,
            workflow_id,
            placement=FLEET_WIDE,
            placement_detail=f"the island's named nodes had not taken the job after {wait:g}s: "
            "any healthy node in the fleet",
        )

    @activity.defn
    def record_restart_step(self, step: RestartStep) -> None:
        if step.step not in ("drained_at", "requeued_at"):
            raise ApplicationError(f"unknown restart step {step.step!r}", non_retryable=True)
        jobs.record_restart_step(self.engine, step.workflow_id, **{step.step: datetime.fromisoformat(step.at)})

    @activity.defn
    def record_restart_outcome(self, outcome: RestartOutcome) -> None:
        values: dict[str, object] = {"status": outcome.status, "error": outcome.error, "new_nodes": outcome.new_nodes}
        if outcome.running_at:
            values["running_at"] = datetime.fromisoformat(outcome.running_at)
        if outcome.status == "succeeded":
            # Where it landed first: whoever reads the restart as succeeded reads that too.
            jobs.record_restart_landing(self.engine, outcome.workflow_id, outcome.new_nodes)
        jobs.record_restart_step(self.engine, outcome.workflow_id, **values)
