"""Hung jobs' findings (`hang_findings`, migration 0025): written by the HungJobs judge's
activity each tick, read by `job show`, the report and the exporter."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from fleetctl.db.models import HangFinding, Job
from fleetctl.durations import as_utc
from fleetctl.jobs.hang import HangState, HangVerdict


def record_verdicts(
    engine: Engine,
    verdicts: Sequence[tuple[HangVerdict, datetime]],
    judged: Collection[str],
    running: Collection[str],
    now: datetime,
) -> None:
    """One tick's verdicts of late jobs, each with the job's last progress: the same hang
    (job, state, suspects, progress) seen again is last seen now, a new one a new row. The
    open findings this tick did not find again are resolved: a job it judged (`judged`, this
    fleet's running jobs) that is no longer late or is being restarted, and a job no longer
    running anywhere (not in `running`)."""
    with Session(engine) as session:
        still: set[int] = set()
        open_rows = list(session.exec(select(HangFinding).where(col(HangFinding.resolved_at).is_(None))))
        for verdict, progress_at in verdicts:
            key = (verdict.job_id, verdict.state.value, list(verdict.suspects), as_utc(progress_at))
            row = next((r for r in open_rows if (r.job_id, r.state, r.suspects, as_utc(r.progress_at)) == key), None)
            if row is None:
                row = HangFinding(
                    job_id=verdict.job_id,
                    state=verdict.state.value,
                    suspects=list(verdict.suspects),
                    localised=verdict.localised.value,
                    evidence=verdict.evidence,
                    progress_at=progress_at,
                    found_at=now,
                    last_seen_at=now,
                )
            else:
                row.localised, row.evidence, row.last_seen_at = verdict.localised.value, verdict.evidence, now
            session.add(row)
            session.flush()
            if row.id is not None:
                still.add(row.id)
        for row in open_rows:
            if row.id not in still and (row.job_id in judged or row.job_id not in running):
                row.resolved_at = now
                session.add(row)
        session.commit()


def findings(engine: Engine, *, job_id: str | None = None, since: datetime | None = None) -> list[HangFinding]:
    """A job's findings (or those last seen since `since`), newest first; the open ones always."""
    query = select(HangFinding)
    if job_id is not None:
        query = query.where(HangFinding.job_id == job_id)
    if since is not None:
        query = query.where((col(HangFinding.last_seen_at) >= since) | col(HangFinding.resolved_at).is_(None))
    with Session(engine) as session:
        return list(session.exec(query.order_by(col(HangFinding.found_at).desc(), col(HangFinding.id).desc())))


def jobs_hung_now(engine: Engine) -> dict[str, list[str]]:
    """The jobs the judge's latest ticks found hung and still do, each with its nodes (none
    when the scheduler no longer lists it)."""
    query = (
        select(HangFinding.job_id, Job.nodes)
        .join(Job, col(Job.job_id) == col(HangFinding.job_id), isouter=True)
        .where(HangFinding.state == HangState.HUNG.value, col(HangFinding.resolved_at).is_(None))
    )
    with Session(engine) as session:
        return {job_id: list(nodes or []) for job_id, nodes in session.exec(query)}


def finding_row(f: HangFinding) -> dict[str, Any]:
    """A finding as `job show`, the report and their JSON show it."""
    return {
        "id": f.id,
        "job_id": f.job_id,
        "state": f.state,
        "suspects": list(f.suspects),
        "localised": f.localised,
        "evidence": f.evidence,
        "progress_at": as_utc(f.progress_at).isoformat(),
        "found_at": as_utc(f.found_at).isoformat(),
        "last_seen_at": as_utc(f.last_seen_at).isoformat(),
        "resolved_at": as_utc(f.resolved_at).isoformat() if f.resolved_at else None,
    }
