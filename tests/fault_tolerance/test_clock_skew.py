"""Clocks that jump and laptops that sleep: a CLI whose clock is days off, or an event resent
after a long pause, must not move a health event into or out of the 24 h escalation window.
Times are synthetic (no waiting): the activity is called with the receive time a workflow
would stamp, and the capacity guard is checked to read no wall clock at all."""

from __future__ import annotations

import ast
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.nodes.health import MAX_RECORD_AGE_S, MAX_SENDER_SKEW_S, plausible_time
from fleetctl.workflows.activities.node import NodeActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import connect, ensure_node_workflows, send_health_events
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread

HOUR, DAY = 3600.0, 86400.0
T0 = 1_800_000_000.0  # the server's clock when the first event arrives
WARNING_XID = 94  # contained ECC: three within 24 h drain the node


@pytest.fixture
def health(make_settings, sqlite_url):
    """record(received_at, sender_at, event_id=None, from_record=False) -> verdict: one event through the real
    activity and database, received by the server at `received_at`."""
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1)
    activities = NodeActivities(settings, SchedulerRegistry(settings))

    def record(received_at: float, sender_at: float, event_id: str | None = None, from_record: bool = False):
        return activities.record_health_event(
            HealthEventInput(
                node,
                "xid",
                WARNING_XID,
                "contained ECC",
                "cli",
                event_id or uuid.uuid4().hex,
                sender_at,
                received_at,
                at_from_record=from_record,
            )
        )

    record.node, record.engine = node, get_engine(settings.db_url)
    return record


def test_a_sender_clock_days_behind_still_escalates(health) -> None:
    assert not health(T0, T0).drain_now
    assert not health(T0 + HOUR, T0 + HOUR).drain_now
    # The third within two hours, from a laptop whose clock is three days slow.
    assert health(T0 + 2 * HOUR, T0 + 2 * HOUR - 3 * DAY).drain_now


def test_a_sender_clock_days_ahead_still_escalates(health) -> None:
    health(T0, T0)
    health(T0 + HOUR, T0 + HOUR)
    assert health(T0 + 2 * HOUR, T0 + 2 * HOUR + 3 * DAY).drain_now


def test_a_wrong_clock_cannot_pull_a_late_event_into_an_old_window(health) -> None:
    health(T0, T0)
    health(T0 + 0.9 * DAY, T0 + 0.9 * DAY)
    # Really three days later; the sender's clock (two days slow) would put it beside the others.
    verdict = health(T0 + 3 * DAY, T0 + DAY)
    assert not verdict.drain_now, verdict.reason
    stored = sorted(_epoch(h.at) for h in queries.health_events(health.engine, health.node))
    assert stored[-1] == pytest.approx(T0 + 3 * DAY)  # recorded when it happened, not when the laptop thought


def test_an_event_resent_after_a_long_pause_keeps_its_first_time(health) -> None:
    health(T0, T0, "seen-on-monday")
    health(T0 + 3 * DAY - HOUR, T0 + 3 * DAY - HOUR)
    health(T0 + 3 * DAY, T0 + 3 * DAY)
    # The laptop wakes up on Thursday and sends Monday's event again.
    resent = health(T0 + 3 * DAY + 60, T0, "seen-on-monday")
    assert not resent.drain_now, resent.reason
    assert len(queries.health_events(health.engine, health.node)) == 3


def _epoch(at: datetime) -> float:
    """SQLite gives back naive datetimes (stored as UTC)."""
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


@pytest.mark.parametrize(
    "sent, from_record, expected, why",
    [
        (T0 - 10, False, T0 - 10, "a sender's clock within the skew is believed"),
        (
            T0 - MAX_SENDER_SKEW_S - 1,
            False,
            T0,
            "a sender's clock minutes behind is a wrong clock: its send time cannot be that old",
        ),
        (T0 + MAX_SENDER_SKEW_S + 1, False, T0, "nor minutes ahead"),
        (0.0, False, T0, "a sender that gave no time"),
        # A logged record's time is when the fault happened, not when it was sent: an agent
        # spools its events while Temporal is away, so a kernel line an hour old arrives now.
        # Replaced by the receive time, it would land in the escalation window of events that
        # came later, and a job restart would look an hour shorter than it was.
        (T0 - HOUR, True, T0 - HOUR, "a spooled kernel line keeps the time it was logged"),
        (T0 - 6 * DAY, True, T0 - 6 * DAY, "days old is still a delivery delay (an outage spooled)"),
        (T0 - MAX_RECORD_AGE_S - 1, True, T0, "older than a week is a wrong node clock or a replayed archive"),
        (T0 + MAX_SENDER_SKEW_S + 1, True, T0, "a record from the future is a wrong clock however it was read"),
        (0.0, True, T0, "a record without a time"),
    ],
)
def test_plausible_time(sent: float, from_record: bool, expected: float, why: str) -> None:
    assert plausible_time(sent, T0, from_record) == expected, why


def test_a_spooled_record_keeps_its_logged_time_and_stays_out_of_later_windows(health) -> None:
    """Two contained-ECC events now, and one logged two days ago that the agent could only
    deliver now: it counts in the window of its own time, so the node does not escalate."""
    health(T0, T0)
    health(T0 + 60, T0 + 60)
    late = health(T0 + 120, T0 + 120 - 2 * DAY, from_record=True)
    assert not late.drain_now, late.reason
    stored = sorted(_epoch(h.at) for h in queries.health_events(health.engine, health.node))
    assert stored[0] == pytest.approx(T0 + 120 - 2 * DAY)


WORKFLOWS_DIR = Path(__file__).parents[2] / "workflows"
# The host's clock, read or waited on: a replay on another worker, or after a clock jump,
# would see another value. (module or class, attribute)
CLOCK = (
    {
        ("time", name)
        for name in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns", "sleep")
    }
    | {("datetime", name) for name in ("now", "utcnow", "today")}
    | {("date", "today")}
)


def _workflow_classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef)
        and any(ast.unparse(d).startswith(("workflow.defn", "defn")) for d in node.decorator_list)
    ]


def _clock_reads(tree: ast.Module) -> list[str]:
    """Every use of the host clock, through any import alias (`import time as t`,
    `from datetime import datetime as dt`, `datetime.datetime.now`, `from time import monotonic`)."""
    aliases: dict[str, str] = {}
    reads = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases.update({a.asname or a.name: a.name for a in node.names})
        elif isinstance(node, ast.ImportFrom) and node.module in ("time", "datetime"):
            for a in node.names:
                aliases[a.asname or a.name] = a.name
                if (node.module, a.name) in CLOCK:
                    reads.append(f"line {node.lineno}: from {node.module} import {a.name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            owner = node.value
            owner_name = (
                owner.attr
                if isinstance(owner, ast.Attribute)
                else aliases.get(owner.id, owner.id)
                if isinstance(owner, ast.Name)
                else None
            )
            if (owner_name, node.attr) in CLOCK:
                reads.append(f"line {node.lineno}: {ast.unparse(node)}")
    return reads


@pytest.mark.parametrize(
    "source",
    [
        "import time\ntime.time()",
        "import time as t\nt.monotonic()",
        "from time import monotonic\nmonotonic()",
        "import datetime\ndatetime.datetime.now()",
        "from datetime import datetime as dt\ndt.utcnow()",
        "from datetime import date\ndate.today()",
        "import time\ntime.sleep(1)",
    ],
)
def test_the_scan_finds_every_way_to_read_the_clock(source: str) -> None:
    assert _clock_reads(ast.parse(source))


def test_workflow_code_reads_no_wall_clock() -> None:
    """The guard's storm window (and every workflow's timing) runs on workflow.now(): a
    worker's clock jumping, or a worker paused for hours, cannot corrupt it on replay. Every
    module under workflows/ that defines a workflow, wherever it lives, is scanned."""
    from fleetctl.workflows.worker import WORKFLOWS

    trees = {
        p.relative_to(WORKFLOWS_DIR).as_posix(): ast.parse(p.read_text(), str(p))
        for p in sorted(WORKFLOWS_DIR.rglob("*.py"))
    }
    defining = {name: tree for name, tree in trees.items() if _workflow_classes(tree)}
    found = {c.name for tree in defining.values() for c in _workflow_classes(tree)}
    assert found == {w.__name__ for w in WORKFLOWS}  # the scan sees every workflow the worker runs
    offenders = {name: reads for name, tree in defining.items() if (reads := _clock_reads(tree))}
    assert offenders == {}
    # The storm window itself: the removal decision compares workflow.now() with it.
    (guard,) = [c for tree in defining.values() for c in _workflow_classes(tree) if c.name == "CapacityGuard"]
    decision = [
        f
        for f in guard.body
        if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name in ("request_removal", "_decide")
    ]
    assert len(decision) == 2
    uses = {ast.unparse(n) for f in decision for n in ast.walk(f) if isinstance(n, (ast.Call, ast.Attribute))}
    assert "workflow.now()" in uses and "self.s.policy.storm_window_s" in uses


@pytest.mark.temporal
async def test_a_skewed_cli_clock_is_replaced_by_the_workflow_receive_time(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(node, "new", 0)])
        engine = get_engine(settings.db_url)
        sent = datetime.now(UTC).timestamp()
        await send_health_events(
            client, node, [HealthEventInput(node, "xid", WARNING_XID, "", "cli", "skewed", sent - 3 * DAY)]
        )
        await wait_for(lambda: bool(queries.health_events(engine, node)), 30, "the event to be recorded")
    finally:
        worker.stop()
    (event,) = queries.health_events(engine, node)
    assert abs(_epoch(event.at) - sent) < 60
