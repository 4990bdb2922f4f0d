"""The rows `node list` and `node show` print: each node's state with its health (conditions
from its latest checks and the capacity guard), the reason it is out of service or held,
and the jobs it runs. Reads the database in a few bulk queries; decides in
fleetctl.nodes.conditions."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from fleetctl.db import gpu_quarantines, queries
from fleetctl.durations import as_utc
from fleetctl.nodes.conditions import (
    CheckRow,
    CheckSummary,
    Condition,
    DrainHeld,
    RunRow,
    RunStatus,
    conditions,
    health_word,
    held_by,
    reason,
    remediation_condition,
    stale_evidence,
    summarise_checks,
)

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from fleetctl.db.models import (
        AutomationEvent,
        CheckRun,
        HealthEvent,
        Node,
        NodeEvent,
        RemediationRun,
        RemediationStep,
    )
    from fleetctl.db.queries import Suspicion
    from fleetctl.jobs.placement import NodeHealth

# How many of a node's latest check runs `node show` summarises (a streak longer than this
# is shown as this many runs, "at least").
SHOW_CHECK_RUNS = 500
# Schedulers whose jobs the database mirrors (the simulated one's); for the others the JOBS
# cell is unknown (null) rather than an empty list that would read "no jobs".
MIRRORED_SCHEDULERS = frozenset({"sim"})


def _check_row(run: CheckRun) -> CheckRow:
    return CheckRow(run.check_name, run.status, run.reason, run.finished_at, run.error_kind, dict(run.metrics or {}))


def summary_dict(s: CheckSummary) -> dict[str, Any]:
    return {
        "check": s.check,
        "status": s.status,
        "reason": s.reason,
        "at": s.at,
        "since": s.since,
        "runs": s.runs,
        "error_kind": s.error_kind,
        "metrics": s.metrics,
    }


def held_dict(h: DrainHeld | None) -> dict[str, Any] | None:
    return (
        None
        if h is None
        else {
            "reason": h.reason,
            "held_by": held_by(h.reason),
            "since": h.since,
            "last": h.last,
            "refusals": h.refusals,
        }
    )


def running_jobs_by_node(engine: Engine) -> dict[str, list[str]]:
    """Per node, the ids of the jobs the database mirrors as running on it."""
    from fleetctl.db.jobs import list_jobs

    by_node: dict[str, list[str]] = {}
    for job in list_jobs(engine):
        if job.state == "running":
            for n in job.nodes:
                by_node.setdefault(n, []).append(job.job_id)
    return by_node


def node_row(
    n: Node,
    checks: Sequence[CheckSummary],
    held: DrainHeld | None,
    last: NodeEvent | None,
    jobs: dict[str, list[str]],
    wide: bool,
    suspect: Suspicion | None = None,
    stalled: AutomationEvent | None = None,
    freshness: Freshness | None = None,
    drained_outside: HealthEvent | None = None,
    remediation: Remediation | None = None,
    asked: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, Any]:
    judged = Condition("Suspect", suspect.reason, suspect.since) if suspect is not None else None
    needs_operator = _remediation_condition(n, remediation, freshness.now if freshness is not None else None)
    stall = Condition("Stalled", stalled.reason, stalled.at) if stalled is not None else None
    running = _running(n, jobs, asked)
    stale = None
    if freshness is not None:
        stale = stale_evidence(
            n.state,
            checks,
            as_utc(n.agent_seen_at) if n.agent_seen_at else None,
            freshness.now,
            freshness.sweep_every_s,
            freshness.agent_silence_s,
            running,
        )
    found = conditions(
        n.state,
        checks,
        held,
        last.cause if last else "",
        judged,
        stall,
        n.state_since,
        stale,
        _drained_outside(drained_outside),
        needs_operator,
    )
    row = {
        "name": n.name,
        "state": n.state,
        "health": health_word(n.state, found, checks),
        "suspect": suspect.reason if suspect is not None else None,
        "conditions": [c.to_dict() for c in found],
        "reason": reason(
            n.state, last.cause if last else "", last.actor if last else "", last.at if last else None, held
        ),
        "jobs": running,
        "drain_held": held_dict(held),
        # A failed or stuck runbook run waiting for an operator (RemediationFailed, RemediationStuck).
        "needs_operator": None if needs_operator is None else needs_operator.to_dict(),
        "rack": n.rack,
        "switch": n.switch,
        "island": n.island,
        "position": n.position,
        "nvlink_domain": n.nvlink_domain,
        "profile": n.profile,
        "scheduler": n.scheduler,
        "address": n.address,
        "labels": n.labels,
        "state_since": n.state_since,
        "agent_seen_at": n.agent_seen_at,
    }  # None: no agent heard
    if wide:
        row.update({"bmc": n.bmc_address, "user": n.ssh_user, "state_version": n.state_version})
    return row


def _running(n: Node, mirrored: dict[str, list[str]], asked: Mapping[str, Sequence[str]] | None) -> list[str] | None:
    """The node's jobs: as its scheduler named them when asked (`asked`, by the caller: a
    scheduler the database does not mirror, as `job list --node` asks it), or as the database
    mirrors them; None when neither knows."""
    if asked is not None and n.name in asked:
        return list(asked[n.name])
    return mirrored.get(n.name, []) if n.scheduler in MIRRORED_SCHEDULERS else None


@dataclass(frozen=True)
class Freshness:
    """What `Stale` judges the evidence's age by (conditions.stale_evidence): the fleet's
    sweep interval (None: not known), the agent silence setting, and now."""

    sweep_every_s: float | None
    agent_silence_s: float
    now: datetime


@dataclass(frozen=True)
class Remediation:
    """A node's newest live runbook run, as its condition judges it, and whether an RMA of the
    node is held for an operator's confirmation (which says so itself)."""

    run: RunRow
    rma_held: bool = False


def _run_row(run: RemediationRun, steps: Sequence[RemediationStep]) -> RunRow:
    """The run with the step it stopped at: its failed step, or the last it finished."""
    stopped = next((st for st in reversed(steps) if st.status == "failed"), None) or (steps[-1] if steps else None)
    return RunRow(
        run.run_key,
        run.runbook,
        run.status,
        as_utc(run.started_at),
        as_utc(run.finished_at) if run.finished_at else None,
        stopped.name if stopped is not None else "",
        stopped.detail if stopped is not None else "",
        max(as_utc(st.finished_at) for st in steps) if steps else None,
    )


def remediations(engine: Engine, names: Sequence[str] | None = None) -> dict[str, Remediation]:
    """Each node's (of `names`, or every node's) newest live run, in three queries."""
    from fleetctl.db.remediation import newest_live_runs, rma_records
    from fleetctl.remediation.rma import AWAITING_CONFIRMATION

    held = {r.node_name for r in rma_records(engine, AWAITING_CONFIRMATION)}
    return {
        node: Remediation(_run_row(run, steps), node in held)
        for node, (run, steps) in newest_live_runs(engine, None if names is None else list(names)).items()
        if run.status in (RunStatus.FAILED.value, RunStatus.RUNNING.value)
    }


def remediation_conditions(engine: Engine, nodes: Sequence[Node], now: datetime) -> dict[str, Condition]:
    """The nodes whose runbook run waits for an operator at `now`, with that condition."""
    runs = remediations(engine, [n.name for n in nodes])
    found = {n.name: _remediation_condition(n, runs.get(n.name), now) for n in nodes}
    return {name: c for name, c in found.items() if c is not None}


def _remediation_condition(n: Node, remediation: Remediation | None, now: datetime | None) -> Condition | None:
    if remediation is None:
        return None
    return remediation_condition(
        n.name,
        n.state,
        remediation.run,
        as_utc(n.state_since) if n.state_since else None,
        now,
        remediation.rma_held,
    )


def _drained_outside(event: HealthEvent | None) -> Condition | None:
    return None if event is None else Condition("DrainedOutside", event.message, as_utc(event.at))


def freshness(engine: Engine, fleet: str, agent_silence_s: float, now: datetime) -> Freshness:
    """`fleet`'s Freshness as of `now`, its sweep interval as `fleetctl schedule` recorded it
    (fleetctl.db.sweep_intervals): one query, whatever the number of nodes."""
    from fleetctl.db import sweep_intervals

    return Freshness(sweep_intervals.sweep_every_s(engine, fleet), agent_silence_s, now)


def _held(engine: Engine, names: Sequence[str] | None) -> dict[str, DrainHeld]:
    return {
        node: DrainHeld(why, first, last, count)
        for node, (count, first, last, why) in queries.held_drains(engine, names).items()
    }


def node_rows(
    engine: Engine,
    nodes: Iterable[Node],
    wide: bool,
    freshness: Freshness | None = None,
    asked: Mapping[str, Sequence[str]] | None = None,
) -> list[dict[str, Any]]:
    """`node list`'s rows: every node with its health, reason and jobs, in ten queries (the
    sweep interval of `freshness` is one more, read by its caller); `asked`: the jobs the
    schedulers the database does not mirror named per node."""
    nodes = list(nodes)
    names = [n.name for n in nodes]
    latest = queries.latest_check_per_kind(engine, names)
    held = _held(engine, names)
    last = queries.latest_transitions(engine, names)
    jobs = running_jobs_by_node(engine)
    suspect = queries.suspect_nodes(engine)
    stalled = queries.stalled_nodes(engine)
    outside = queries.open_external_drains(engine)
    runs = remediations(engine, names)
    gpus = gpus_out_by_node(engine, names)
    rows = [
        node_row(
            n,
            summarise_checks(_check_row(r) for r in latest.get(n.name, [])),
            held.get(n.name),
            last.get(n.name),
            jobs,
            wide,
            suspect.get(n.name),
            stalled.get(n.name),
            freshness,
            outside.get(n.name),
            runs.get(n.name),
            asked,
        )
        for n in nodes
    ]
    for row in rows:
        row["gpus_out"] = gpus.get(row["name"], [])
    return rows


def gpus_out_by_node(engine: Engine, names: Sequence[str] | None = None) -> dict[str, list[dict[str, Any]]]:
    """The GPUs out of their schedulers (fleetctl.nodes.gpu_quarantine), by node: each GPU's
    PCI address, the Xid that took it out, since when and why."""
    found: dict[str, list[dict[str, Any]]] = {}
    for q in gpu_quarantines.open_quarantines(engine, names):
        found.setdefault(q.node_name, []).append(
            {"node": q.node_name, "gpu": q.gpu, "code": q.code, "since": as_utc(q.quarantined_at), "reason": q.reason}
        )
    return found


def node_health(
    engine: Engine, names: Sequence[str] | None = None, freshness: Freshness | None = None
) -> dict[str, NodeHealth]:
    """Each node (of `names`, or every node) as a restart's placement and the spare pools
    judge it (fleetctl.jobs.placement.unfit, unchecked_nodes): its state, its conditions as
    `node list` shows them (with `freshness`, `Stale` for evidence older than the sweep
    interval, as `node list` judges it), and its open straggler findings. In a few bulk queries."""
    from fleetctl.db import stragglers
    from fleetctl.jobs.placement import NodeHealth

    nodes = queries.list_nodes(engine) if names is None else queries.nodes_named(engine, names)
    names = [n.name for n in nodes]
    latest = queries.latest_check_per_kind(engine, names)
    held = _held(engine, names)
    last = queries.latest_transitions(engine, names)
    suspect = queries.suspect_nodes(engine)
    stalled = queries.stalled_nodes(engine)
    outside = queries.open_external_drains(engine)
    runs = remediations(engine, names)
    open_findings: dict[str, int] = {}
    for f in stragglers.open_findings(engine):
        open_findings[f.node_name] = open_findings.get(f.node_name, 0) + 1
    found = {}
    for n in nodes:
        checks = summarise_checks(_check_row(r) for r in latest.get(n.name, []))
        judged = Condition("Suspect", suspect[n.name].reason, suspect[n.name].since) if n.name in suspect else None
        stall = Condition("Stalled", stalled[n.name].reason, stalled[n.name].at) if n.name in stalled else None
        cause = last[n.name].cause if n.name in last else ""
        stale = (
            None
            if freshness is None
            else stale_evidence(
                n.state,
                checks,
                as_utc(n.agent_seen_at) if n.agent_seen_at else None,
                freshness.now,
                freshness.sweep_every_s,
                freshness.agent_silence_s,
            )
        )
        types = tuple(
            c.type
            for c in conditions(
                n.state,
                checks,
                held.get(n.name),
                cause,
                judged,
                stall,
                stale=stale,
                drained_outside=_drained_outside(outside.get(n.name)),
                remediation=_remediation_condition(
                    n, runs.get(n.name), freshness.now if freshness is not None else None
                ),
            )
        )
        found[n.name] = NodeHealth(n.name, n.state, types, open_findings.get(n.name, 0))
    return found


def node_detail(
    engine: Engine, n: Node, freshness: Freshness | None = None, asked: Sequence[str] | None = None
) -> dict[str, Any]:
    """`node show`: the list row, one summary per check (the current streak of its status),
    health events and recent transitions; `asked`: the jobs the node's scheduler named, when
    the database does not mirror it."""
    checks = summarise_checks(_check_row(r) for r in queries.latest_checks(engine, n.name, limit=SHOW_CHECK_RUNS))
    last = queries.latest_transitions(engine, [n.name]).get(n.name)
    data = node_row(
        n,
        checks,
        _held(engine, [n.name]).get(n.name),
        last,
        running_jobs_by_node(engine),
        wide=True,
        suspect=queries.suspect_nodes(engine).get(n.name),
        stalled=queries.stalled_nodes(engine).get(n.name),
        freshness=freshness,
        drained_outside=queries.open_external_drains(engine).get(n.name),
        remediation=remediations(engine, [n.name]).get(n.name),
        asked=None if asked is None else {n.name: asked},
    )
    data["checks"] = [summary_dict(s) for s in checks]
    data["gpus_out"] = gpus_out_by_node(engine, [n.name]).get(n.name, [])
    data["health_events"] = [
        {
            "source": h.source,
            "code": h.code,
            "severity": h.severity,
            "action": h.action,
            "message": h.message,
            "at": h.at,
        }
        for h in queries.health_events(engine, n.name)
    ]
    return data
