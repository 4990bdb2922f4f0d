"""Remediation runs and their steps, and RMA records. Each function opens its own session."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from fleetctl.db.models import HealthEvent, NodeEvent, RemediationRun, RemediationStep, RmaRecord, utcnow
from fleetctl.durations import as_utc
from fleetctl.remediation.lemons import LemonPolicy, remediation_entries, remediations
from fleetctl.remediation.rma import AWAITING_CONFIRMATION, CLOSED, OPEN, REJECTED


def start_run(
    engine: Engine,
    *,
    run_key: str,
    node_name: str,
    runbook: str,
    event: dict[str, Any],
    mode: str,
    actor: str,
    started_at: datetime,
) -> RemediationRun:
    """Idempotent on run_key: a retried activity finds the run it already wrote."""
    with Session(engine) as session:
        run = session.exec(select(RemediationRun).where(RemediationRun.run_key == run_key)).first()
        if run is not None:
            return run
        run = RemediationRun(
            run_key=run_key,
            node_name=node_name,
            runbook=runbook,
            event=event,
            mode=mode,
            actor=actor,
            started_at=started_at,
        )
        session.add(run)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            return session.exec(select(RemediationRun).where(RemediationRun.run_key == run_key)).one()
        session.refresh(run)
        return run


def record_step(
    engine: Engine,
    *,
    run_key: str,
    node_name: str,
    step_index: int,
    name: str,
    action: str,
    status: str,
    params: dict[str, Any],
    detail: str,
    started_at: datetime,
    finished_at: datetime,
) -> None:
    """Write the step's outcome; a repeat for the same (run, index) overwrites with the same facts."""
    with Session(engine) as session:
        step = session.exec(
            select(RemediationStep).where(RemediationStep.run_key == run_key, RemediationStep.step_index == step_index)
        ).first()
        step = step or RemediationStep(
            run_key=run_key, node_name=node_name, step_index=step_index, name=name, action=action, status=status
        )
        step.status, step.params, step.detail = status, params, detail
        step.started_at, step.finished_at = started_at, finished_at
        session.add(step)
        session.commit()


def finish_run(engine: Engine, run_key: str, status: str, outcome: str, finished_at: datetime) -> None:
    with Session(engine) as session:
        run = session.exec(select(RemediationRun).where(RemediationRun.run_key == run_key)).one()
        run.status, run.outcome, run.finished_at = status, outcome, finished_at
        session.add(run)
        session.commit()


def get_run(engine: Engine, run_key: str) -> RemediationRun | None:
    with Session(engine) as session:
        return session.exec(select(RemediationRun).where(RemediationRun.run_key == run_key)).first()


def runs_by_key(engine: Engine, run_keys: list[str]) -> list[RemediationRun]:
    with Session(engine) as session:
        return list(session.exec(select(RemediationRun).where(col(RemediationRun.run_key).in_(run_keys))))


def runs(engine: Engine, node_name: str | None = None, limit: int = 50) -> list[RemediationRun]:
    with Session(engine) as session:
        query = select(RemediationRun).order_by(col(RemediationRun.id).desc()).limit(limit)
        if node_name:
            query = query.where(RemediationRun.node_name == node_name)
        return list(session.exec(query))


def newest_live_runs(
    engine: Engine, names: list[str] | None = None
) -> dict[str, tuple[RemediationRun, list[RemediationStep]]]:
    """Per node (of `names`, or every node), its newest live run (dry and shadow runs change
    nothing) with its steps in order: two queries, whatever the number of nodes."""
    with Session(engine) as session:
        newest = select(func.max(RemediationRun.id)).where(RemediationRun.mode == "live")
        if names is not None:
            newest = newest.where(col(RemediationRun.node_name).in_(names))
        newest = newest.group_by(RemediationRun.node_name)
        found = list(session.exec(select(RemediationRun).where(col(RemediationRun.id).in_(newest))))
        steps_of = _steps_of(session, [r.run_key for r in found])
        return {r.node_name: (r, steps_of.get(r.run_key, [])) for r in found}


def runs_with_steps(
    engine: Engine, node_name: str | None = None, status: str | None = None, limit: int = 50
) -> list[tuple[RemediationRun, list[RemediationStep]]]:
    """The newest `limit` runs (of one node, of one status), newest first, each with its steps
    in order: `fleetctl runbook runs`."""
    with Session(engine) as session:
        query = select(RemediationRun).order_by(col(RemediationRun.id).desc()).limit(limit)
        if node_name:
            query = query.where(RemediationRun.node_name == node_name)
        if status:
            query = query.where(RemediationRun.status == status)
        found = list(session.exec(query))
        steps_of = _steps_of(session, [r.run_key for r in found])
        return [(r, steps_of.get(r.run_key, [])) for r in found]


def _steps_of(session: Session, run_keys: list[str]) -> dict[str, list[RemediationStep]]:
    """The steps of each run, in order."""
    steps_of: dict[str, list[RemediationStep]] = {}
    if run_keys:
        query = (
            select(RemediationStep)
            .where(col(RemediationStep.run_key).in_(run_keys))
            .order_by(col(RemediationStep.step_index))
        )
        for step in session.exec(query):
            steps_of.setdefault(step.run_key, []).append(step)
    return steps_of


def steps(engine: Engine, run_key: str) -> list[RemediationStep]:
    with Session(engine) as session:
        query = (
            select(RemediationStep).where(RemediationStep.run_key == run_key).order_by(col(RemediationStep.step_index))
        )
        return list(session.exec(query))


def live_run_starts(engine: Engine, node_name: str, since: datetime) -> list[datetime]:
    """When each remediation of the node began since `since`: its live runs (dry runs and shadow
    runs change nothing), less those a repeat of their own fault interrupted
    (`lemons.remediations`)."""
    with Session(engine) as session:
        query = select(RemediationRun).where(
            RemediationRun.node_name == node_name, RemediationRun.mode == "live", RemediationRun.started_at >= since
        )
        return [run.started_at for run in remediations(session.exec(query))]


def maintenance_entries(engine: Engine, node_name: str, since: datetime) -> list[datetime]:
    """When the node entered maintenance to be remediated (drained for a fault, or a phase
    failed), since `since`; the end of a planned drain is none (`lemons.remediation_entries`,
    which reads the whole history: the drain behind an entry may be older than `since`)."""
    with Session(engine) as session:
        events = list(
            session.exec(select(NodeEvent).where(NodeEvent.node_name == node_name).order_by(col(NodeEvent.id)))
        )
    return [at for at in remediation_entries(events) if as_utc(at) >= as_utc(since)]


def times_remediated(engine: Engine, node_name: str, policy: LemonPolicy, now: datetime) -> int:
    """The lemon rule's figure for the node at `now` (`LemonPolicy.times_remediated`)."""
    since = now - policy.window
    return policy.times_remediated(
        live_run_starts(engine, node_name, since), maintenance_entries(engine, node_name, since), now
    )


def runs_since_production(engine: Engine, node_name: str, run_key: str) -> int:
    """Remediations of the node begun since it was last in production (`lemons.remediations`:
    a run a repeat of its own fault interrupted is none), `run_key` not counted: the rungs of
    the ladder this run stands on (a burn-in failed after each)."""
    with Session(engine) as session:
        last = session.exec(
            select(NodeEvent.at)
            .where(NodeEvent.node_name == node_name, NodeEvent.to_state == "production")
            .order_by(col(NodeEvent.at).desc())
        ).first()
        query = select(RemediationRun).where(RemediationRun.node_name == node_name, RemediationRun.mode == "live")
        if last is not None:
            query = query.where(RemediationRun.started_at >= last)
        return sum(1 for run in remediations(session.exec(query)) if run.run_key != run_key)


# ---- RMA ------------------------------------------------------------------------------------


def coded_health_events_since(engine: Engine, since: datetime) -> list[HealthEvent]:
    """Every node's health events with a code recorded since `since`: what a burst is read from."""
    with Session(engine) as session:
        return list(
            session.exec(select(HealthEvent).where(col(HealthEvent.code).is_not(None), HealthEvent.at >= since))
        )


def open_rma(
    engine: Engine,
    *,
    node_name: str,
    reason: str,
    remediation_run: str | None,
    evidence: dict[str, Any],
    evidence_markdown: str,
    opened_by: str,
    idempotency_key: str,
    held_reason: str = "",
) -> tuple[RmaRecord, bool]:
    """The record and whether this call created it (False: a retry found the one it wrote).
    With `held_reason` it is held for an operator (awaiting_confirmation), not open."""
    with Session(engine) as session:
        found = session.exec(select(RmaRecord).where(RmaRecord.idempotency_key == idempotency_key)).first()
        if found is not None:
            return found, False
        record = RmaRecord(
            node_name=node_name,
            reason=reason,
            remediation_run=remediation_run,
            evidence=evidence,
            evidence_markdown=evidence_markdown,
            opened_by=opened_by,
            idempotency_key=idempotency_key,
            status=AWAITING_CONFIRMATION if held_reason else OPEN,
            held_reason=held_reason or None,
        )
        session.add(record)
        try:
            session.commit()
        except IntegrityError:
            session.rollback()
            return session.exec(select(RmaRecord).where(RmaRecord.idempotency_key == idempotency_key)).one(), False
        session.refresh(record)
        return record, True


def set_webhook_status(engine: Engine, rma_id: int, status: str) -> None:
    with Session(engine) as session:
        record = session.get(RmaRecord, rma_id)
        if record is None:
            raise LookupError(f"no RMA record {rma_id}")
        record.webhook_status = status
        session.add(record)
        session.commit()


def get_rma(engine: Engine, rma_id: int) -> RmaRecord | None:
    with Session(engine) as session:
        return session.get(RmaRecord, rma_id)


def rma_records(engine: Engine, status: str | None = None, node_name: str | None = None) -> list[RmaRecord]:
    with Session(engine) as session:
        query = select(RmaRecord).order_by(col(RmaRecord.id).desc())
        if status:
            query = query.where(RmaRecord.status == status)
        if node_name:
            query = query.where(RmaRecord.node_name == node_name)
        return list(session.exec(query))


class RmaAlreadyClosed(RuntimeError):
    pass


class RmaStatusConflict(RuntimeError):
    """The record's status does not allow the act: an answer to an RMA held for none (never held,
    or answered already), a close of one that was never opened."""


def awaiting_rma(engine: Engine, rma_id: int) -> RmaRecord:
    """The record held for an operator's answer; LookupError or RmaStatusConflict (saying how
    it stands) otherwise."""
    record = get_rma(engine, rma_id)
    if record is None:
        raise LookupError(f"no RMA record {rma_id}")
    if record.status != AWAITING_CONFIRMATION:
        answered = (
            f" by {record.decided_by} at {as_utc(record.decided_at):%Y-%m-%d %H:%M}"
            if record.decided_by and record.decided_at is not None
            else ""
        )
        raise RmaStatusConflict(f"RMA {rma_id} awaits no confirmation: it is {record.status}{answered}")
    return record


def decide_rma(engine: Engine, rma_id: int, confirm: bool, decided_by: str, reason: str = "") -> RmaRecord:
    """Record an operator's answer to a held RMA: `open` (confirmed) or `rejected`, with what
    they said of it. The same answer again (a retried activity) finds the record as it left it."""
    status = OPEN if confirm else REJECTED
    with Session(engine) as session:
        record = session.get(RmaRecord, rma_id, with_for_update=True)
        if record is None:
            raise LookupError(f"no RMA record {rma_id}")
        if record.status == status and record.decided_by == decided_by:
            return record
        if record.status != AWAITING_CONFIRMATION:
            raise RmaStatusConflict(f"RMA {rma_id} awaits no confirmation: it is {record.status}")
        record.status, record.decided_by, record.decided_at = status, decided_by, utcnow()
        record.decided_reason = reason or None
        session.add(record)
        session.commit()
        session.refresh(record)
        return record


def close_rma(engine: Engine, rma_id: int, replaced: str | None, closed_by: str) -> RmaRecord:
    """Close the RMA: `replaced` names the part the vendor replaced, None for no fault found
    (fleetctl.remediation.rma.rma_outcome)."""
    with Session(engine) as session:
        record = session.get(RmaRecord, rma_id, with_for_update=True)
        if record is None:
            raise LookupError(f"no RMA record {rma_id}")
        if record.status == CLOSED:
            raise RmaAlreadyClosed(
                f"RMA {rma_id} was closed by {record.closed_by} at {record.closed_at:%Y-%m-%d %H:%M}"
            )
        if record.status != OPEN:  # held or rejected: nothing went to the vendor to come back
            raise RmaStatusConflict(f"RMA {rma_id} is {record.status}, not open: nothing was sent to close")
        record.status, record.replaced, record.closed_by, record.closed_at = CLOSED, replaced, closed_by, utcnow()
        session.add(record)
        session.commit()
        session.refresh(record)
        return record
