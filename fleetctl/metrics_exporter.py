"""The Prometheus exporter: the fleet's current counts, read from the database on every scrape.
Failures are classified by `fleetctl.metrics`, the same definitions the report uses.

A scrape costs what changed since the last one, not the fleet's whole history: the
append-only tables (check runs, transitions, guard decisions) are read once each, row by row
as they arrive, into counters this process keeps (issue 14: at 300k check runs each scrape
took 1.5 s reading every one). Only the nodes (as many as the fleet) and the job restarts
(whose rows change until they finish) are read whole.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from threading import Lock
from time import monotonic
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from sqlalchemy import func, or_
from sqlmodel import Session, col, select

from fleetctl.db.models import AutomationEvent, CheckRun, JobRestart, Node, NodeEvent
from fleetctl.lifecycle import NodeState
from fleetctl.metrics import PRODUCTION, Transition, as_utc, failure_label, is_failure

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

CHECK_DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)
RESTART_LATENCY_BUCKETS = (10.0, 30.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1800.0, 3600.0)
# What the capacity guard records per automated removal (automation_events.kind).
GUARD_DECISIONS = ("grant", "deny", "force")
BREAKER_KINDS = ("breaker_open", "breaker_closed")


def _histogram(values: Iterable[float], bounds: Sequence[float]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets (with +Inf) and the sum of `values`."""
    values = list(values)
    buckets = [(repr(b), float(sum(1 for v in values if v <= b))) for b in bounds]
    return buckets + [("+Inf", float(len(values)))], float(sum(values))


# An id below the highest read but not seen yet belongs to a transaction that committed after
# a later one (PostgreSQL hands out ids before commit): it is looked for again on each scrape
# for this long, then given up (its transaction rolled back). At most this many are tracked.
GAP_TTL_S = 600.0
GAPS_KEPT = 10_000


class AppendOnlyReader:
    """Reads each row of an append-only table once, across scrapes: the rows above the highest
    id read so far, and the ids skipped below it (see GAP_TTL_S). `fold` takes each new row."""

    def __init__(self, id_column: Any, columns: Sequence[Any], fold: Callable[[Any], None],
                 where: Any = None) -> None:
        self.id_column, self.columns, self.fold, self.where = id_column, list(columns), fold, where
        self.high = 0
        self.gaps: dict[int, float] = {}

    def read(self, session: Session) -> None:
        now = monotonic()
        self.gaps = {i: t for i, t in self.gaps.items() if now - t < GAP_TTL_S}
        fresh = self.id_column > self.high
        query = select(self.id_column, *self.columns).where(
            or_(fresh, self.id_column.in_(list(self.gaps))) if self.gaps else fresh)
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


class FleetCollector:
    """Reads the database on every scrape (the numbers are never staler than the scrape), but
    each append-only row only once (AppendOnlyReader)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.lock = Lock()  # two scrapes at once must not fold the same rows twice
        self.check_counts: Counter[tuple[str, str]] = Counter()
        self.check_seconds: dict[str, list[float]] = defaultdict(lambda: [0.0] * (len(CHECK_DURATION_BUCKETS) + 2))
        self.drains: Counter[str] = Counter()
        self.failures: Counter[str] = Counter()
        self.decisions: Counter[tuple[str, str]] = Counter()
        self.breaker: dict[str, str] = {}  # each fleet's latest open/close
        self.readers = (
            AppendOnlyReader(CheckRun.id, (CheckRun.check_name, CheckRun.status, CheckRun.started_at,
                                           CheckRun.finished_at), self._fold_check),
            AppendOnlyReader(NodeEvent.id, (NodeEvent.from_state, NodeEvent.to_state, NodeEvent.trigger,
                                            NodeEvent.cause, NodeEvent.actor_kind, NodeEvent.at, NodeEvent.failure),
                             self._fold_event),
            AppendOnlyReader(AutomationEvent.id, (AutomationEvent.fleet, AutomationEvent.kind), self._fold_decision,
                             where=col(AutomationEvent.kind).in_(GUARD_DECISIONS + BREAKER_KINDS)),
        )

    def _fold_check(self, row) -> None:
        _, check, status, started, finished = row
        self.check_counts[(check, status)] += 1
        seconds = max(0.0, (as_utc(finished) - as_utc(started)).total_seconds())
        tally = self.check_seconds[check]  # one count per bucket, then +Inf's count, then the sum
        for i, bound in enumerate(CHECK_DURATION_BUCKETS):
            tally[i] += seconds <= bound
        tally[-2] += 1
        tally[-1] += seconds

    def _fold_event(self, row) -> None:
        _, from_state, to_state, trigger, cause, actor_kind, at, failure = row
        if trigger == "drain":
            self.drains[actor_kind] += 1
        if from_state == PRODUCTION:
            t = Transition("", from_state, to_state, as_utc(at), trigger, cause, actor_kind, failure)
            if is_failure(t):
                self.failures[failure_label(t)] += 1

    def _fold_decision(self, row) -> None:
        _, fleet, kind = row
        if kind in BREAKER_KINDS:
            self.breaker[fleet] = kind  # rows arrive in id order: the last one stands
        else:
            self.decisions[(fleet, kind)] += 1

    def collect(self):
        with self.lock, Session(self.engine) as session:
            node_counts = list(session.exec(select(Node.state, Node.rack, Node.profile, func.count())
                                            .group_by(Node.state, Node.rack, Node.profile)))
            for reader in self.readers:
                reader.read(session)
            restarts = list(session.exec(select(JobRestart.status, JobRestart.fault_seen_at, JobRestart.running_at)))
            check_counts = sorted(self.check_counts.items())
            check_seconds = {check: list(tally) for check, tally in self.check_seconds.items()}
            drains, causes, decisions = dict(self.drains), dict(self.failures), sorted(self.decisions.items())
            latest = dict(self.breaker)

        per_state: Counter[str] = Counter({s.value: 0 for s in NodeState})
        by_rack = GaugeMetricFamily("fleetctl_nodes_by_rack", "Nodes per rack, GPU profile and lifecycle state",
                                    labels=["rack", "profile", "state"])
        for state, rack, profile, count in node_counts:
            per_state[state] += count
            by_rack.add_metric([rack, profile, state], count)
        nodes = GaugeMetricFamily("fleetctl_nodes", "Nodes per lifecycle state", labels=["state"])
        for state, count in sorted(per_state.items()):
            nodes.add_metric([state], count)
        yield nodes
        yield by_rack

        runs = CounterMetricFamily("fleetctl_check_runs", "Check runs per check and judged status",
                                   labels=["check", "status"])
        for (check, status), count in check_counts:
            runs.add_metric([check, status], count)
        yield runs
        durations = HistogramMetricFamily("fleetctl_check_duration_seconds", "How long each check ran",
                                          labels=["check"])
        for check, tally in sorted(check_seconds.items()):
            buckets = [(repr(b), tally[i]) for i, b in enumerate(CHECK_DURATION_BUCKETS)] + [("+Inf", tally[-2])]
            durations.add_metric([check], buckets, tally[-1])
        yield durations

        drained = CounterMetricFamily("fleetctl_drains", "Nodes drained, by who asked (operator or automation)",
                                      labels=["actor_kind"])
        for actor_kind, count in sorted(drains.items()):
            drained.add_metric([actor_kind], count)
        yield drained
        failed = CounterMetricFamily("fleetctl_node_failures", "Failures (see fleetctl.metrics) by cause",
                                     labels=["cause"])
        for cause, count in sorted(causes.items()):
            failed.add_metric([cause], count)
        yield failed

        restarted = CounterMetricFamily("fleetctl_job_restarts", "Job restarts off bad nodes, by outcome",
                                        labels=["status"])
        for status, count in sorted(Counter(status for status, _, _ in restarts).items()):
            restarted.add_metric([status], count)
        yield restarted
        latency = HistogramMetricFamily("fleetctl_job_restart_latency_seconds",
                                        "From the fault being seen to the job running again")
        latency.add_metric([], *_histogram(
            (max(0.0, (as_utc(running) - as_utc(fault)).total_seconds()) for _, fault, running in restarts
             if running is not None), RESTART_LATENCY_BUCKETS))
        yield latency

        guard = CounterMetricFamily("fleetctl_guard_decisions", "Capacity guard answers to automated removals",
                                    labels=["fleet", "decision"])
        for (fleet, kind), count in decisions:
            guard.add_metric([fleet, kind], count)
        yield guard
        breaker = GaugeMetricFamily("fleetctl_breaker_open", "1 while the fleet's automation circuit breaker is open",
                                    labels=["fleet"])
        for fleet, kind in sorted(latest.items()):
            breaker.add_metric([fleet], 1.0 if kind == "breaker_open" else 0.0)
        yield breaker


def serve(engine: Engine, port: int, address: str = "127.0.0.1"):
    """Serve /metrics on a background thread; returns the HTTP server (call .shutdown())."""
    registry = CollectorRegistry()
    registry.register(FleetCollector(engine))
    server, _thread = start_http_server(port, addr=address, registry=registry)
    return server
