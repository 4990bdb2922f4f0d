"""The unreachable policy end to end: real sweeps (ActiveCheckSweep) over a simulated fleet
whose unreachable nodes raise NodeUnreachable from the executor, the real capacity guard,
the real node workflows. A node that no check reached in `suspect_after_unreachable`
sweeps in a row is suspect and drained through the guard; when many nodes go unreachable
at once (a partition, a checker outage) the breaker opens first and they stay in
production, shown as suspect."""

from __future__ import annotations

import dataclasses
import json
import uuid

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.config import guard_policy
from fleetctl.db import queries
from fleetctl.nodes.fleet_status_store import fleet_status
from fleetctl.workflows.api import SweepInput, SweepResult
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from tests.support.sim_fleet import SimFleet, fleet_in_production
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal

RUNS = 2  # suspect after two unreachable sweeps in a row


@pytest.fixture
async def production_fleet(make_settings, sqlite_url):
    """factory(count) -> SimFleet of `count` nodes in production (workflows started there)."""
    workers: list[WorkerThread] = []

    async def factory(count: int) -> SimFleet:
        settings = dataclasses.replace(make_settings(sqlite_url), suspect_after_unreachable=RUNS)
        workers.append(WorkerThread(settings).start())
        return await fleet_in_production(settings, count)

    yield factory
    for w in workers:
        w.stop()


async def sweep(fleet: SimFleet) -> SweepResult:
    return await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=4, fleet=fleet.settings.fleet),
        id=f"sweep-{uuid.uuid4().hex[:8]}",
        task_queue=fleet.settings.task_queue,
    )


def suspects(fleet: SimFleet) -> set[str]:
    settings = fleet.settings
    return {
        s["node"]
        for s in fleet_status(fleet.engine, {}, guard_policy(settings, settings.fleet), settings.fleet)["suspect"]
    }


async def test_a_node_unreachable_sweep_after_sweep_is_suspect_and_drained_through_the_guard(production_fleet) -> None:
    fleet = await production_fleet(10)
    dark = fleet.names[3]
    fleet.inject(dark, "unreachable")
    first = await sweep(fleet)
    assert first.unreachable == [dark] and first.drained == []  # once is a blip: nothing happens
    assert fleet.state(dark) == "production" and suspects(fleet) == set()
    second = await sweep(fleet)
    assert second.drained == [dark]
    drain = await fleet.wait_event(dark, "drain")
    assert drain.cause == f"suspect: {RUNS} check runs in a row could not reach the node"
    (judged,) = [e for e in queries.automation_events(fleet.engine) if e.kind == "suspect"]
    assert judged.node_name == dark
    granted = [
        e for e in queries.automation_events(fleet.engine, limit=50) if e.node_name == dark and e.kind == "grant"
    ]
    assert granted, "the drain went through the capacity guard"


async def test_many_nodes_unreachable_at_once_open_the_breaker_and_stay_in_production_as_suspect(
    production_fleet,
) -> None:
    fleet = await production_fleet(10)
    dark = sorted(fleet.names[:4])  # 40 % of the fleet: a partition, not four bad nodes
    for name in dark:
        fleet.inject(name, "unreachable")
    await sweep(fleet)
    second = await sweep(fleet)
    assert second.drained == [] and sorted(second.held) == dark
    assert {fleet.state(n) for n in dark} == {"production"}
    assert suspects(fleet) == set(dark)
    listed = CliRunner().invoke(app, ["--db-url", fleet.settings.db_url, "node", "list", "-o", "json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert {n for n, r in rows.items() if r["suspect"]} == set(dark)
    assert "2 check runs in a row" in rows[dark[0]]["suspect"]
    assert all(rows[n]["health"].startswith("Suspect") for n in dark)
