"""One restart per fault on the simulated fleet: an XID 79 on a node of a 2-node job drains the
node, whose own workflow restarts the job at once; the XID 79 runbook's restart_jobs step then
runs while that restart may still be in flight (the job still listed on the node) and must join
it, not restart the job again under another id. The race is lost in about one try of two, so
the trials repeat it."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest
from temporalio.service import RPCError

from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import (
    DEFAULT_RUNNING_TIMEOUT_S,
    HealthEventInput,
    JobRestartInput,
    RemediationResult,
    fault_restart_id,
    job_restart_id,
    remediation_id,
)
from fleetctl.workflows.client import connect, send_health_events
from fleetctl.workflows.definitions.job_restart import JobRestart
from tests.support.jobs import until
from tests.support.sim_fleet import finish_job, make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

TRIALS = 4
# The XID 79 runbook up to its restart_jobs step: its reboot and burn-in are not what is tested.
RUNBOOK = """
name: xid-79-fallen-off-bus
description: drain, then move the jobs
priority: 50
match: {xid: [79]}
steps:
  - action: drain
    with: {reason: "XID 79 on {{ node.name }}: GPU fallen off the bus"}
  - action: restart_jobs
"""
# A simulated job runs again within a few activities; the runbook's two steps as fast.
SETTLED_S = 60.0
assert SETTLED_S < DEFAULT_RUNNING_TIMEOUT_S


async def test_one_xid79_on_a_two_node_job_records_one_restart(make_settings, sqlite_url, tmp_path) -> None:
    (tmp_path / "xid-79.yaml").write_text(RUNBOOK)
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    engine = get_engine(settings.db_url)
    sim = SimScheduler(engine)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        for name in make_fleet(settings, TRIALS + 3, racks=1):
            await start_in_production(client, settings, name)
        for trial in range(TRIALS):
            job = sim.submit(f"train-{trial}", 2)
            victim = job.nodes[0]
            await send_health_events(
                client,
                victim,
                [HealthEventInput(victim, "xid", 79, "GPU has fallen off the bus", "dmesg", f"t{trial}", time.time())],
            )
            runbook = client.get_workflow_handle(remediation_id(victim), result_type=RemediationResult)
            deadline = time.monotonic() + SETTLED_S
            while not await _started(runbook):
                assert time.monotonic() < deadline, f"trial {trial}: no runbook started on {victim}"
                await asyncio.sleep(0.1)
            result = await asyncio.wait_for(runbook.result(), SETTLED_S)
            assert result.status == "succeeded", result
            # Every restart the run started has its row by now (its first activity); each is waited to its end.
            restarts = await until(
                lambda job_id=job.job_id: _settled(jobs.job_restarts(engine, job_id)),
                SETTLED_S,
                f"trial {trial}: the restarts of job {job.job_id}",
            )
            assert [(r.status, r.bad_nodes) for r in restarts] == [("succeeded", [victim])], (
                f"trial {trial}: {[(r.workflow_id, r.actor, r.status) for r in jobs.job_restarts(engine, job.job_id)]}"
            )
            assert victim not in sim.job(job.job_id).nodes
            finish_job(engine, job.job_id)
    finally:
        worker.stop()


def _settled(rows: list) -> list | None:
    """The restarts when each has ended, else None."""
    return rows if rows and all(r.status in ("succeeded", "failed") for r in rows) else None


async def _started(handle) -> bool:
    try:
        await handle.describe()
    except RPCError:
        return False
    return True


async def test_a_runbook_joins_the_restart_of_its_fault_still_in_flight(make_settings, sqlite_url, tmp_path) -> None:
    """The race made certain: the fault's restart is started but parked before its requeue (on a
    task queue no worker polls), so the job is still on the node when the runbook's restart_jobs
    step looks; the step joins that restart and starts none of its own."""
    (tmp_path / "xid-79.yaml").write_text(RUNBOOK)
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    engine = get_engine(settings.db_url)
    sim = SimScheduler(engine)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        for name in make_fleet(settings, 4, racks=1):
            await start_in_production(client, settings, name)
        job = sim.submit("train", 2)
        victim = job.nodes[0]
        drain_version = queries.get_node(engine, victim).state_version + 1
        fault = fault_restart_id(victim, drain_version)
        parked = await client.start_workflow(
            JobRestart.run,
            JobRestartInput(job.job_id, "sim", [victim], "XID 79", "tester", datetime.now(UTC).isoformat(), fault),
            id=job_restart_id(job.job_id, fault),
            task_queue=f"{settings.task_queue}-parked",
        )
        await send_health_events(
            client,
            victim,
            [HealthEventInput(victim, "xid", 79, "GPU has fallen off the bus", "dmesg", "p", time.time())],
        )
        runbook = client.get_workflow_handle(remediation_id(victim), result_type=RemediationResult)
        deadline = time.monotonic() + SETTLED_S
        while not await _started(runbook):
            assert time.monotonic() < deadline, f"no runbook started on {victim}"
            await asyncio.sleep(0.1)
        result = await asyncio.wait_for(runbook.result(), SETTLED_S)
        assert queries.node_events(engine, victim)[-2].state_version == drain_version  # the drain, then drain_complete
        assert f"already restarted for this fault: {fault}" in result.steps[-1].detail, result.steps
        assert jobs.job_restarts(engine, job.job_id) == []  # nothing else requeued the job
        assert victim in sim.job(job.job_id).nodes
        await parked.terminate("test over")
    finally:
        worker.stop()
