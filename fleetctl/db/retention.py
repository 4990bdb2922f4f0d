"""Retention (`fleetctl db prune`, and each worker once a retention_interval_s): what the
fleet database forgets, and what it never forgets because a figure or a decision reads it.

Pruned, oldest first:
- the raw tool output of check runs older than `raw_output_days` (the verdict stays: status,
  reason, findings, metrics); the output is what makes a database grow (docs/deployment.md:
  ~13 KiB per check run);
- check runs (verdicts) older than `check_days`;
- health events older than `health_event_days`;
- the front door's audit trail (audit_requests) older than `audit_days`.

Never pruned, whatever their age:
- each node's latest run of each check, and its latest passing (or warning) run of each
  check: `node list`'s HEALTH column, `node show`, an RMA bundle's failing checks and the
  peers a new node is compared with read them (fleetctl.db.queries.latest_check_per_kind,
  peer_metrics);
- a node's health events since it last entered production (all of them if it never did):
  the evidence a critical claim reads against the capacity guard
  (queries.health_events_in_service);
- transitions (node_events), remediation runs and steps, RMA records, automation events
  (guard decisions, the breaker), jobs, restarts and checkpoints: the report's MTTF, MTTR,
  availability and lemon windows read every transition a node ever made (its state at a
  window's start is the sum of them all), the lemon rule counts remediations; one row per
  change, not per check, they are small.

With an archive, each row (or raw output) is written to it as one JSON line, and the file
flushed to disk, before the statement that removes it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import IO, Any

from sqlalchemy import ColumnElement, Select, Table, and_, delete, func, not_, or_, select, update
from sqlalchemy.engine import Connection, Engine

from fleetctl.db.models import AuditRequest, CheckRun, HealthEvent, NodeEvent, table_of

# Rows read, archived and removed per statement: bounds memory and the time a lock is held.
BATCH = 2000

RAW_OUTPUT, CHECK_RUNS, HEALTH_EVENTS, AUDIT = "raw_output", "check_runs", "health_events", "audit_requests"
WHAT = (RAW_OUTPUT, CHECK_RUNS, HEALTH_EVENTS, AUDIT)
# Pruned by age alone: nothing in them is kept for a figure or a decision.
_BY_AGE_ALONE = (HEALTH_EVENTS, AUDIT)


@dataclass(frozen=True)
class RetentionPolicy:
    raw_output_days: float
    check_days: float
    health_event_days: float
    audit_days: float = 400.0

    @classmethod
    def of(cls, settings: Any) -> RetentionPolicy:
        return cls(
            settings.retention_raw_output_days,
            settings.retention_check_days,
            settings.retention_health_event_days,
            settings.retention_audit_days,
        )

    def cutoffs(self, now: datetime) -> dict[str, datetime]:
        """What is older than these is pruned (unless kept by the rules above)."""
        return {
            RAW_OUTPUT: now - timedelta(days=self.raw_output_days),
            CHECK_RUNS: now - timedelta(days=self.check_days),
            HEALTH_EVENTS: now - timedelta(days=self.health_event_days),
            AUDIT: now - timedelta(days=self.audit_days),
        }


def _kept_run_ids() -> tuple[Select[Any], Select[Any]]:
    """Each node's latest run of each check and its latest passing or warning one (two queries
    of their ids)."""
    runs = table_of(CheckRun).c
    latest = select(func.max(runs.id)).group_by(runs.node_name, runs.check_name)
    latest_judged = (
        select(func.max(runs.id)).where(runs.status.in_(("pass", "warn"))).group_by(runs.node_name, runs.check_name)
    )
    return latest, latest_judged


def _kept_check_runs() -> ColumnElement[bool]:
    runs = table_of(CheckRun).c
    latest, latest_judged = _kept_run_ids()
    return or_(runs.id.in_(latest), runs.id.in_(latest_judged))


def _in_service_events() -> ColumnElement[bool]:
    """Health events since their node last entered production, and every event of a node
    that never did."""
    events, transitions = table_of(HealthEvent).c, table_of(NodeEvent).c
    entered = (
        select(func.max(transitions.at))
        .where(transitions.node_name == events.node_name, transitions.to_state == "production")
        .scalar_subquery()
    )
    return or_(entered.is_(None), events.at >= entered)


def _candidates(what: str, cutoff: datetime) -> tuple[Table, ColumnElement[bool]]:
    """(table, the condition of the rows `what` may remove, before the kept check runs)."""
    if what == AUDIT:
        audit_table = table_of(AuditRequest)
        return audit_table, audit_table.c.at < cutoff
    if what == HEALTH_EVENTS:
        events_table = table_of(HealthEvent)
        return events_table, and_(events_table.c.at < cutoff, not_(_in_service_events()))
    runs_table = table_of(CheckRun)
    old = runs_table.c.finished_at < cutoff
    return runs_table, and_(old, runs_table.c.raw_output != "") if what == RAW_OUTPUT else old


def _prunable(what: str, cutoff: datetime) -> tuple[Table, ColumnElement[bool]]:
    """(table, the condition of the rows `what` removes from it), in one statement."""
    table, condition = _candidates(what, cutoff)
    return table, condition if what in _BY_AGE_ALONE else and_(condition, not_(_kept_check_runs()))


def _jsonable(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _archive(archive: IO[str], what: str, rows: list[Any], columns: list[str]) -> None:
    for row in rows:
        archive.write(
            json.dumps(
                {"pruned": what, **{c: _jsonable(v) for c, v in zip(columns, row, strict=False)}},
                sort_keys=True,
                default=str,
            )
            + "\n"
        )
    archive.flush()
    os.fsync(archive.fileno())


def _prune_one(conn: Connection, what: str, cutoff: datetime, archive: IO[str] | None) -> int:
    """Remove `what` older than cutoff, BATCH rows a statement, in id order; the number removed.
    The kept check runs are read once, not per batch (a group-by over the whole table): a run
    that became latest meanwhile is newer than any cutoff, one that stopped being latest is
    kept this time."""
    table, condition = _candidates(what, cutoff)
    kept: set[int] = set()
    if what not in _BY_AGE_ALONE:
        for query in _kept_run_ids():
            kept |= set(conn.execute(query).scalars())
        conn.commit()
    # The raw output alone is archived for RAW_OUTPUT: the rest of the row stays in the database.
    columns = (
        ["id", "node_name", "check_name", "finished_at", "raw_output"]
        if what == RAW_OUTPUT
        else [c.name for c in table.columns]
    )
    removed, after = 0, 0
    while True:
        rows = list(
            conn.execute(
                select(*(table.c[c] for c in columns))
                .where(condition, table.c.id > after)
                .order_by(table.c.id)
                .limit(BATCH)
            )
        )
        if not rows:
            return removed
        after = rows[-1][0]
        rows = [row for row in rows if row[0] not in kept]
        if not rows:
            continue
        if archive is not None:
            _archive(archive, what, rows, columns)
        ids = [row[0] for row in rows]
        if what == RAW_OUTPUT:
            conn.execute(update(table).where(table.c.id.in_(ids)).values(raw_output=""))
        else:
            conn.execute(delete(table).where(table.c.id.in_(ids)))
        conn.commit()
        removed += len(ids)


def count_prunable(engine: Engine, policy: RetentionPolicy, now: datetime) -> dict[str, int]:
    """What a prune at `now` would remove (`db prune --dry-run`), changing nothing."""
    cutoffs, counts = policy.cutoffs(now), {}
    with engine.connect() as conn:
        for what, cutoff in cutoffs.items():
            table, condition = _prunable(what, cutoff)
            if what == RAW_OUTPUT:  # not the runs removed whole, as prune() removes them first
                condition = and_(condition, not_(_prunable(CHECK_RUNS, cutoffs[CHECK_RUNS])[1]))
            counts[what] = conn.execute(select(func.count()).select_from(table).where(condition)).scalar_one()
    return counts


def prune(
    engine: Engine,
    policy: RetentionPolicy,
    now: datetime,
    archive: IO[str] | None = None,
    progress: Callable[[str, int], None] | None = None,
) -> dict[str, int]:
    """Remove what the policy lets go at `now`: whole check runs first (so their output is
    archived once, with them), then the raw output of those kept, then health events, then
    the audit trail.
    Returns the number removed of each."""
    cutoffs = policy.cutoffs(now)
    removed = {}
    with engine.connect() as conn:
        for what in (CHECK_RUNS, RAW_OUTPUT, HEALTH_EVENTS, AUDIT):
            removed[what] = _prune_one(conn, what, cutoffs[what], archive)
            if progress is not None:
                progress(what, removed[what])
    return {what: removed[what] for what in WHAT}
