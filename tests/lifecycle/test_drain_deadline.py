"""A non-critical drain waits for the node's jobs to finish, up to a deadline; jobs still
running then are restarted elsewhere (a JobRestart each) before the node is handed to
maintenance, so remediation never reboots a node under a running job."""

from __future__ import annotations

import asyncio
import time

import pytest

from fleetctl.db import jobs as job_store
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.client import connect, request_transition
from tests.support.fleet import wait_for
from tests.support.sim_fleet import finish_job, make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal


async def test_jobs_still_running_at_the_drain_deadline_are_restarted_elsewhere(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)  # no runbook: the drained node waits in maintenance
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        names = make_fleet(settings, 2)
        client = await connect(settings)
        for name in names:  # a 3 s deadline polled every 0.5 s instead of 2 h every 30 s
            await start_in_production(client, settings, name, drain_job_wait_s=3.0, drain_job_poll_s=0.5)
        scheduler = SimScheduler(engine)
        job = scheduler.submit("train", 1)
        (node,) = job.nodes
        started = time.monotonic()
        await request_transition(client, node, "drain", "alice@desk", cause="swap optics")

        await wait_for(lambda: queries.get_node(engine, node).state == "maintenance", 30, "the drain to complete")
        assert time.monotonic() - started >= 3.0  # it did wait for the job first
        await wait_for(
            lambda: (j := scheduler.job(job.job_id)).state == "running" and node not in j.nodes,
            30,
            "the job running off the node",
        )
        moved = scheduler.job(job.job_id)
        assert moved.nodes == tuple(n for n in names if n != node)
        (restart,) = job_store.job_restarts(engine, job.job_id)
        assert restart.bad_nodes == [node] and "swap optics" in restart.cause
        drain_complete = next(e for e in queries.node_events(engine, node) if e.trigger == "drain_complete")
        # restarted before the node was handed to maintenance (both UTC)
        assert restart.fault_seen_at.replace(tzinfo=None) <= drain_complete.at.replace(tzinfo=None)
    finally:
        worker.stop()


async def test_a_job_that_ends_within_the_deadline_is_not_restarted(make_settings, sqlite_url, tmp_path) -> None:
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        client = await connect(settings)
        await start_in_production(client, settings, name, drain_job_wait_s=60.0, drain_job_poll_s=0.5)
        job = SimScheduler(engine).submit("train", 1)
        await request_transition(client, name, "drain", "alice@desk", cause="swap optics")
        await asyncio.sleep(1.5)
        assert queries.get_node(engine, name).state == "draining"  # waits for the job
        finish_job(engine, job.job_id)
        await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", 30, "the drain to complete")
        assert job_store.job_restarts(engine, job.job_id) == []
    finally:
        worker.stop()
