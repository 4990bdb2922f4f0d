"""The Prometheus exporter: the fleet's current counts, read from the database on every scrape.
Failures are classified by `fleetctl.reliability.metrics`, the same definitions the report uses.

A scrape costs what changed since the last one, not the fleet's whole history: the
append-only tables (check runs, transitions, guard decisions) are read once each, row by row
as they arrive, into counters this process keeps (reading every one took each scrape 1.5 s at
300k check runs). Only the nodes (as many as the fleet) and the job restarts
(whose rows change until they finish) are read whole; remediation runs and RMA records, whose
status changes, are counted by the database (one GROUP BY each).

Every series a fleet's operator filters on carries a `fleet` label: a node's inventory label
(capacity.FLEET_LABEL), else the fleet this exporter serves (what `fleet status` counts). The
served fleet's breaker and capacity budget are exported from the first scrape, so a healthy
fleet reads 0, not "No data". Which nodes are out and why is one series per node out of
production, labelled with the bounded class of what took it out (metrics.CAUSE_CLASSES:
`maintenance`, `xid`, `check`, ...), never the free-text cause: a new event makes no new
series (`node show` says why). A held drain is labelled with the class of what holds it
(conditions.HELD_BY_CLASSES), never the guard's words. What does reach a label from outside
(a node name, a fleet) is cut to REASON_LIMIT characters with control characters escaped
(fleetctl.text.one_line): a kernel message must not reach a dashboard as an escape sequence.
Counters count what only grows (check runs, drains, failures, remediation runs ended, automated
removals once resolved: an outcome, once confirmed or unchanged, never changes); what is true
now is a gauge (runs in flight, RMA records by status and since when each held one waits for an
operator, removals still open, the unhealthy nodes still in production, lemon nodes, pending
jobs). The judgements are the pure functions `node list` and the report use
(conditions.conditions, LemonPolicy.times_remediated, metrics.removal_outcome), on evidence
folded row by row, never a query of the whole history.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
import ssl
import sys
import threading
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from threading import Lock
from time import monotonic
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import ThreadingWSGIServer
from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from fleetctl.config import Settings
from fleetctl.db import hangs, queries, sweep_intervals
from fleetctl.db.models import (
    AuditRequest,
    AutomationEvent,
    CheckRun,
    Job,
    JobRestart,
    Node,
    NodeEvent,
    RemediationRun,
    RemediationStep,
    RmaRecord,
)
from fleetctl.durations import as_utc
from fleetctl.nodes.capacity import FLEET_LABEL, GuardPolicy, budgets, guard_snapshot, in_fleet
from fleetctl.nodes.conditions import (
    PRODUCTION_CONDITIONS,
    CheckSummary,
    Condition,
    DrainHeld,
    conditions,
    held_by,
    stale_evidence,
)
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.reliability.metrics import (
    OPEN,
    PENDING_REASONS,
    PRODUCTION,
    REPAIRING_ACTIONS,
    RmaOutcome,
    Transition,
    cause_class,
    failure_label,
    is_automated_removal,
    is_failure,
    pending_reason,
    removal_outcome,
)
from fleetctl.remediation.lemons import LemonPolicy, remediation_entries
from fleetctl.remediation.rma import AWAITING_CONFIRMATION, rma_outcome
from fleetctl.server_tls import TLS_RELOAD_CHECK_S, ReloadingTLS, tls_context
from fleetctl.text import one_line

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

log = logging.getLogger("fleetctl.exporter")

CHECK_DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)
# fleetctl restarts a job off a bad node in 0.4-2 s when a spare is free; a scheduler's queue
# or a checkpoint reload takes minutes: buckets from 0.1 s, so neither reads as the other.
RESTART_LATENCY_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
# From leaving production to being back: a reboot, a runbook (hours), a part (days).
REPAIR_BUCKETS = (60.0, 300.0, 900.0, 1800.0, 3600.0, 7200.0, 14400.0, 43200.0, 86400.0, 259200.0, 604800.0)
# Nodes that are capacity lost to a fault (draining, maintenance, RMA): "who is out".
OUT_STATES = NodeState.values_where(lambda s: s.is_capacity and not s.in_service)
REASON_LIMIT = 120  # a drain cause with its check and figures fits
# What the capacity guard records per automated removal (automation_events.kind).
GUARD_DECISIONS = ("grant", "deny", "force")
BREAKER_KINDS = ("breaker_open", "breaker_closed")
# The guard's answers that hold a node's drain back (the request that opens the breaker is one).
GUARD_REFUSALS = ("deny", "breaker_open")
# The stall watcher's findings (queries.stalled_nodes): read once each, as the guard's are.
STALL_KINDS = (queries.STALLED, queries.UNSTALLED)
# A reachability judgement (queries.suspect_nodes): read once each, judged at the scrape.
SUSPECT = "suspect"

# The rows of the append-only tables as FleetFold's readers select them (the id first):
# (id, node, check, status, started_at, finished_at, error_kind)
CheckRow = tuple[int, str, str, str, datetime, datetime, str | None]
# (id, node, from_state, to_state, trigger, cause, actor_kind, at, failure)
EventRow = tuple[int, str, str, str, str, str, str, datetime, str]
# (id, fleet, kind, node, at, reason, actor)
DecisionRow = tuple[int, str, str, str | None, datetime, str, str]
# (id, node, started_at) and (id, node, finished_at)
RunRow = tuple[int, str, datetime]
RepairRow = tuple[int, str, datetime | None]
# The rows a scrape reads whole (WholeRows), as FleetCollector._read selects them:
# (name, state, rack, profile, labels, state_since)
NodeRow = tuple[str, str, str, str, dict[str, Any], datetime]
# (status, fault_seen_at, running_at, job_id, placement, bad_nodes)
RestartRow = tuple[str, datetime, datetime | None, str, str, list[str]]
# (node, runbook, mode, status, count)
RemediationCount = tuple[str, str, str, str, int]
# (node, status, opened_at, replaced, id)
RmaRow = tuple[str, str, datetime, str | None, int]


def _tally(seconds: float, tally: list[float], bounds: Sequence[float]) -> None:
    """Adds `seconds` to `tally`: one count per bound, then +Inf's count, then the sum."""
    for i, bound in enumerate(bounds):
        tally[i] += seconds <= bound
    tally[-2] += 1
    tally[-1] += seconds


def _buckets(tally: Sequence[float], bounds: Sequence[float]) -> list[tuple[str, float]]:
    return [(repr(b), tally[i]) for i, b in enumerate(bounds)] + [("+Inf", tally[-2])]


def _histogram(values: Iterable[float], bounds: Sequence[float]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets (with +Inf) and the sum of `values`."""
    values = list(values)
    buckets = [(repr(b), float(sum(1 for v in values if v <= b))) for b in bounds]
    return [*buckets, ("+Inf", float(len(values)))], float(sum(values))


# An id below the highest read but not seen yet belongs to a transaction that committed after
# a later one (PostgreSQL hands out ids before commit): it is looked for again on each scrape
# for this long, then given up (its transaction rolled back). At most this many are tracked.
GAP_TTL_S = 600.0
GAPS_KEPT = 10_000


class AppendOnlyReader:
    """Reads each row of an append-only table once, across scrapes: the rows above the highest
    id read so far, and the ids skipped below it (see GAP_TTL_S). `fold` takes each new row."""

    def __init__(self, id_column: Any, columns: Sequence[Any], fold: Callable[[Any], None], where: Any = None) -> None:
        self.id_column, self.columns, self.fold, self.where = id_column, list(columns), fold, where
        self.high = 0
        self.gaps: dict[int, float] = {}

    def read(self, session: Session) -> None:
        now = monotonic()
        self.gaps = {i: t for i, t in self.gaps.items() if now - t < GAP_TTL_S}
        fresh = self.id_column > self.high
        query = select(self.id_column, *self.columns).where(
            or_(fresh, self.id_column.in_(list(self.gaps))) if self.gaps else fresh
        )
        if self.where is not None:
            query = query.where(self.where)
        seen: set[int] = set()
        for row in session.exec(query.order_by(self.id_column)):
            seen.add(row[0])
            self.gaps.pop(row[0], None)
            self.fold(row)
        if seen:
            top = max(seen)
            for missing in range(max(self.high + 1, top - GAPS_KEPT), top):
                if missing not in seen and len(self.gaps) < GAPS_KEPT:
                    self.gaps[missing] = now
            self.high = max(self.high, top)


class FleetFold:
    """What the append-only tables say, folded row by row across scrapes (AppendOnlyReader):
    each row is read once, into the counters and per-node evidence below."""

    def __init__(self, fleet: str, lemon: LemonPolicy) -> None:
        """`fleet`: the fleet a node without a fleet label is in; `lemon` the lemon rule."""
        self.fleet, self.lemon = fleet, lemon
        # Per (fleet, check, status) and (fleet, check); the node's fleet when its row was read.
        self.check_counts: Counter[tuple[str, str, str]] = Counter()
        self.check_seconds: dict[tuple[str, str], list[float]] = defaultdict(
            lambda: [0.0] * (len(CHECK_DURATION_BUCKETS) + 2)
        )
        self.drains: Counter[tuple[str, str]] = Counter()  # (fleet, actor_kind)
        self.failures: Counter[tuple[str, str]] = Counter()  # (fleet, cause)
        self.fleet_of: dict[str, str] = {}  # node -> its fleet, as of the scrape reading its rows
        self.decisions: Counter[tuple[str, str]] = Counter()
        self.breaker: dict[str, str] = {}  # each fleet's latest open/close
        self.left_production: dict[str, datetime] = {}  # per node out of production for a failure: since when
        self.out_cause: dict[str, str] = {}  # per node: the cause class of its latest move out of production
        self.repairs: dict[str, list[float]] = defaultdict(lambda: [0.0] * (len(REPAIR_BUCKETS) + 2))
        self.last_move: dict[str, tuple[datetime, str, str]] = {}  # per node: (at, to_state, why)
        # Per node the guard refused since its last grant: (first refusal, latest, its reason).
        self.refused: dict[str, tuple[datetime, datetime, str]] = {}
        # Per node the stall watcher judged: its latest finding (queries.stalled_nodes, folded).
        self.stalls: dict[str, tuple[str, datetime]] = {}
        # Per node its suspect judgements, (at, actor, reason), since it entered its state.
        self.suspicions: dict[str, list[tuple[datetime, str, str]]] = defaultdict(list)
        # Per node and check its latest run (queries.latest_check_per_kind, folded): (id, summary).
        self.latest_checks: dict[str, dict[str, tuple[int, CheckSummary]]] = defaultdict(dict)
        # The lemon rule's figure (LemonPolicy.times_remediated), folded: per node its entries into
        # maintenance to be remediated (lemons.remediation_entries, judged against the move out of
        # production behind each), and its live remediation runs begun; kept for one lemon window.
        self.out_move: dict[str, Transition] = {}  # per node out of production: the move that took it out
        self.remediation_entries: dict[str, list[datetime]] = defaultdict(list)
        self.run_starts: dict[str, list[datetime]] = defaultdict(list)
        # Rule precision (metrics.removal_outcome), folded: each automated removal not yet resolved,
        # per node: (rule, its fleet, when, the node's moves since); the resolved ones are counted
        # once, when they resolve (an outcome, once confirmed or unchanged, never changes).
        self.repairs_done: dict[str, list[datetime]] = defaultdict(list)  # passed repairing steps of live runs
        self.open_removals: dict[str, list[tuple[str, str, datetime, list[Transition]]]] = defaultdict(list)
        self.resolved: Counter[tuple[str, str, str]] = Counter()  # (fleet, rule, outcome)
        self.readers = self._readers()

    def _readers(self) -> tuple[AppendOnlyReader, ...]:
        """One reader per append-only table, each feeding its fold."""
        return (
            AppendOnlyReader(
                CheckRun.id,
                (
                    CheckRun.node_name,
                    CheckRun.check_name,
                    CheckRun.status,
                    CheckRun.started_at,
                    CheckRun.finished_at,
                    CheckRun.error_kind,
                ),
                self._fold_check,
            ),
            AppendOnlyReader(
                NodeEvent.id,
                (
                    NodeEvent.node_name,
                    NodeEvent.from_state,
                    NodeEvent.to_state,
                    NodeEvent.trigger,
                    NodeEvent.cause,
                    NodeEvent.actor_kind,
                    NodeEvent.at,
                    NodeEvent.failure,
                ),
                self._fold_event,
            ),
            AppendOnlyReader(
                AutomationEvent.id,
                (
                    AutomationEvent.fleet,
                    AutomationEvent.kind,
                    AutomationEvent.node_name,
                    AutomationEvent.at,
                    AutomationEvent.reason,
                    AutomationEvent.actor,
                ),
                self._fold_decision,
                where=col(AutomationEvent.kind).in_(GUARD_DECISIONS + BREAKER_KINDS + STALL_KINDS + (SUSPECT,)),
            ),
            # A run's node, mode and start, and a step's outcome, are written once (the status of
            # a run changes, and is counted by the database, below).
            AppendOnlyReader(
                RemediationRun.id,
                (RemediationRun.node_name, RemediationRun.started_at),
                self._fold_run,
                where=RemediationRun.mode == "live",
            ),
            AppendOnlyReader(
                RemediationStep.id,
                (RemediationStep.node_name, RemediationStep.finished_at),
                self._fold_repair,
                where=(col(RemediationStep.status) == "passed")
                & col(RemediationStep.action).in_(sorted(REPAIRING_ACTIONS))
                & col(RemediationStep.run_key).in_(select(RemediationRun.run_key).where(RemediationRun.mode == "live")),
            ),
        )

    def _fleet(self, node: str) -> str:
        return self.fleet_of.get(node, self.fleet)

    def _fold_check(self, row: CheckRow) -> None:
        run_id, node, check, status, started, finished, error_kind = row
        fleet = self._fleet(node)
        self.check_counts[(fleet, check, status)] += 1
        if check not in self.latest_checks[node] or self.latest_checks[node][check][0] < run_id:
            at = as_utc(finished)
            self.latest_checks[node][check] = (run_id, CheckSummary(check, status, "", at, at, 1, error_kind))
        seconds = max(0.0, (as_utc(finished) - as_utc(started)).total_seconds())
        _tally(seconds, self.check_seconds[(fleet, check)], CHECK_DURATION_BUCKETS)

    def _fold_event(self, row: EventRow) -> None:
        _, node, from_state, to_state, trigger, cause, actor_kind, at, failure = row
        at = as_utc(at)
        fleet = self._fleet(node)
        if trigger == "drain":
            self.drains[(fleet, actor_kind)] += 1
        t = Transition("", from_state, to_state, at, trigger, cause, actor_kind, failure)
        if from_state == PRODUCTION and is_failure(t):
            self.failures[(fleet, failure_label(t))] += 1
        # Repairs as metrics.repair_seconds counts them: from a failure to the node's return
        # (a return from planned work is no repair).
        if from_state == PRODUCTION and to_state != PRODUCTION:
            self.out_cause[node] = cause_class(t)
            if is_failure(t):
                self.left_production[node] = at
            else:
                self.left_production.pop(node, None)
        elif to_state == PRODUCTION and node in self.left_production:
            _tally(max(0.0, (at - self.left_production.pop(node)).total_seconds()), self.repairs[fleet], REPAIR_BUCKETS)
        # A row that committed late (AppendOnlyReader's gaps) must not hide a later move.
        if node not in self.last_move or self.last_move[node][0] <= at:
            self.last_move[node] = (at, to_state, cause or trigger)
        self._fold_lemon_and_removals(node, fleet, t)

    def _fold_lemon_and_removals(self, node: str, fleet: str, t: Transition) -> None:
        leaves = t.from_state == PRODUCTION and t.to_state != PRODUCTION
        # An entry into maintenance is a remediation unless it ends a planned drain: judged by
        # lemons.remediation_entries on the move out behind it (none for the move out itself).
        behind = [] if leaves or node not in self.out_move else [self.out_move[node]]
        if len(remediation_entries([*behind, t])) > len(remediation_entries(behind)):
            self.remediation_entries[node].append(t.at)
        if leaves:
            self.out_move[node] = t
        elif t.to_state == PRODUCTION:
            self.out_move.pop(node, None)
        for _, _, _, since in self.open_removals.get(node, ()):
            since.append(t)
        if is_automated_removal(t):
            self.open_removals[node].append((failure_label(t), fleet, t.at, []))

    def _fold_run(self, row: RunRow) -> None:
        _, node, started = row
        self.run_starts[node].append(as_utc(started))

    def _fold_repair(self, row: RepairRow) -> None:
        _, node, finished = row
        if finished is not None:
            self.repairs_done[node].append(as_utc(finished))

    def _resolve_removals(self, rmas: dict[str, list[RmaOutcome]]) -> dict[tuple[str, str], int]:
        """Counts each removal that has resolved since the last scrape, once; the open ones per
        (fleet, rule). After every reader has read: a repair is recorded before the return it
        made possible, but may be read in the same scrape."""
        still_open: Counter[tuple[str, str]] = Counter()
        for node, pending in list(self.open_removals.items()):
            keep = []
            for rule, fleet, at, since in pending:
                outcome = removal_outcome(since, at, self.repairs_done.get(node, ()), rmas.get(node, ()))
                if outcome == OPEN:
                    keep.append((rule, fleet, at, since))
                    still_open[(fleet, rule)] += 1
                else:
                    self.resolved[(fleet, rule, outcome)] += 1
            if keep:
                self.open_removals[node] = keep
            else:
                del self.open_removals[node]
        # A repair counts for a removal at or before it; the next removal of a node none is open
        # for is a move still to come: the repairs before the node's latest move count for none.
        for node in [n for n in self.repairs_done if n not in self.open_removals and n in self.last_move]:
            self.repairs_done[node] = [at for at in self.repairs_done[node] if at >= self.last_move[node][0]]
            if not self.repairs_done[node]:
                del self.repairs_done[node]
        return dict(still_open)

    def _suspects(self, node_rows: list[NodeRow], agent_seen: dict[str, datetime]) -> dict[str, Condition]:
        """queries.suspect_nodes' judgement on the folded events (that query reads every
        judgement ever made): the node's judgements since it entered its state, but not an
        agent's silence when the agent has been heard again since; `since` the first of them.
        Forgets those from before the node's state."""
        found = {}
        for name, _, _, _, _, since in node_rows:
            if name not in self.suspicions:
                continue
            since = as_utc(since)
            kept = self.suspicions[name] = [e for e in self.suspicions[name] if e[0] >= since]
            heard = agent_seen.get(name)
            stand = [
                (at, reason)
                for at, actor, reason in kept
                if actor != queries.AGENT_SILENCE_ACTOR or heard is None or heard <= at
            ]
            if stand:
                found[name] = Condition("Suspect", stand[-1][1], min(at for at, _ in stand))
            if not kept:
                del self.suspicions[name]
        return found

    def _lemons(self, now: datetime) -> dict[str, int]:
        """Each lemon node's times remediated in the lemon window ending now; forgets what is
        older than the window."""
        since = now - self.lemon.window
        for times in (self.remediation_entries, self.run_starts):
            for node in list(times):
                times[node] = [at for at in times[node] if at >= since]
                if not times[node]:
                    del times[node]
        found = {}
        for node in {*self.remediation_entries, *self.run_starts}:
            remediated = self.lemon.times_remediated(
                self.run_starts.get(node, ()), self.remediation_entries.get(node, ()), now
            )
            if remediated >= self.lemon.threshold:
                found[node] = remediated
        return found

    def _fold_decision(self, row: DecisionRow) -> None:
        _, fleet, kind, node, at, reason, actor = row
        if kind == SUSPECT:
            if node:
                self.suspicions[node].append((as_utc(at), actor, reason))
            return
        if kind in STALL_KINDS:
            if node:
                self.stalls[node] = (kind, as_utc(at))  # rows arrive in id order: the last one stands
            return
        if node and kind in GUARD_REFUSALS:
            at = as_utc(at)
            moved = self.last_move[node][0] if node in self.last_move else at
            # Refusals from before the node last moved held back another stay: start again.
            first = self.refused[node][0] if node in self.refused and self.refused[node][0] >= moved else at
            self.refused[node] = (first, at, reason)
        elif node and kind in GUARD_DECISIONS:  # granted (or forced): no longer held
            self.refused.pop(node, None)
        if kind in BREAKER_KINDS:
            self.breaker[fleet] = kind  # rows arrive in id order: the last one stands
        else:
            self.decisions[(fleet, kind)] += 1

    def scrape(self, rows: WholeRows) -> Scrape:
        """A copy of the fold for one scrape's exposition, after every reader has read; resolves
        the removals and judges the lemons and suspects on what was read."""
        rma_outcomes: dict[str, list[RmaOutcome]] = defaultdict(list)
        for node, status, opened_at, replaced, _ in rows.rmas:
            rma_outcomes[node].append(RmaOutcome(as_utc(opened_at), rma_outcome(status, replaced)))
        removals_open = self._resolve_removals(rma_outcomes)
        now = datetime.now(UTC)
        return Scrape(
            rows=rows,
            fleet_of=dict(self.fleet_of),
            check_counts=sorted(self.check_counts.items()),
            check_seconds={check: list(tally) for check, tally in self.check_seconds.items()},
            drains=dict(self.drains),
            causes=dict(self.failures),
            decisions=sorted(self.decisions.items()),
            breaker=dict(self.breaker),
            repairs={fleet: list(tally) for fleet, tally in self.repairs.items()},
            causes_out={
                name: self.out_cause.get(name, "other") for name, state, *_ in rows.nodes if state in OUT_STATES
            },
            refused=dict(self.refused),
            stalls={node: at for node, (kind, at) in self.stalls.items() if kind == queries.STALLED},
            removals_open=removals_open,
            resolved=sorted(self.resolved.items()),
            now=now,
            lemons=self._lemons(now),
            latest_checks={
                node: sorted((summary for _, summary in by_check.values()), key=lambda c: c.at, reverse=True)
                for node, by_check in self.latest_checks.items()
            },
            suspects=self._suspects(rows.nodes, rows.agent_seen),
        )


@dataclass(frozen=True)
class WholeRows:
    """What a scrape reads whole, rows that change or are few: the nodes, the job restarts, the
    pending jobs, the agents' last heartbeats, the remediation runs counted and the RMA records."""

    nodes: list[NodeRow]
    restarts: list[RestartRow]
    pending_jobs: list[str]
    agent_seen: dict[str, datetime]
    remediations: list[RemediationCount]
    rmas: list[RmaRow]


@dataclass(frozen=True)
class Scrape:
    """One scrape's evidence, taken under the collector's lock: the rows read whole and a copy
    of the fold. The exposition reads only this."""

    rows: WholeRows
    fleet_of: dict[str, str]
    check_counts: list[tuple[tuple[str, str, str], int]]
    check_seconds: dict[tuple[str, str], list[float]]
    drains: dict[tuple[str, str], int]
    causes: dict[tuple[str, str], int]
    decisions: list[tuple[tuple[str, str], int]]
    breaker: dict[str, str]
    repairs: dict[str, list[float]]
    causes_out: dict[str, str]
    refused: dict[str, tuple[datetime, datetime, str]]
    stalls: dict[str, datetime]
    removals_open: dict[tuple[str, str], int]
    resolved: list[tuple[tuple[str, str, str], int]]
    now: datetime
    lemons: dict[str, int]
    latest_checks: dict[str, list[CheckSummary]]
    suspects: dict[str, Condition]
    # Each fleet's sweep interval: read by the collector after the fold (its own session).
    sweep_every_s: dict[str, float] = dataclasses.field(default_factory=dict)


class FleetCollector:
    """Reads the database on every scrape (the numbers are never staler than the scrape), but
    each append-only row only once (FleetFold); then exposes what it read, one builder per
    group of metrics."""

    def __init__(
        self,
        engine: Engine,
        fleet: str = "default",
        policy: GuardPolicy | None = None,
        lemon: LemonPolicy | None = None,
        agent_silence_s: float = Settings.agent_silence_s,
    ) -> None:
        """`fleet`: the fleet this exporter serves, `policy` its guard's (config.guard_policy),
        `lemon` the lemon rule (lemon_threshold, lemon_window_days), `agent_silence_s` how long
        an agent may be silent and still report (Stale, as `node list` judges it)."""
        self.engine, self.fleet, self.policy = engine, fleet, policy or GuardPolicy()
        self.lemon, self.agent_silence_s = lemon or LemonPolicy(), agent_silence_s
        self.lock = Lock()  # two scrapes at once must not fold the same rows twice
        self.fold = FleetFold(fleet, self.lemon)

    def collect(self) -> Iterator[Metric]:
        scrape = self._scrape()
        for build in (
            self._node_families,
            self._out_families,
            self._budget_families,
            self._check_families,
            self._failure_families,
            self._remediation_families,
            self._rma_families,
            self._restart_families,
            self._guard_families,
            self._health_families,
            self._rule_families,
        ):
            yield from build(scrape)

    # -- reading ---------------------------------------------------------------------------------

    def _scrape(self) -> Scrape:
        with self.lock, Session(self.engine) as session:
            scrape = self.fold.scrape(self._read(session))
        return replace(scrape, sweep_every_s=sweep_intervals.sweep_every_s_by_fleet(self.engine))

    def _read(self, session: Session) -> WholeRows:
        """The nodes first (a row folded is counted under its node's fleet now), then each
        append-only table's new rows into the fold, then what is read whole.

        sqlmodel types select() for at most four columns (its generated overloads; any number
        runs): the wider selects below are ignored for that alone, their rows typed by WholeRows."""
        nodes = list(
            session.exec(
                select(  # type: ignore[call-overload]
                    Node.name, Node.state, Node.rack, Node.profile, Node.labels, Node.state_since
                )
            )
        )
        self.fold.fleet_of.update(
            {
                name: one_line(str((labels or {}).get(FLEET_LABEL, self.fleet)), REASON_LIMIT)
                for name, _, _, _, labels, _ in nodes
            }
        )
        for reader in self.fold.readers:
            reader.read(session)
        restarts = list(
            session.exec(
                select(  # type: ignore[call-overload]
                    JobRestart.status,
                    JobRestart.fault_seen_at,
                    JobRestart.running_at,
                    JobRestart.job_id,
                    JobRestart.placement,
                    JobRestart.bad_nodes,
                )
            )
        )
        pending_jobs = list(session.exec(select(Job.job_id).where(Job.state == "pending")))
        agent_seen = {
            name: as_utc(at)
            for name, at in session.exec(
                select(Node.name, Node.agent_seen_at).where(col(Node.agent_seen_at).is_not(None))
            )
            if at is not None  # always, as the query selects; said again for the type checker
        }
        remediations = list(
            session.exec(
                select(  # type: ignore[call-overload]
                    RemediationRun.node_name,
                    RemediationRun.runbook,
                    RemediationRun.mode,
                    RemediationRun.status,
                    func.count(),
                ).group_by(RemediationRun.node_name, RemediationRun.runbook, RemediationRun.mode, RemediationRun.status)
            )
        )
        # Few (one per part sent back): read whole, for their count and how each ended.
        rmas = list(
            session.exec(
                select(  # type: ignore[call-overload]
                    RmaRecord.node_name, RmaRecord.status, RmaRecord.opened_at, RmaRecord.replaced, RmaRecord.id
                )
            )
        )
        return WholeRows(nodes, restarts, pending_jobs, agent_seen, remediations, rmas)

    # -- exposition: one builder per group ----------------------------------------------------------

    def _node_families(self, sc: Scrape) -> Iterator[Metric]:
        """Nodes per fleet and state, and per rack and profile."""
        node_counts = Counter(
            (sc.fleet_of[name], state, rack, profile) for name, state, rack, profile, _, _ in sc.rows.nodes
        )
        # Every state of every fleet with a node (and the served fleet): a state reads 0, not "No data".
        per_state: Counter[tuple[str, str]] = Counter(
            {(fleet, s.value): 0 for fleet in {*sc.fleet_of.values(), self.fleet} for s in NodeState}
        )
        by_rack = GaugeMetricFamily(
            "fleetctl_nodes_by_rack",
            "Nodes per fleet, rack, GPU profile and lifecycle state",
            labels=["fleet", "rack", "profile", "state"],
        )
        for (fleet, state, rack, profile), count in sorted(node_counts.items()):
            per_state[(fleet, state)] += count
            by_rack.add_metric([fleet, rack, profile, state], count)
        nodes = GaugeMetricFamily("fleetctl_nodes", "Nodes per fleet and lifecycle state", labels=["fleet", "state"])
        for (fleet, state), count in sorted(per_state.items()):
            nodes.add_metric([fleet, state], count)
        yield nodes
        yield by_rack

    def _out_families(self, sc: Scrape) -> Iterator[Metric]:
        """Per node: out of production, its drain held by the guard, its workflow stalled."""
        fleet_of = sc.fleet_of
        out = GaugeMetricFamily(
            "fleetctl_node_out_since_timestamp_seconds",
            "Per node out of production (draining, maintenance, RMA): when it entered its state; cause is the "
            "class of the move that took it out of production (metrics.CAUSE_CLASSES; `node show` says why)",
            labels=["fleet", "node", "rack", "state", "cause"],
        )
        for name, state, rack, _, _, since in sorted(sc.rows.nodes):
            if state in OUT_STATES:
                out.add_metric(
                    [fleet_of[name], one_line(name, REASON_LIMIT), rack, state, sc.causes_out[name]],
                    as_utc(since).timestamp(),
                )
        yield out
        held = GaugeMetricFamily(
            "fleetctl_node_drain_held_since_timestamp_seconds",
            "Per production node whose drain the capacity guard refuses (DrainHeld): its first refusal since "
            "it entered production; held_by is the class of the latest refusal (conditions.HELD_BY_CLASSES: "
            "breaker, storm_window, fleet_limit, rack_limit, other; `node show` says what frees it)",
            labels=["fleet", "node", "rack", "held_by"],
        )
        for name, state, rack, _, _, since in sorted(sc.rows.nodes):
            refusal = sc.refused.get(name)
            if NodeState(state).in_service and refusal is not None and refusal[1] >= as_utc(since):
                held.add_metric(
                    [fleet_of[name], one_line(name, REASON_LIMIT), rack, held_by(refusal[2])],
                    max(refusal[0], as_utc(since)).timestamp(),
                )
        yield held
        stalled = GaugeMetricFamily(
            "fleetctl_node_stalled_since_timestamp_seconds",
            "Per node whose workflow the stall watcher found stalled (failing workflow tasks, or queued work past "
            "stall_after_s): since when; `node show` says why",
            labels=["fleet", "node", "rack"],
        )
        rack_of = {name: rack for name, _, rack, *_ in sc.rows.nodes}
        for name, at in sorted(sc.stalls.items()):
            if name in rack_of:
                stalled.add_metric([fleet_of[name], one_line(name, REASON_LIMIT), rack_of[name]], at.timestamp())
        yield stalled

    def _budget_families(self, sc: Scrape) -> Iterator[Metric]:
        """The served fleet's capacity budget, as its guard and `fleet status` count it."""
        nodes = [
            (rack, state, as_utc(since))
            for _, state, rack, _, labels, since in sc.rows.nodes
            if in_fleet(labels, self.fleet)
        ]
        families = {
            field: GaugeMetricFamily(f"fleetctl_capacity_{field}", help, labels=["fleet", "scope", "rack"])
            for field, help in (
                ("unavailable", "Nodes out of service, of the fleet or one rack"),
                ("limit", "The most nodes automation may take out"),
                ("headroom", "Nodes automation may still take out (negative: past the limit)"),
            )
        }
        for b in budgets(self.policy, guard_snapshot(nodes, datetime.now(UTC), self.policy)):
            scope, _, rack = b.scope.partition(" ")
            for field, family in families.items():
                family.add_metric([self.fleet, scope, rack], getattr(b, field))
        yield from families.values()

    def _check_families(self, sc: Scrape) -> Iterator[Metric]:
        """Check runs by judged status, and how long each check ran."""
        runs = CounterMetricFamily(
            "fleetctl_check_runs", "Check runs per fleet, check and judged status", labels=["fleet", "check", "status"]
        )
        for (fleet, check, status), count in sc.check_counts:
            runs.add_metric([fleet, check, status], count)
        yield runs
        durations = HistogramMetricFamily(
            "fleetctl_check_duration_seconds", "How long each check ran", labels=["fleet", "check"]
        )
        for (fleet, check), tally in sorted(sc.check_seconds.items()):
            durations.add_metric([fleet, check], _buckets(tally, CHECK_DURATION_BUCKETS), tally[-1])
        yield durations

    def _failure_families(self, sc: Scrape) -> Iterator[Metric]:
        """Drains by who asked, failures by cause, and repairs (MTTR)."""
        drained = CounterMetricFamily(
            "fleetctl_drains", "Nodes drained, by who asked (operator or automation)", labels=["fleet", "actor_kind"]
        )
        for (fleet, actor_kind), count in sorted(sc.drains.items()):
            drained.add_metric([fleet, actor_kind], count)
        yield drained
        failed = CounterMetricFamily(
            "fleetctl_node_failures", "Failures (see fleetctl.reliability.metrics) by cause", labels=["fleet", "cause"]
        )
        for (fleet, cause), count in sorted(sc.causes.items()):
            failed.add_metric([fleet, cause], count)
        yield failed
        repaired = HistogramMetricFamily(
            "fleetctl_node_repair_seconds",
            "From a failure taking a node out of production to its return "
            "(MTTR: _sum / _count; planned work is no repair)",
            labels=["fleet"],
        )
        for fleet in sorted({*sc.repairs, self.fleet}):
            tally = sc.repairs.get(fleet, [0.0] * (len(REPAIR_BUCKETS) + 2))
            repaired.add_metric([fleet], _buckets(tally, REPAIR_BUCKETS), tally[-1])
        yield repaired

    def _remediation_families(self, sc: Scrape) -> Iterator[Metric]:
        """Remediation runs ended (a counter: a run's count under its final status only grows),
        and those running now (a gauge)."""
        ended: Counter[tuple[str, str, str, str]] = Counter()
        running: Counter[tuple[str, str, str]] = Counter()
        for node, runbook, mode, status, count in sc.rows.remediations:
            fleet = sc.fleet_of.get(node, self.fleet)
            if status == "running":
                running[(fleet, runbook, mode)] += count
            else:
                ended[(fleet, runbook, mode, status)] += count
        remediated = CounterMetricFamily(
            "fleetctl_remediation_runs",
            "Remediation runs ended, by runbook, mode and how they ended",
            labels=["fleet", "runbook", "mode", "status"],
        )
        for labels, count in sorted(ended.items()):
            remediated.add_metric(list(labels), count)
        yield remediated
        in_flight = GaugeMetricFamily(
            "fleetctl_remediation_runs_running", "Remediation runs running now", labels=["fleet", "runbook", "mode"]
        )
        for running_labels, count in sorted(running.items()):
            in_flight.add_metric(list(running_labels), count)
        yield in_flight

    def _rma_families(self, sc: Scrape) -> Iterator[Metric]:
        """RMA records by status, and each one held for an operator."""
        per_status: Counter[tuple[str, str]] = Counter()
        for node, status, *_ in sc.rows.rmas:
            per_status[(sc.fleet_of.get(node, self.fleet), status)] += 1
        returned = GaugeMetricFamily("fleetctl_rma_records", "RMA records by status", labels=["fleet", "status"])
        for (fleet, status), count in sorted(per_status.items()):
            returned.add_metric([fleet, status], count)
        yield returned
        yield self._rmas_held(sc.rows.rmas, sc.fleet_of, {name: rack for name, _, rack, *_ in sc.rows.nodes})
        yield needs_operator_family(self.engine, sc.fleet_of, self.fleet)

    def _restart_families(self, sc: Scrape) -> Iterator[Metric]:
        """Job restarts by outcome, their latency, and the pending jobs and why they wait."""
        restarts = sc.rows.restarts
        # A restart is its first bad node's fleet's (the job ran there).
        restart_fleet = [sc.fleet_of.get(bad[0], self.fleet) if bad else self.fleet for *_, bad in restarts]
        restarted = CounterMetricFamily(
            "fleetctl_job_restarts", "Job restarts off bad nodes, by outcome", labels=["fleet", "status"]
        )
        for (fleet, status), count in sorted(
            Counter(zip(restart_fleet, (r[0] for r in restarts), strict=False)).items()
        ):
            restarted.add_metric([fleet, status], count)
        yield restarted
        latency = HistogramMetricFamily(
            "fleetctl_job_restart_latency_seconds",
            "From the fault being seen to the job running again",
            labels=["fleet"],
        )
        for fleet in sorted({*restart_fleet, self.fleet}):
            latency.add_metric(
                [fleet],
                *_histogram(
                    (
                        max(0.0, (as_utc(running) - as_utc(fault)).total_seconds())
                        for (_, fault, running, *_), of in zip(restarts, restart_fleet, strict=False)
                        if running is not None and of == fleet
                    ),
                    RESTART_LATENCY_BUCKETS,
                ),
            )
        yield latency
        yield self._pending(sc.rows.pending_jobs, restarts, restart_fleet)
        yield self._hung_jobs(sc.fleet_of)

    def _hung_jobs(self, fleet_of: dict[str, str]) -> Metric:
        """The running jobs the HungJobs judge flags hung now, under their first node's fleet."""
        hung = GaugeMetricFamily(
            "fleetctl_jobs_hung",
            "Jobs the hung-job judge found hung at its latest ticks (fleetctl.db.hangs)",
            labels=["fleet"],
        )
        per_fleet = Counter(
            fleet_of.get(nodes[0], self.fleet) if nodes else self.fleet
            for nodes in hangs.jobs_hung_now(self.engine).values()
        )
        for fleet in sorted({*per_fleet, self.fleet}):
            hung.add_metric([fleet], per_fleet[fleet])
        return hung

    def _guard_families(self, sc: Scrape) -> Iterator[Metric]:
        """The capacity guard's answers, and each fleet's breaker."""
        guard = CounterMetricFamily(
            "fleetctl_guard_decisions", "Capacity guard answers to automated removals", labels=["fleet", "decision"]
        )
        for (fleet, kind), count in sc.decisions:
            guard.add_metric([fleet, kind], count)
        yield guard
        breaker = GaugeMetricFamily(
            "fleetctl_breaker_open", "1 while the fleet's automation circuit breaker is open", labels=["fleet"]
        )
        latest = {self.fleet: "breaker_closed", **sc.breaker}  # nothing recorded: it never opened
        for fleet, kind in sorted(latest.items()):
            breaker.add_metric([fleet], 1.0 if kind == "breaker_open" else 0.0)
        yield breaker

    def _health_families(self, sc: Scrape) -> Iterator[Metric]:
        """The unhealthy nodes still in production, and the lemon nodes."""
        fleets = sorted({*sc.fleet_of.values(), self.fleet})
        yield from self._production_conditions(sc, fleets)
        lemon = GaugeMetricFamily(
            "fleetctl_lemon_nodes",
            f"Nodes remediated at least the lemon threshold ({self.lemon.threshold}) times in "
            f"the lemon window ({self.lemon.window / timedelta(days=1):g} days) ending now "
            "(LemonPolicy.times_remediated; planned work is no remediation)",
            labels=["fleet"],
        )
        per_fleet = Counter(sc.fleet_of.get(node, self.fleet) for node in sc.lemons)
        for fleet in sorted({*fleets, *per_fleet}):
            lemon.add_metric([fleet], per_fleet[fleet])
        yield lemon

    def _rule_families(self, sc: Scrape) -> Iterator[Metric]:
        """Rule precision: automated removals by rule once resolved, and those still open."""
        outcomes = CounterMetricFamily(
            "fleetctl_rule_removals_resolved",
            "Automated removals by rule (their failure label) once resolved: "
            "confirmed (a part replaced, retired, or a repair before the return) or unchanged (back as it was, or an "
            "RMA with no fault found); precision = confirmed / (confirmed + unchanged)",
            labels=["fleet", "rule", "outcome"],
        )
        for (fleet, rule, outcome), count in sc.resolved:
            outcomes.add_metric([fleet, rule, outcome], count)
        yield outcomes
        still_open = GaugeMetricFamily(
            "fleetctl_rule_removals_open",
            "Automated removals by rule not yet resolved (still out, or in an RMA not yet closed)",
            labels=["fleet", "rule"],
        )
        for (fleet, rule), count in sorted(sc.removals_open.items()):
            still_open.add_metric([fleet, rule], count)
        yield still_open

    def _production_conditions(self, sc: Scrape, fleets: list[str]) -> Iterator[Metric]:
        """The unhealthy nodes still in production: per node each condition `node list` shows it
        with (conditions.conditions, on the same evidence), and their count per condition."""
        per_node = GaugeMetricFamily(
            "fleetctl_production_node_condition",
            "1 per condition of each node in production that has one "
            "(conditions.PRODUCTION_CONDITIONS, as `fleetctl node list` shows them)",
            labels=["fleet", "node", "rack", "condition"],
        )
        counts: Counter[tuple[str, str]] = Counter({(fleet, c): 0 for fleet in fleets for c in PRODUCTION_CONDITIONS})
        for name, state, rack, _, _, since in sorted(sc.rows.nodes):
            if state != PRODUCTION:
                continue
            since = as_utc(since)
            checks = sc.latest_checks.get(name, [])
            refusal = sc.refused.get(name)
            held = (
                DrainHeld(refusal[2], max(refusal[0], since), refusal[1], 1)
                if refusal is not None and refusal[1] >= since
                else None
            )
            suspect = sc.suspects.get(name)
            stalled = Condition("Stalled", "", sc.stalls[name]) if name in sc.stalls else None
            last_cause = self.fold.last_move[name][2] if name in self.fold.last_move else ""
            fleet = sc.fleet_of[name]
            stale = stale_evidence(
                state, checks, sc.rows.agent_seen.get(name), sc.now, sc.sweep_every_s.get(fleet), self.agent_silence_s
            )
            for c in dict.fromkeys(
                c.type for c in conditions(state, checks, held, last_cause, suspect, stalled, since, stale)
            ):
                per_node.add_metric([fleet, one_line(name, REASON_LIMIT), rack, c], 1.0)
                counts[(fleet, c)] += 1
        yield per_node
        by_condition = GaugeMetricFamily(
            "fleetctl_production_nodes_by_condition",
            "Nodes in production with each condition (a node may have several)",
            labels=["fleet", "condition"],
        )
        for (fleet, c), count in sorted(counts.items()):
            by_condition.add_metric([fleet, c], count)
        yield by_condition

    def _rmas_held(self, rmas: list[RmaRow], fleet_of: dict[str, str], rack_of: dict[str, str]) -> GaugeMetricFamily:
        """Per RMA held for an operator (awaiting_confirmation: a correlated burst,
        rma.burst_verdict): since when, the time its record was written held. One series per
        held record, gone once `rma confirm` or `rma reject` answers it."""
        family = GaugeMetricFamily(
            "fleetctl_rma_awaiting_confirmation_since_timestamp_seconds",
            "Per RMA held for an operator's `fleetctl rma confirm|reject` (a correlated burst): when it was held; "
            "rma is the record's id (`fleetctl rma list` shows why)",
            labels=["fleet", "node", "rack", "rma"],
        )
        for node, status, opened_at, _, rma_id in sorted(rmas, key=lambda r: r[4]):
            if status == AWAITING_CONFIRMATION:
                family.add_metric(
                    [fleet_of.get(node, self.fleet), one_line(node, REASON_LIMIT), rack_of.get(node, ""), str(rma_id)],
                    as_utc(opened_at).timestamp(),
                )
        return family

    def _pending(
        self, pending_jobs: list[str], restarts: list[RestartRow], restart_fleet: list[str]
    ) -> GaugeMetricFamily:
        """Pending jobs per fleet and why (metrics.pending_reason), from the restart in progress
        of each, if any."""
        in_progress = {
            job: (placement, fleet)
            for (status, _, _, job, placement, _), fleet in zip(restarts, restart_fleet, strict=False)
            if status == "in_progress"
        }
        counts: Counter[tuple[str, str]] = Counter({(self.fleet, r): 0 for r in PENDING_REASONS})
        for job in pending_jobs:
            placement, fleet = in_progress.get(job, (None, self.fleet))
            counts[(fleet, pending_reason(placement))] += 1
        family = GaugeMetricFamily(
            "fleetctl_jobs_pending",
            "Pending jobs and why they wait (metrics.PENDING_REASONS: "
            "queued, or restarted and waiting where the restart asked)",
            labels=["fleet", "reason"],
        )
        for (fleet, why), count in sorted(counts.items()):
            family.add_metric([fleet, why], count)
        return family


def needs_operator_family(engine: Engine, fleet_of: dict[str, str], default_fleet: str) -> GaugeMetricFamily:
    """Per node whose runbook run failed or is stuck (RemediationFailed, RemediationStuck, as
    `node show` and `fleet status` judge it): since when it has waited for an operator. One
    series per node, gone once it moves on (a run again, an RMA, back in production)."""
    from fleetctl.nodes.view_store import remediation_conditions

    nodes = queries.list_nodes(engine)
    rack_of = {n.name: n.rack for n in nodes}
    family = GaugeMetricFamily(
        "fleetctl_node_needs_operator_since_timestamp_seconds",
        "Per node whose runbook run failed or is stuck, waiting for an operator: since when "
        "(condition RemediationFailed or RemediationStuck; `fleetctl runbook runs --node NODE` shows the step)",
        labels=["fleet", "node", "rack", "condition"],
    )
    for name, c in sorted(remediation_conditions(engine, nodes, datetime.now(UTC)).items()):
        family.add_metric(
            [fleet_of.get(name, default_fleet), one_line(name, REASON_LIMIT), rack_of.get(name, ""), c.type],
            as_utc(c.since).timestamp() if c.since is not None else 0.0,
        )
    return family


class AuditCollector:
    """The front door's decisions from the audit trail (audit_requests), so the fleet's one
    exporter counts them whichever front door (or gateway import) wrote them, and across the
    front door's restarts. Each row is read once (AppendOnlyReader): retention's removal of
    old rows never lowers a count."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.lock = Lock()
        self.counts: Counter[tuple[str, str, str]] = Counter()  # (fleet, decision, role needed)
        self.reader = AppendOnlyReader(
            AuditRequest.id,
            (AuditRequest.fleet, AuditRequest.decision, AuditRequest.role_needed),
            self._fold,
        )

    def _fold(self, row: Any) -> None:
        _, fleet, decision, role = row
        self.counts[(fleet, decision, role)] += 1

    def collect(self) -> Iterator[Metric]:
        with self.lock, Session(self.engine) as session:
            self.reader.read(session)
            counts = sorted(self.counts.items())
        family = CounterMetricFamily(
            "fleetctl_audit_requests",
            "Writes asked of the front door (the audit trail), by fleet, decision and the role the command needs",
            labels=["fleet", "decision", "role"],
        )
        for (fleet, decision, role), count in counts:
            family.add_metric([fleet, decision, role], count)
        yield family


# How long a scraper has to finish its TLS handshake and each read of its request.
CONNECTION_TIMEOUT_S = 30.0


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Nothing per scrape: Prometheus scrapes every few seconds."""


class _ExporterServer(ThreadingWSGIServer):
    """prometheus_client's threaded WSGI server, over TLS that is loaded again when its files
    change (fleetctl.server_tls, as the intake's): each connection is wrapped with the current
    certificate as it is accepted, its handshake made on its own thread (a scraper that never
    says hello holds no other up)."""

    tls: ReloadingTLS | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        conn, address = self.socket.accept()
        if self.tls is None:
            return conn, address
        conn.settimeout(CONNECTION_TIMEOUT_S)
        return self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False), address

    def finish_request(self, request: Any, client_address: Any) -> None:
        if isinstance(request, ssl.SSLSocket):
            request.do_handshake()
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A scraper that fails its handshake or goes away is one line at debug, not a traceback."""
        log.debug("scrape from %s ended: %s", client_address, sys.exc_info()[1])


def serve(
    engine: Engine,
    port: int,
    address: str = "127.0.0.1",
    fleet: str = "default",
    policy: GuardPolicy | None = None,
    lemon: LemonPolicy | None = None,
    agent_silence_s: float = Settings.agent_silence_s,
    tls_cert: str | None = None,
    tls_key: str | None = None,
    tls_client_ca: str | None = None,
    tls_check_s: float = TLS_RELOAD_CHECK_S,
) -> WSGIServer:
    """Serve /metrics on a background thread; returns the HTTP server (call .shutdown()).
    With `tls_cert` and `tls_key`, over https, the files looked at every `tls_check_s` and a
    renewed certificate served without a restart; with `tls_client_ca`, scrapers must present
    a certificate that CA signed. BadTLSFiles (one line) when a file will not do at start."""
    registry = CollectorRegistry()
    registry.register(FleetCollector(engine, fleet, policy, lemon, agent_silence_s))
    registry.register(AuditCollector(engine))
    tls = (
        tls_context(Path(tls_cert), Path(tls_key), Path(tls_client_ca) if tls_client_ca else None, tls_check_s)
        if tls_cert and tls_key
        else None
    )

    class Server(_ExporterServer):
        # As start_http_server: IPv6 for an IPv6 address.
        address_family = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    server = make_server(address, port, make_wsgi_app(registry), Server, handler_class=_QuietHandler)
    server.tls = tls
    threading.Thread(target=server.serve_forever, name="fleetctl-exporter", daemon=True).start()
    return server
