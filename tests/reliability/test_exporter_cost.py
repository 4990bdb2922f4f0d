"""A scrape costs what changed since the last one, not the history (each scrape once read
every check run, 1.5 s at 300k rows). Cost is counted, not timed: SQLite's own count of the
virtual-machine instructions it ran for the scrape's queries (`set_progress_handler`), which
grows with every row a query scans, whichever query it is and whatever Python does after."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from prometheus_client.core import CollectorRegistry
from sqlalchemy import create_engine, event
from sqlalchemy.pool import NullPool
from sqlmodel import Session

from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent, CheckRun, NodeEvent
from fleetctl.reliability.exporter_server import FleetCollector

START = datetime(2025, 3, 1, tzinfo=UTC)
STEPS_PER_TICK = 100


class Counted:
    """An engine on the same database whose every connection counts SQLite's VM steps."""

    def __init__(self, url: str) -> None:
        self.ticks = 0
        self.engine = create_engine(url, poolclass=NullPool)
        event.listen(self.engine, "connect", self._count)

    def _count(self, dbapi_connection, _record) -> None:
        def tick() -> int:
            self.ticks += 1
            return 0  # 0: go on

        dbapi_connection.set_progress_handler(tick, STEPS_PER_TICK)

    def cost_of(self, registry: CollectorRegistry) -> tuple[int, dict]:
        before = self.ticks
        samples = {
            (s.name, tuple(sorted(s.labels.items()))): s.value for family in registry.collect() for s in family.samples
        }
        return self.ticks - before, samples


def _history(engine, start: int, count: int) -> None:
    """`count` check runs, transitions and guard decisions, with keys numbered from `start`."""
    with Session(engine) as session:
        for i in range(start, start + count):
            at = START + timedelta(minutes=i)
            session.add(
                CheckRun(
                    node_name=f"n{i % 50}",
                    check_name="nccl-allreduce",
                    kind="nccl",
                    status="fail" if i % 10 == 0 else "pass",
                    started_at=at,
                    finished_at=at + timedelta(seconds=90),
                    idempotency_key=f"c{i}",
                )
            )
            session.add(
                NodeEvent(
                    node_name=f"n{i % 50}",
                    from_state="production",
                    to_state="draining",
                    trigger="drain",
                    cause="XID 79: fallen off the bus",
                    actor="t",
                    actor_kind="automation",
                    failure="xid 79",
                    at=at,
                    idempotency_key=f"e{i}",
                )
            )
            session.add(
                AutomationEvent(kind="grant", actor="t", reason="within limits", at=at, idempotency_key=f"a{i}")
            )
        session.commit()


def test_a_scrapes_cost_does_not_grow_with_history(sqlite_url) -> None:
    get_engine(sqlite_url)  # the schema
    counted = Counted(sqlite_url)
    registry = CollectorRegistry()
    registry.register(FleetCollector(counted.engine))

    def after_ten_more(history: int, start: int) -> tuple[int, dict]:
        _history(counted.engine, start, history)
        counted.cost_of(registry)  # the scrape that reads the history once
        _history(counted.engine, start + history, 10)
        return counted.cost_of(registry)

    small, small_samples = after_ten_more(200, 0)
    large, large_samples = after_ten_more(4000, 210)
    # Twenty times the history; a scrape that reads it grows twentyfold, one that reads the
    # new rows only does not (the margin is for B-tree depth, not for rows).
    assert large <= 1.5 * small, (small, large)

    # ... and its numbers are still the whole history's.
    total = 200 + 10 + 4000 + 10
    runs = ("fleetctl_check_runs_total", (("check", "nccl-allreduce"), ("fleet", "default"), ("status", "pass")))
    assert small_samples[runs] == 189 and large_samples[runs] == total - total // 10
    assert large_samples[("fleetctl_drains_total", (("actor_kind", "automation"), ("fleet", "default")))] == total
    assert large_samples[("fleetctl_node_failures_total", (("cause", "xid 79"), ("fleet", "default")))] == total
    assert large_samples[("fleetctl_guard_decisions_total", (("decision", "grant"), ("fleet", "default")))] == total
    assert (
        large_samples[("fleetctl_check_duration_seconds_count", (("check", "nccl-allreduce"), ("fleet", "default")))]
        == total
    )
    assert (
        large_samples[("fleetctl_check_duration_seconds_sum", (("check", "nccl-allreduce"), ("fleet", "default")))]
        == total * 90
    )


def test_a_row_committed_after_a_later_one_is_still_counted(sqlite_url) -> None:
    """PostgreSQL hands out ids before commit: an id below the highest read can appear later."""
    engine = get_engine(sqlite_url)
    collector = FleetCollector(engine)
    registry = CollectorRegistry()
    registry.register(collector)
    with Session(engine) as session:
        for i in (1, 3):
            session.add(
                CheckRun(id=i, node_name="n1", check_name="hpl", kind="hpl", status="pass", idempotency_key=f"c{i}")
            )
        session.commit()
    list(registry.collect())
    with Session(engine) as session:
        session.add(CheckRun(id=2, node_name="n1", check_name="hpl", kind="hpl", status="pass", idempotency_key="c2"))
        session.commit()
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value for family in registry.collect() for s in family.samples
    }
    assert samples[("fleetctl_check_runs_total", (("check", "hpl"), ("fleet", "default"), ("status", "pass")))] == 3
