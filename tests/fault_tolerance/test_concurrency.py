"""Races: two operators on one node, an operator against an automated drain, a schedule that
fires while its previous sweep still runs. Exactly one outcome each, and the record names
both actors: the winner's transition and the loser's refusal."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid

import pytest
from temporalio.client import ScheduleOverlapPolicy

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import connect, ensure_node_workflows, request_transition, send_health_events
from tests.support.fleet import Cli, wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal


def fleetctl_async(settings, operator: str, *args: str):
    """A CLI process of its own (two operators are two processes), started now."""
    return asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "fleetctl.cli.main",
        "--db-url",
        settings.db_url,
        "--temporal-address",
        settings.temporal_address,
        "--task-queue",
        settings.task_queue,
        "--as",
        operator,
        *args,
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull, "FLEETCTL_FLEET": settings.fleet},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


@pytest.fixture
async def fleet(make_settings, sqlite_url, tmp_path):
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)  # no runbook: a drained node stays in maintenance to be looked at
    worker = WorkerThread(settings).start()
    names = make_fleet(settings, 4)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
    for n in names:
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(client, n, trigger, "setup", actor_kind="automation")
    yield settings, client, names
    worker.stop()


def refusals(engine, node: str) -> list[str]:
    return [
        e.actor for e in queries.automation_events(engine, limit=100) if e.kind == "rejected" and e.node_name == node
    ]


async def test_two_operators_conflicting_on_one_node(fleet) -> None:
    settings, client, names = fleet
    node, engine = names[0], get_engine(settings.db_url)
    await request_transition(client, node, "drain", "setup", "operator: prepare")
    await wait_for(lambda: queries.get_node(engine, node).state == "maintenance", 30, "the drain to complete")
    before = len(queries.node_events(engine, node))

    alice = await fleetctl_async(settings, "alice@desk-1", "node", "undrain", node)
    bob = await fleetctl_async(settings, "bob@desk-2", "node", "rma", node, "--reason", "bad HBM")
    (a_out, a_err), (b_out, b_err) = await asyncio.gather(alice.communicate(), bob.communicate())
    codes = {"alice@desk-1": alice.returncode, "bob@desk-2": bob.returncode}
    assert sorted(codes.values()) == [0, 1], (a_out, a_err, b_out, b_err)
    winner, loser = sorted(codes, key=codes.get)

    new_events = queries.node_events(engine, node)[before:]
    assert [e.actor for e in new_events] == [winner]
    assert queries.get_node(engine, node).state == {"alice@desk-1": "production", "bob@desk-2": "rma"}[winner]
    assert refusals(engine, node) == [loser]
    loser_err = (a_err if loser == "alice@desk-1" else b_err).decode().strip()
    assert len(loser_err.splitlines()) == 1 and "cannot" in loser_err


async def test_operator_command_racing_an_automated_drain(fleet) -> None:
    settings, client, names = fleet
    node, engine = names[1], get_engine(settings.db_url)
    xid79 = HealthEventInput(node, "xid", 79, "GPU has fallen off the bus", "dmesg-watcher@" + node, "race-79", 0.0)
    # In this process (a CLI process takes a second to start, which would decide the race).
    operator = asyncio.to_thread(Cli(settings, "carol@desk-3"), "node", "drain", node, "--reason", "swap optics")
    result, _ = await asyncio.gather(operator, send_health_events(client, node, [xid79]))
    await wait_for(lambda: queries.get_node(engine, node).state == "maintenance", 60, "the drain to complete")
    drains = [e for e in queries.node_events(engine, node) if e.trigger == "drain"]
    assert len(drains) == 1, [(e.actor, e.cause) for e in drains]  # one drain, not two
    winner = drains[0].actor
    loser = "dmesg-watcher@" + node if winner == "carol@desk-3" else "carol@desk-3"
    await wait_for(lambda: refusals(engine, node) == [loser], 30, f"the refusal of {loser} to be recorded")
    assert (result.exit_code == 0) == (winner == "carol@desk-3"), result.output
    assert [h.code for h in queries.health_events(engine, node)] == [79]


def test_schedule_firing_while_the_previous_sweep_runs_is_skipped(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    settings.sim_time_scale = 0.1  # a quick sweep of one node takes ~2 s: longer than the interval
    worker = WorkerThread(settings).start()
    schedule_id = f"overlap-{uuid.uuid4().hex[:6]}"
    names = make_fleet(settings, 2)

    async def setup_and_watch() -> None:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for n in names:
            for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
                await request_transition(client, n, trigger, "setup", actor_kind="automation")

    asyncio.run(setup_and_watch())
    cli = Cli(settings)
    result = cli("schedule", "create", "active-checks", "--name", schedule_id, "--every", "1s", "--max-concurrent", "1")
    assert result.exit_code == 0, result.output

    async def watch() -> tuple[int, ScheduleOverlapPolicy]:
        client = await connect(settings)
        most_at_once = 0
        query = (
            f"WorkflowType = 'ActiveCheckSweep' AND ExecutionStatus = 'Running' AND TaskQueue = '{settings.task_queue}'"
        )
        for _ in range(40):  # 8 s: several intervals, several sweeps
            running = [w async for w in client.list_workflows(query)]
            most_at_once = max(most_at_once, len(running))
            await asyncio.sleep(0.2)
        description = await client.get_schedule_handle(schedule_id).describe()
        return most_at_once, description.schedule.policy.overlap

    try:
        most_at_once, policy = asyncio.run(watch())
        listing = json.loads(cli("schedule", "list", "-o", "json").stdout)
    finally:
        cli("schedule", "delete", schedule_id, "--yes")
        worker.stop()
    assert policy is ScheduleOverlapPolicy.SKIP
    assert most_at_once == 1
    (row,) = [r for r in listing if r["id"] == schedule_id]
    assert row["runs"] >= 1 and row["skipped_overlaps"] >= 1, row
