"""What a remediation learns of the node's past when it begins (the demo once showed a flaky
node entering maintenance 22 times in two minutes, each time from the ladder's first rung, and
only 3 of those counted toward the lemon rule). The activity on a real database."""

from __future__ import annotations

import json
import os
from datetime import timedelta

import pytest
from sqlmodel import Session, select
from temporalio.testing import ActivityEnvironment

from fleetctl.config import load_settings
from fleetctl.db import queries
from fleetctl.db import remediation as db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node, NodeEvent, utcnow
from fleetctl.inventory.parse import parse_inventory
from fleetctl.reliability.report_store import build_report
from fleetctl.remediation.events import Event, EventKind
from fleetctl.remediation.lemons import LemonPolicy
from fleetctl.workflows.activities.remediation import RemediationActivities
from fleetctl.workflows.api import RunStart


def _setup(sqlite_url: str):
    settings = load_settings(flags={"db_url": sqlite_url}, env={}, config_file=os.devnull)
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(engine, parse_inventory("nodes:\n  - {name: n1, address: sim://n1, profile: h100-sxm}\n"))
    return settings, engine, RemediationActivities(settings, executors=None)


def _entered(engine, to_state: str, days_ago: float, key: str) -> None:
    with Session(engine) as session:
        session.add(
            NodeEvent(
                node_name="n1",
                from_state="x",
                to_state=to_state,
                trigger="t",
                actor="t",
                at=utcnow() - timedelta(days=days_ago),
                idempotency_key=key,
            )
        )
        session.commit()


def _run(engine, key: str, days_ago: float, mode: str = "live", event: dict | None = None) -> None:
    db.start_run(
        engine,
        run_key=key,
        node_name="n1",
        runbook="escalation-ladder",
        event=event or {},
        mode=mode,
        actor="t",
        started_at=utcnow() - timedelta(days=days_ago),
    )


def _begin(activities, key: str = "now"):
    return ActivityEnvironment().run(
        activities.begin_run, RunStart(key, "n1", "escalation-ladder", {}, "live", "t", utcnow())
    )


def test_repeats_counts_the_remediations_since_the_node_was_last_in_production(sqlite_url) -> None:
    settings, engine, activities = _setup(sqlite_url)
    settings.lemon_threshold = 100  # this test is about the ladder
    _run(engine, "before", 30)
    _entered(engine, "production", 20, "p")
    assert _begin(activities, "fresh").node["repeats"] == 0  # a new fault after service: rung one
    _run(engine, "a", 2)
    _run(engine, "dry", 1.5, mode="dry_run")  # nothing was done: no rung climbed
    _run(engine, "b", 1)
    assert _begin(activities, "now").node["repeats"] == 3  # fresh, a and b failed to return it
    assert _begin(activities, "now").node["repeats"] == 3  # a retried activity counts the same


def test_every_return_to_maintenance_counts_toward_the_lemon_rule(sqlite_url) -> None:
    _settings, engine, activities = _setup(sqlite_url)
    for days_ago, key in ((3, "m1"), (1, "m2")):
        _entered(engine, "maintenance", days_ago, key)
    assert _begin(activities, "one").lemon == ""  # two entries, one remediation: not yet
    _entered(engine, "maintenance", 0.01, "m3")  # burn-in failed again; no runbook was started
    lemon = _begin(activities, "two").lemon
    assert lemon.startswith("lemon: remediated 3 times in 7 days"), lemon
    _entered(engine, "maintenance", 8, "old")  # outside the window: changes nothing
    assert "3 times" in _begin(activities, "three").lemon


def test_a_run_its_own_fault_interrupted_counts_neither_as_a_remediation_nor_a_rung(sqlite_url) -> None:
    """Two XID 79s, each repeated a second into its run (the repeat interrupts the run and the
    runbook starts again for it): two remediations, not four, and no rung climbed."""
    settings, engine, activities = _setup(sqlite_url)
    xid79 = Event(EventKind.XID, code=79).to_dict()
    second = 1 / 86400
    for i, days_ago in enumerate((2, 1)):
        _run(engine, f"fault{i}", days_ago, event=xid79)
        db.finish_run(engine, f"fault{i}", "interrupted", "step settle interrupted by health: XID 79", utcnow())
        _run(engine, f"fault{i}-again", days_ago - second, event=xid79)
        db.finish_run(engine, f"fault{i}-again", "succeeded", "", utcnow())
    assert db.times_remediated(engine, "n1", LemonPolicy(3, timedelta(days=7)), utcnow()) == 2
    assert build_report(engine, utcnow() - timedelta(days=7), utcnow())["lemons"] == []  # the report's figure too
    _run(engine, "xid48", 0.5, event=Event(EventKind.XID, code=48).to_dict())
    db.finish_run(engine, "xid48", "interrupted", "step settle interrupted by health: XID 79", utcnow())
    ended = _begin(activities, "now")  # another fault than the XID 48 its run was for: one of its own
    assert ended.lemon == "lemon: remediated 4 times in 7 days (limit 3)"
    settings.lemon_threshold = 100
    _entered(engine, "production", 3, "p")
    assert _begin(activities, "now").node["repeats"] == 3  # fault0-again, fault1-again, xid48


# A hand-worked week (days ago): runs begun at 6, 2 and 0.5; entries into maintenance at 6,
# 1.5, 1 and 0.2 (burn-in failed twice while the run of 2 days ago was going), one older
# entry at 9 outside the 7-day window, and a dry run at 0.3 that changed nothing.
# Runs in the window: 3; entries: 4; the figure is 4.
@pytest.mark.parametrize(
    "runs, entries, times",
    [
        ([6, 2, 0.5], [9, 6, 1.5, 1, 0.2], 4),
        ([6, 2, 0.5], [9, 6], 3),  # the runs alone
        ([8, 2], [9, 1.5, 1, 0.2], 3),  # the entries alone
        ([8], [9], 0),  # both outside the window
    ],
)
def test_node_show_and_the_rma_reason_give_one_figure(sqlite_url, runs, entries, times) -> None:
    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.connections.temporal_server import free_port

    _settings, engine, activities = _setup(sqlite_url)
    for i, days_ago in enumerate(runs):
        _run(engine, f"r{i}", days_ago)
    _run(engine, "dry", 0.3, mode="dry_run")
    for i, days_ago in enumerate(entries):
        _entered(engine, "maintenance", days_ago, f"m{i}")

    def show(*args: str):
        r = CliRunner(env={"COLUMNS": "200"}).invoke(
            app, ["--db-url", sqlite_url, "--temporal-address", f"127.0.0.1:{free_port()}", "node", "show", "n1", *args]
        )
        assert r.exit_code == 0, r.output
        return r.stdout

    assert json.loads(show("-o", "json"))["remediated"] == {"times": times, "window_days": 7.0, "lemon_threshold": 3}
    table = show()
    how_often = {1: "once", 2: "twice"}.get(times, f"{times} times")  # plurals: never "1 times"
    assert (f"remediated {how_often} in 7 days (a lemon at 3)" in table) is (times > 0)
    # The run that begins now counts itself (a run, whether or not an entry follows it).
    lemon = _begin(activities, "now").lemon
    after = max(times, len([d for d in runs if d <= 7]) + 1)
    assert lemon == (f"lemon: remediated {after} times in 7 days (limit 3)" if after >= 3 else "")


def test_the_demo_says_what_the_rma_reason_says(sqlite_url) -> None:
    """The demo's line for the flaky node counted every run ever ("remediated 5 times")
    while its RMA said 3 in 7 days: it quotes the RMA's reason now."""
    from fleetctl.demo import Fault, handled_how

    _settings, engine, activities = _setup(sqlite_url)
    fault = Fault("flaky", "n1", "lemon", 0)
    for i, days_ago in enumerate((30, 20, 2, 1)):  # two of them long before this week
        _run(engine, f"r{i}", days_ago)
        # Each ended (a run still going after a day would be stuck, waiting for an operator).
        db.finish_run(engine, f"r{i}", "failed", "a check still failing", utcnow() - timedelta(days=days_ago))
    assert handled_how(engine, fault) == "… new, 4 remediation runs so far"
    lemon = _begin(activities, "now").lemon
    assert lemon == "lemon: remediated 3 times in 7 days (limit 3)"
    db.open_rma(
        engine,
        node_name="n1",
        reason=lemon,
        remediation_run="now",
        evidence={},
        evidence_markdown="",
        opened_by="t",
        idempotency_key="k",
    )
    with Session(engine) as session:  # where the lifecycle would have moved it
        node = session.exec(select(Node).where(Node.name == "n1")).one()
        node.state = "rma"
        session.add(node)
        session.commit()
    assert handled_how(engine, fault) == "✓ lemon: remediated 3 times in 7 days (limit 3): sent to RMA"
