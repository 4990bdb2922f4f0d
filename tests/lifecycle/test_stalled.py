"""A node whose workflow acts on nothing reads `Stalled`, never `Ready`: its
workflow tasks keep failing (Temporal's TemporalReportedProblems), or its oldest queued work
has waited past stall_after_s (FleetctlQueuedSince). The worker's stall watcher finds both
with one visibility query; `node list`, `node show`, `fleet status` and the exporter show it."""

from __future__ import annotations

import asyncio
import json

import pytest

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.nodes.search_attributes import PROBLEMS_AFTER_FAILED_TASKS
from fleetctl.reliability.exporter_server import FleetCollector
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import NODE_LIFECYCLE, node_workflow_id
from fleetctl.workflows.client import connect, request_phase, request_transition
from fleetctl.workflows.definitions.shared import QUICK
from tests.support.fleet import Cli, wait_for
from tests.support.sim_fleet import finish_job, make_fleet
from tests.support.worker import DRAIN_LOOKS_OFTEN, WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

STALL_AFTER_S, STALL_WATCH_S = 2.0, 1.0


def _settings(make_settings, sqlite_url, tmp_path):
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    settings.stall_after_s, settings.stall_watch_s = STALL_AFTER_S, STALL_WATCH_S
    return settings


async def _run(cli: Cli, *args: str):
    """The command as an operator runs it (in a thread: it runs its own event loop)."""
    return await asyncio.to_thread(cli, *args)


async def _health(cli: Cli, node: str) -> str:
    listed = await _run(cli, "node", "list", "-o", "json")
    assert listed.exit_code == 0, listed.output
    return next(r["health"] for r in json.loads(listed.output) if r["name"] == node)


def _stalled_series(engine, fleet: str) -> dict[str, float]:
    collector = FleetCollector(engine, fleet)
    family = next(f for f in collector.collect() if f.name == "fleetctl_node_stalled_since_timestamp_seconds")
    return {s.labels["node"]: s.value for s in family.samples}


async def test_work_queued_behind_a_long_drain_past_the_bound_is_stalled_until_it_is_worked(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = _settings(make_settings, sqlite_url, tmp_path)
    engine = get_engine(settings.db_url)
    cli = Cli(settings)
    worker = WorkerThread(settings).start()
    try:
        names = make_fleet(settings, 2)
        client = await connect(settings)
        for name in names:  # once the job ends, the drain sees it gone within DRAIN_LOOKS_OFTEN
            await start_in_production(client, settings, name, **DRAIN_LOOKS_OFTEN)
        scheduler = SimScheduler(engine)
        job = scheduler.submit("train", 1)
        (node,) = job.nodes
        # The operator's drain waits for the job (2 h); a recheck asked meanwhile queues behind it.
        await request_transition(client, node, "drain", "alice@desk", cause="swap optics")
        _, accepted, message = await request_phase(client, node, "recheck", "alice@desk", "quick")
        assert accepted, message
        bound = STALL_AFTER_S + 2 * STALL_WATCH_S + QUICK["start_to_close_timeout"].total_seconds()
        await wait_for(lambda: node in queries.stalled_nodes(engine), bound, "the node found stalled")
        reason = queries.stalled_nodes(engine)[node].reason
        assert "work queued" in reason and "still waiting" in reason, reason
        assert (await _health(cli, node)).startswith("Stalled")
        shown = await _run(cli, "node", "show", node)
        assert "Stalled" in shown.output and "still waiting" in shown.output, shown.output
        status = await _run(cli, "fleet", "status")
        assert "stalled: 1 node " in status.output and node in status.output, status.output
        assert set(_stalled_series(engine, settings.fleet)) == {node}

        # The job ends: the drain completes, the recheck is worked, the queue empties.
        finish_job(engine, job.job_id)
        await wait_for(
            lambda: node not in queries.stalled_nodes(engine),
            bound + QUICK["start_to_close_timeout"].total_seconds() * 3,
            "the stall cleared",
        )
        assert not (await _health(cli, node)).startswith("Stalled")
        assert _stalled_series(engine, settings.fleet) == {}
    finally:
        worker.stop()


async def test_a_workflow_whose_tasks_keep_failing_is_stalled(make_settings, sqlite_url, tmp_path) -> None:
    settings = _settings(make_settings, sqlite_url, tmp_path)
    engine = get_engine(settings.db_url)
    cli = Cli(settings)
    worker = WorkerThread(settings).start()
    try:
        (node,) = make_fleet(settings, 1)
        client = await connect(settings)
        # A state the workflow cannot decode: every workflow task of it fails, and is retried.
        await client.start_workflow(
            NODE_LIFECYCLE,
            {"node": node, "state_version": "not a number"},
            id=node_workflow_id(node),
            task_queue=settings.task_queue,
        )
        # Temporal flags it after that many failed tasks in a row; the workflow task timeout (10 s)
        # spaces the retries of a task that fails at once by about a second each.
        bound = (PROBLEMS_AFTER_FAILED_TASKS + 1) * 10 + 2 * STALL_WATCH_S
        await wait_for(lambda: node in queries.stalled_nodes(engine), bound, "the node found stalled")
        reason = queries.stalled_nodes(engine)[node].reason
        assert reason.startswith("workflow tasks failing"), reason
        assert (await _health(cli, node)).startswith("Stalled")
    finally:
        worker.stop()
