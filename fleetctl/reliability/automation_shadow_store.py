"""The shadow run's records, loaded from the database over one window
(fleetctl.reliability.automation_shadow assembles them)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from fleetctl.durations import as_utc
from fleetctl.nodes.capacity import EXTERNAL_DRAIN
from fleetctl.nodes.lifecycle import Actor, Trigger
from fleetctl.reliability.automation_shadow import Act, Did, Doer, Would, shadow_report

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def _would(engine: Engine, fleet: str, since: datetime) -> list[Would]:
    """The guard's drains granted dry, and the remediation runs that did nothing (their runbook,
    and an RMA step they would have run)."""
    from sqlmodel import Session, col, select

    from fleetctl.db.models import AutomationEvent, RemediationRun, RemediationStep

    with Session(engine) as session:
        drains = session.exec(
            select(AutomationEvent).where(
                AutomationEvent.fleet == fleet,
                AutomationEvent.kind == "dry_run",
                col(AutomationEvent.node_name).is_not(None),
                AutomationEvent.at >= since,
            )
        ).all()
        runs = session.exec(
            select(RemediationRun).where(RemediationRun.mode != "live", RemediationRun.started_at >= since)
        ).all()
        rma_steps = session.exec(
            select(RemediationStep).where(
                col(RemediationStep.run_key).in_([r.run_key for r in runs]),
                RemediationStep.action == "rma",
                RemediationStep.status == "would_run",
            )
        ).all()
    by_run = {r.run_key: r for r in runs}
    return [
        *(Would(e.node_name or "", Act.DRAIN, as_utc(e.at), e.reason) for e in drains),
        *(
            Would(r.node_name, Act.RUNBOOK, as_utc(r.started_at), f"runbook {r.runbook} ({r.mode}): {r.outcome}")
            for r in runs
        ),
        *(
            Would(s.node_name, Act.RMA, as_utc(s.finished_at), f"runbook {by_run[s.run_key].runbook}: {s.detail}")
            for s in rma_steps
        ),
    ]


def _did(engine: Engine, since: datetime) -> list[Did]:
    """Drains by operators, outside fleetctl and by automation acting; RMAs filed."""
    from sqlmodel import Session, select

    from fleetctl.db.models import HealthEvent, NodeEvent, RmaRecord

    with Session(engine) as session:
        drains = session.exec(
            select(NodeEvent).where(NodeEvent.trigger == Trigger.DRAIN.value, NodeEvent.at >= since)
        ).all()
        outside = session.exec(
            select(HealthEvent).where(
                HealthEvent.source == EXTERNAL_DRAIN, HealthEvent.severity != "info", HealthEvent.at >= since
            )
        ).all()
        rmas = session.exec(select(RmaRecord).where(RmaRecord.opened_at >= since)).all()
    return [
        *(
            Did(
                e.node_name,
                Act.DRAIN,
                as_utc(e.at),
                Doer.OPERATOR if e.actor_kind == Actor.OPERATOR.value else Doer.AUTOMATION,
                f"{e.actor}: {e.cause}",
            )
            for e in drains
            # the external-drain watch's drain to maintenance: the outside drain below, once
            if e.actor != EXTERNAL_DRAIN
        ),
        *(Did(h.node_name, Act.DRAIN, as_utc(h.at), Doer.OUTSIDE, h.message) for h in outside),
        *(
            Did(
                r.node_name,
                Act.RMA,
                as_utc(r.opened_at),
                Doer.AUTOMATION if r.remediation_run else Doer.OPERATOR,
                f"{r.opened_by}: {r.reason}",
            )
            for r in rmas
        ),
    ]


def build_shadow(engine: Engine, since: datetime, now: datetime, fleet: str, dry_run: bool) -> dict[str, Any]:
    """The shadow report over [since, now] (fleetctl.reliability.automation_shadow.shadow_report)."""
    since, now = as_utc(since), as_utc(now)
    return shadow_report(_would(engine, fleet, since), _did(engine, since), since, now, dry_run)
