"""One requeue per fault on the real Slurm cluster: an XID 79 on a node of a 2-node batch job,
remediated live by the XID 79 runbook up to its restart_jobs step, requeues the job once (Slurm's
own restart count), under one restart record: the node's workflow and the runbook's step are one
restart, keyed by the fault."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime

import pytest

from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import HealthEventInput, RemediationResult, remediation_id
from fleetctl.workflows.client import connect, ensure_node_workflows, request_phase, send_health_events
from tests.jobs.test_restart_per_fault import RUNBOOK, _settled
from tests.support.jobs import import_slurm_nodes, until
from tests.support.worker import WorkerThread, terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

# The runbook's two steps and a Slurm requeue (its credential-revoke second included).
SETTLED_S = 90.0


async def _run_started_since(client, workflow_id: str, since: datetime, within_s: float) -> str:
    """The run id of `workflow_id`'s first run started at or after `since`."""
    deadline = time.monotonic() + within_s
    while True:
        runs = [
            wf
            async for wf in client.list_workflows(
                f"WorkflowId = '{workflow_id}' AND StartTime >= '{since.isoformat()}'"
            )
        ]
        if runs:
            return min(runs, key=lambda wf: wf.start_time).run_id
        assert time.monotonic() < deadline, f"no run of {workflow_id} started since {since}"
        await asyncio.sleep(0.2)


async def test_one_xid79_on_a_slurm_job_requeues_it_once(slurm_cluster, make_settings, sqlite_url, tmp_path) -> None:
    (tmp_path / "xid-79.yaml").write_text(RUNBOOK)
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    settings.runbooks_dir = str(tmp_path)
    engine = get_engine(sqlite_url)
    names = import_slurm_nodes(engine, slurm_cluster.node_names)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for n in names:
            await request_phase(client, n, "admit", "tester", "quick")
        await until(lambda: all(queries.get_node(engine, n).state == "production" for n in names), 60, "production")

        job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
        assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")
        sent_at = datetime.now(UTC)
        await send_health_events(
            client,
            "node1",
            [HealthEventInput("node1", "xid", 79, "GPU has fallen off the bus.", "dmesg", "slurm-once", time.time())],
        )
        # The run this event started: the Slurm tests share the session's Temporal server and
        # node names, so an earlier test's run of `remediation/node1` may be there already, and a
        # later run under the same id (the node's next fault) is another remediation.
        first_run = await _run_started_since(client, remediation_id("node1"), sent_at, SETTLED_S)
        pinned = client.get_workflow_handle(remediation_id("node1"), run_id=first_run, result_type=RemediationResult)
        result = await asyncio.wait_for(pinned.result(), SETTLED_S)
        assert (result.runbook, result.status) == ("xid-79-fallen-off-bus", "succeeded"), result
        restarts = await until(lambda: _settled(jobs.job_restarts(engine, job_id)), SETTLED_S, "the restarts")
        assert [(r.status, r.bad_nodes) for r in restarts] == [("succeeded", ["node1"])], [
            (r.workflow_id, r.actor, r.status) for r in restarts
        ]
        rerun = slurm_cluster.wait_for_run(job_id, 1)
        assert "node1" not in rerun.nodes and len(rerun.nodes) == 2
        # Each run of the job logs its number (SLURM_RESTART_COUNT): one requeue, so runs 0 and 1 only.
        log = (slurm_cluster.root / "jobs" / f"{job_id}.out").read_text().splitlines()
        assert [line.split(" on ")[0] for line in log if line.startswith("run ")] == ["run 0", "run 1"], log
    finally:
        await terminate_node_workflows(settings, names)
        worker.stop()
        slurm_cluster.reset()
