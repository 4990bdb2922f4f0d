"""The Prometheus exporter: the fleet's current counts, read from the database on every scrape.
Failures are classified by `fleetctl.metrics`, the same definitions the report uses."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Iterable, Sequence

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from sqlalchemy import func
from sqlmodel import Session, col, select

from fleetctl.db.models import AutomationEvent, CheckRun, JobRestart, Node, NodeEvent
from fleetctl.lifecycle import NodeState
from fleetctl.metrics import PRODUCTION, as_utc, failure_label, is_failure
from fleetctl.metrics_load import transition_of

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

CHECK_DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1200.0, 3600.0)
RESTART_LATENCY_BUCKETS = (10.0, 30.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0, 1800.0, 3600.0)
# What the capacity guard records per automated removal (automation_events.kind).
GUARD_DECISIONS = ("grant", "deny", "force")


def _histogram(values: Iterable[float], bounds: Sequence[float]) -> tuple[list[tuple[str, float]], float]:
    """Cumulative Prometheus buckets (with +Inf) and the sum of `values`."""
    values = list(values)
    buckets = [(repr(b), float(sum(1 for v in values if v <= b))) for b in bounds]
    return buckets + [("+Inf", float(len(values)))], float(sum(values))


class FleetCollector:
    """Reads the database on every scrape: the numbers are never staler than the scrape."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine

    def collect(self):
        with Session(self.engine) as session:
            node_counts = list(session.exec(select(Node.state, Node.rack, Node.profile, func.count())
                                            .group_by(Node.state, Node.rack, Node.profile)))
            check_counts = list(session.exec(select(CheckRun.check_name, CheckRun.status, func.count())
                                             .group_by(CheckRun.check_name, CheckRun.status)))
            check_times = list(session.exec(select(CheckRun.check_name, CheckRun.started_at, CheckRun.finished_at)))
            drains = list(session.exec(select(NodeEvent.actor_kind, func.count()).where(NodeEvent.trigger == "drain")
                                       .group_by(NodeEvent.actor_kind)))
            exits = list(session.exec(select(NodeEvent).where(NodeEvent.from_state == PRODUCTION)))
            restarts = list(session.exec(select(JobRestart.status, JobRestart.fault_seen_at, JobRestart.running_at)))
            decisions = list(session.exec(select(AutomationEvent.fleet, AutomationEvent.kind, func.count())
                                          .where(col(AutomationEvent.kind).in_(GUARD_DECISIONS))
                                          .group_by(AutomationEvent.fleet, AutomationEvent.kind)))
            breaker_events = list(session.exec(select(AutomationEvent.fleet, AutomationEvent.kind)
                                               .where(col(AutomationEvent.kind).in_(["breaker_open", "breaker_closed"]))
                                               .order_by(AutomationEvent.at, AutomationEvent.id)))

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
        for check, status, count in check_counts:
            runs.add_metric([check, status], count)
        yield runs
        durations = HistogramMetricFamily("fleetctl_check_duration_seconds", "How long each check ran",
                                          labels=["check"])
        seconds_by_check: dict[str, list[float]] = defaultdict(list)
        for check, started, finished in check_times:
            seconds_by_check[check].append(max(0.0, (as_utc(finished) - as_utc(started)).total_seconds()))
        for check, seconds in sorted(seconds_by_check.items()):
            durations.add_metric([check], *_histogram(seconds, CHECK_DURATION_BUCKETS))
        yield durations

        drained = CounterMetricFamily("fleetctl_drains", "Nodes drained, by who asked (operator or automation)",
                                      labels=["actor_kind"])
        for actor_kind, count in drains:
            drained.add_metric([actor_kind], count)
        yield drained
        failed = CounterMetricFamily("fleetctl_node_failures", "Failures (see fleetctl.metrics) by cause",
                                     labels=["cause"])
        causes = Counter(failure_label(t) for t in map(transition_of, exits) if is_failure(t))
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
        for fleet, kind, count in decisions:
            guard.add_metric([fleet, kind], count)
        yield guard
        latest = {fleet: kind for fleet, kind in breaker_events}
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
