"""Production straggler findings (`straggler_findings`, migration 0011): written by the
ProductionStragglers judge, read by `job show`, `node show` and the report."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from fleetctl.db.models import Job, StragglerFinding
from fleetctl.durations import as_utc
from fleetctl.jobs.stragglers import MetricVerdict, OpenFinding

OPEN, CLEARED, DRAINED, CLOSED = "open", "cleared", "drained", "closed"


def running_jobs(engine: Engine) -> list[Job]:
    """Every job the schedulers (reconciled by fleetctl.jobs.history_sync) say is running on nodes."""
    with Session(engine) as session:
        return [j for j in session.exec(select(Job).where(Job.state == "running").order_by(Job.job_id)) if j.nodes]


def jobs_by_id(engine: Engine, job_ids: Iterable[str]) -> dict[str, Job]:
    with Session(engine) as session:
        return {j.job_id: j for j in session.exec(select(Job).where(col(Job.job_id).in_(sorted(set(job_ids)))))}


def open_findings(engine: Engine) -> list[StragglerFinding]:
    with Session(engine) as session:
        return list(
            session.exec(
                select(StragglerFinding).where(StragglerFinding.status == OPEN).order_by(col(StragglerFinding.id))
            )
        )


def as_open(rows: Iterable[StragglerFinding]) -> list[OpenFinding]:
    """Stored findings (open_findings) as the straggler decisions read them: by their id."""
    found = []
    for r in rows:
        if r.id is None:
            raise ValueError(f"the finding of {r.node_name} in job {r.job_id} was never stored: it has no id")
        found.append(OpenFinding(r.id, r.job_id, r.node_name, r.metric))
    return found


def record_findings(
    engine: Engine, job: Job, new: Sequence[MetricVerdict], cleared: Sequence[tuple[int, MetricVerdict]], now: datetime
) -> None:
    """New findings of `job`, and the open ones its nodes' new verdicts cleared, at once."""
    with Session(engine) as session:
        for v in new:
            session.add(
                StragglerFinding(
                    job_id=job.job_id,
                    node_name=v.node,
                    metric=v.metric,
                    evidence=v.evidence,
                    value=v.value,
                    median=v.median,
                    robust_z=v.robust_z,
                    job_restart_count=job.restart_count or 0,
                    found_at=now,
                )
            )
        for finding_id, v in cleared:
            row = session.get(StragglerFinding, finding_id)
            if row is not None and row.status == OPEN:
                row.status, row.resolved_at, row.detail = CLEARED, now, f"back in line: {v.evidence}"
                session.add(row)
        session.commit()


def resolve(engine: Engine, finding_ids: Sequence[int], status: str | None, detail: str, now: datetime) -> None:
    """Close open findings as `status` with why; status None only notes why they stay open
    (the capacity guard held the drain)."""
    with Session(engine) as session:
        for row in session.exec(select(StragglerFinding).where(col(StragglerFinding.id).in_(list(finding_ids)))):
            if row.status != OPEN:
                continue
            row.detail = detail
            if status is not None:
                row.status, row.resolved_at = status, now
            session.add(row)
        session.commit()


def findings(
    engine: Engine,
    *,
    job_id: str | None = None,
    node: str | None = None,
    since: datetime | None = None,
    limit: int = 200,
) -> list[StragglerFinding]:
    """Findings of a job or a node (or found since `since`), newest first; the open ones
    always, whenever found."""
    query = select(StragglerFinding)
    if job_id is not None:
        query = query.where(StragglerFinding.job_id == job_id)
    if node is not None:
        query = query.where(StragglerFinding.node_name == node)
    if since is not None:
        query = query.where((StragglerFinding.found_at >= since) | (StragglerFinding.status == OPEN))
    with Session(engine) as session:
        return list(
            session.exec(
                query.order_by(col(StragglerFinding.found_at).desc(), col(StragglerFinding.id).desc()).limit(limit)
            )
        )


def finding_row(f: StragglerFinding) -> dict[str, Any]:
    """A finding as the CLI and the report show it."""
    return {
        "id": f.id,
        "job_id": f.job_id,
        "node": f.node_name,
        "metric": f.metric,
        "status": f.status,
        "evidence": f.evidence,
        "value": f.value,
        "median": f.median,
        "robust_z": f.robust_z,
        "found_at": as_utc(f.found_at).isoformat(),
        "resolved_at": as_utc(f.resolved_at).isoformat() if f.resolved_at else None,
        "detail": f.detail,
    }
