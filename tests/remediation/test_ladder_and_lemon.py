"""What a remediation learns of the node's past when it begins (issue 14: in the demo a flaky
node entered maintenance 22 times in two minutes, each time from the ladder's first rung, and
only 3 of those counted toward the lemon rule). The activity on a real database."""

from __future__ import annotations

import os
from datetime import timedelta

from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from fleetctl.config import load_settings
from fleetctl.db import remediation as db
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import NodeEvent, utcnow
from fleetctl.inventory import parse_inventory
from workflows.activities.remediation import RemediationActivities
from workflows.api import RunStart


def _setup(sqlite_url: str):
    settings = load_settings(flags={"db_url": sqlite_url}, env={}, config_file=os.devnull)
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(engine, parse_inventory("nodes:\n  - {name: n1, address: sim://n1, profile: h100-sxm}\n"))
    return settings, engine, RemediationActivities(settings, executors=None)


def _entered(engine, to_state: str, days_ago: float, key: str) -> None:
    with Session(engine) as session:
        session.add(NodeEvent(node_name="n1", from_state="x", to_state=to_state, trigger="t", actor="t",
                              at=utcnow() - timedelta(days=days_ago), idempotency_key=key))
        session.commit()


def _run(engine, key: str, days_ago: float, mode: str = "live") -> None:
    db.start_run(engine, run_key=key, node_name="n1", runbook="escalation-ladder", event={}, mode=mode, actor="t",
                 started_at=utcnow() - timedelta(days=days_ago))


def _begin(activities, key: str = "now"):
    return ActivityEnvironment().run(activities.begin_run, RunStart(key, "n1", "escalation-ladder", {}, "live", "t",
                                                                    utcnow()))


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
    settings, engine, activities = _setup(sqlite_url)
    for days_ago, key in ((3, "m1"), (1, "m2")):
        _entered(engine, "maintenance", days_ago, key)
    assert _begin(activities, "one").lemon == ""  # two entries, one remediation: not yet
    _entered(engine, "maintenance", 0.01, "m3")  # burn-in failed again; no runbook was started
    lemon = _begin(activities, "two").lemon
    assert lemon.startswith("lemon: remediated 3 times in 7 days"), lemon
    _entered(engine, "maintenance", 8, "old")  # outside the window: changes nothing
    assert "3 times" in _begin(activities, "three").lemon
