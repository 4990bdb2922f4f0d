"""The fleet reliability report gathered from the database: what fleetctl.reliability.report
assembles, loaded over one window."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from fleetctl.db import hangs as hangs_db
from fleetctl.db import jobs as jobs_db
from fleetctl.db import queries
from fleetctl.db import stragglers as stragglers_db
from fleetctl.durations import as_utc
from fleetctl.reliability.metrics_store import load_history
from fleetctl.reliability.report import DEFAULT_JOB_GPUS, assemble_report

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


def first_node_event_at(engine: Engine) -> datetime | None:
    """When the earliest recorded node event happened (UTC), None before any."""
    from sqlalchemy import func
    from sqlmodel import Session, select

    from fleetctl.db.models import NodeEvent

    with Session(engine) as session:
        at = session.exec(select(func.min(NodeEvent.at))).one()
    return None if at is None else as_utc(at)


def build_report(
    engine: Engine,
    since: datetime,
    now: datetime,
    *,
    fleet: str = "default",
    lemon_threshold: int = 3,
    lemon_window: timedelta = timedelta(days=7),
    job_gpus: int = DEFAULT_JOB_GPUS,
    window_basis: str = "as asked",
) -> dict[str, Any]:
    """The report over [since, now] (both aware or both UTC-naive datetimes): see assemble_report."""
    since, now = as_utc(since), as_utc(now)
    return assemble_report(
        load_history(engine, since),
        since,
        now,
        production_stragglers=[stragglers_db.finding_row(f) for f in stragglers_db.findings(engine, since=since)],
        hung_jobs=[hangs_db.finding_row(f) for f in hangs_db.findings(engine, since=since)],
        restart_placements=jobs_db.restart_placements(engine, since, now),
        restarts_on_spares=jobs_db.restarts_on_spares(engine, since, now),
        nodes_now=queries.list_nodes(engine),
        breaker_events=queries.breaker_events(engine, fleet),
        fleet=fleet,
        lemon_threshold=lemon_threshold,
        lemon_window=lemon_window,
        job_gpus=job_gpus,
        window_basis=window_basis,
    )
