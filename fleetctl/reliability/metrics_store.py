"""The database loader of the reliability metrics: node_events, jobs, restarts and check runs
as the plain records `fleetctl.reliability.metrics` computes on. Nothing is computed here."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from typing import TYPE_CHECKING

from sqlmodel import Session, col, or_, select

from fleetctl.checks.profiles import UnknownProfile, load_profile
from fleetctl.checks.stragglers import STRAGGLER_METRICS
from fleetctl.db.models import (
    CheckRun,
    Job,
    JobCheckpoint,
    JobRestart,
    Node,
    NodeEvent,
    RemediationRun,
    RemediationStep,
    RmaRecord,
)
from fleetctl.durations import as_utc
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.reliability.metrics import (
    REPAIRING_ACTIONS,
    CheckSample,
    FleetHistory,
    JobRecord,
    NodeHistory,
    NodeRecord,
    RestartRecord,
    RmaOutcome,
    Transition,
)
from fleetctl.remediation.lemons import remediations
from fleetctl.remediation.rma import rma_outcome

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def _utc_or_none(value: datetime | None) -> datetime | None:
    return None if value is None else as_utc(value)


def transition_of(e: NodeEvent) -> Transition:
    """A node_events row as a Transition."""
    return Transition(e.node_name, e.from_state, e.to_state, as_utc(e.at), e.trigger, e.cause, e.actor_kind, e.failure)


def load_history(engine: Engine, since: datetime) -> FleetHistory:
    """Every node's full transition history (the state at `since` depends on all of it), the
    jobs that may have run since `since` with their restarts, and the straggler checks' runs."""
    with Session(engine) as session:
        nodes = list(session.exec(select(Node).order_by(col(Node.name))))
        by_node: dict[str, list[Transition]] = defaultdict(list)
        for e in session.exec(select(NodeEvent).order_by(col(NodeEvent.id))):
            by_node[e.node_name].append(transition_of(e))
        # Remediations as the lemon rule counts them: live runs (dry and shadow runs changed
        # nothing), less those a repeat of their own fault interrupted.
        live_runs: dict[str, list[RemediationRun]] = defaultdict(list)
        for run in session.exec(select(RemediationRun).where(RemediationRun.mode == "live")):
            live_runs[run.node_name].append(run)
        run_starts = {node: [as_utc(r.started_at) for r in remediations(runs)] for node, runs in live_runs.items()}
        # The repairs a live run made (for rule precision): a step that changed the node and passed.
        repairs: dict[str, list[datetime]] = defaultdict(list)
        for node_name, finished_at in session.exec(
            select(RemediationStep.node_name, RemediationStep.finished_at)
            .join(RemediationRun, col(RemediationRun.run_key) == col(RemediationStep.run_key))
            .where(
                RemediationRun.mode == "live",
                RemediationStep.status == "passed",
                col(RemediationStep.action).in_(sorted(REPAIRING_ACTIONS)),
            )
        ):
            repairs[node_name].append(as_utc(finished_at))
        # How each RMA ended (for rule precision): open, a part replaced, or no fault found.
        rmas: dict[str, list[RmaOutcome]] = defaultdict(list)
        for node_name, opened_at, status, replaced in session.exec(
            select(RmaRecord.node_name, RmaRecord.opened_at, RmaRecord.status, RmaRecord.replaced)
        ):
            rmas[node_name].append(RmaOutcome(as_utc(opened_at), rma_outcome(status, replaced)))
        jobs = list(
            session.exec(
                select(Job).where(
                    col(Job.started_at).is_not(None), or_(col(Job.ended_at).is_(None), col(Job.ended_at) >= since)
                )
            )
        )
        restarts: dict[str, list[RestartRecord]] = defaultdict(list)
        checkpoints: dict[str, list[datetime]] = defaultdict(list)
        if jobs:
            ids = [j.job_id for j in jobs]
            query = select(JobRestart).where(col(JobRestart.job_id).in_(ids))
            for r in session.exec(query.order_by(col(JobRestart.id))):
                restarts[r.job_id].append(
                    RestartRecord(as_utc(r.fault_seen_at), _utc_or_none(r.running_at), r.status, r.cause, r.failure)
                )
            for c in session.exec(select(JobCheckpoint).where(col(JobCheckpoint.job_id).in_(ids))):
                checkpoints[c.job_id].append(as_utc(c.at))
        profiles = {n.name: n.profile for n in nodes if n.state != NodeState.RETIRED.value}
        checks = sorted({check for check, _, _ in STRAGGLER_METRICS})
        runs = session.exec(
            select(CheckRun.node_name, CheckRun.check_name, CheckRun.metrics)
            .where(col(CheckRun.check_name).in_(checks))
            .order_by(col(CheckRun.finished_at), col(CheckRun.id))
        )
        samples = [
            CheckSample(node, profiles[node], check, metrics or {}) for node, check, metrics in runs if node in profiles
        ]
    gpus = _profile_gpus({n.profile for n in nodes})
    return FleetHistory(
        nodes=[
            NodeHistory(
                NodeRecord(n.name, n.rack, n.profile, as_utc(n.created_at), gpus.get(n.profile, 0)),
                tuple(by_node.get(n.name, ())),
                tuple(sorted(run_starts.get(n.name, ()))),
                tuple(sorted(repairs.get(n.name, ()))),
                tuple(sorted(rmas.get(n.name, ()), key=lambda r: r.opened_at)),
            )
            for n in nodes
        ],
        jobs=[
            JobRecord(
                j.job_id,
                as_utc(j.started_at),
                _utc_or_none(j.ended_at),
                _utc_or_none(j.last_checkpoint_at),
                tuple(restarts.get(j.job_id, ())),
                j.name,
                tuple(sorted(checkpoints.get(j.job_id, ()))),
                j.node_count * j.gpus_per_node,
                j.restart_count,
                j.state,
            )
            for j in jobs
            if j.started_at is not None
        ],
        check_samples=samples,
    )


def _profile_gpus(profiles: set[str]) -> dict[str, int]:
    """GPUs per node of each profile; a profile fleetctl does not know counts none."""
    counts = {}
    for name in profiles:
        try:
            counts[name] = load_profile(name).gpu_count
        except UnknownProfile:
            continue
    return counts
