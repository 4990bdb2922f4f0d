"""The whole reaction on the real Slurm cluster: an XID 79 event on a node running a 2-node
batch job drains the node in Slurm with fleetctl's reason, and the job runs again on two
healthy nodes; the recorded restart latency is the real one."""

from __future__ import annotations

import json
import time

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import REASON_PREFIX
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import connect, ensure_node_workflows, request_phase, send_health_events
from tests.support.jobs import import_slurm_nodes, until
from tests.support.worker import WorkerThread, terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]


async def test_xid79_under_a_slurm_job_drains_the_node_and_the_job_runs_again(
    slurm_cluster, make_settings, sqlite_url
) -> None:
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    # The runbook's reboot and burn-in would bring node1 back (and resume it in Slurm) in a few
    # simulated minutes, racing the drain asserted below; in shadow mode it only records its plan.
    settings.remediation_shadow = True
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
        await send_health_events(
            client,
            "node1",
            [HealthEventInput("node1", "xid", 79, "GPU has fallen off the bus.", "dmesg", "slurm-xid79", time.time())],
        )

        restart = await until(
            lambda: next((r for r in jobs.job_restarts(engine, job_id) if r.status == "succeeded"), None),
            90,
            "the job restart",
        )
        rerun = slurm_cluster.wait_for_run(job_id, 1)  # the job's script really runs again ...
        assert "node1" not in rerun.nodes and len(rerun.nodes) == 2  # ... on two healthy nodes
        node1 = slurm_cluster.scheduler().node_state("node1")
        assert node1.drained and node1.reason.startswith(REASON_PREFIX) and "XID 79" in node1.reason
        assert queries.get_node(engine, "node1").state == "maintenance"
        drain = next(e for e in queries.node_events(engine, "node1") if e.trigger == "drain")
        assert drain.actor_kind == "automation" and "XID 79" in drain.cause
        shown = json.loads(
            CliRunner()
            .invoke(
                app,
                ["--db-url", sqlite_url, "job", "show", job_id, "-o", "json"],
                env={"SLURM_CONF": settings.slurm_conf},
            )
            .stdout
        )
        seconds = (restart.running_at - restart.fault_seen_at).total_seconds()
        assert shown["restart_seconds"] == pytest.approx(seconds, abs=0.01) and seconds > 0
        print(f"\nXID 79 on node1 -> job {job_id} running again on {','.join(rerun.nodes)} after {seconds:.2f} s")
    finally:
        await terminate_node_workflows(settings, names)
        worker.stop()
        slurm_cluster.reset()
