"""Hot spares on the real Slurm cluster: nodes admitted to production fill their island's pool
(a Slurm reservation fleetctl owns, which keeps jobs off the spare); a job in the island loses
a node to an XID 79 and runs again on the spare; the pool takes an idle node again; the
restart records the spare it took; a spare drained leaves the pool."""

from __future__ import annotations

import asyncio
import time

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import jobs, queries
from fleetctl.db import spares as spare_store
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import (
    connect,
    ensure_node_workflows,
    request_phase,
    request_transition,
    send_health_events,
)
from tests.support.jobs import until
from tests.support.worker import WorkerThread, terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

# Bounds of the waits below: admission (quick suite, instant simulated checks) and a restart
# that takes a named, free spare (well under restart_island_wait_s, after which it would give
# the spare up).
ADMISSION_S = 60.0


async def test_a_restart_takes_the_islands_spare_and_the_pool_is_refilled(
    slurm_cluster, make_settings, sqlite_url
) -> None:
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    settings.remediation_shadow = True  # the runbook would bring the bad node back and race the asserts
    settings.spares_per_island = 1
    engine = get_engine(sqlite_url)
    scheduler = slurm_cluster.scheduler()
    names = list(slurm_cluster.node_names)
    queries.upsert_nodes(
        engine,
        parse_inventory(
            "nodes:\n"
            + "".join(
                f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: r1, scheduler: slurm, island: ib-a}}\n"
                for n in names
            )
        ),
    )
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for n in names:
            await request_phase(client, n, "admit", "tester", "quick")
        await until(
            lambda: all(queries.get_node(engine, n).state == "production" for n in names), ADMISSION_S, "production"
        )
        # Each node back in production refills the pool: one spare, held by Slurm.
        spare = (await until(lambda: list(spare_store.held(engine)), ADMISSION_S, "a spare"))[0]
        assert spare_store.held(engine) == {spare: "ib-a"}
        await until(lambda: scheduler.spares() == {"ib-a": (spare,)}, ADMISSION_S, "the reservation")
        # fleet status: the spare is in service (production) and shown per island.
        shown = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            [
                "--db-url",
                sqlite_url,
                "--temporal-address",
                settings.temporal_address,
                "--task-queue",
                settings.task_queue,
                "fleet",
                "status",
            ],
            env={"FLEETCTL_FLEET": settings.fleet, "FLEETCTL_SPARES_PER_ISLAND": "1", "COLUMNS": "200"},
        )
        assert shown.exit_code == 0, shown.output
        assert "production 4" in shown.stdout and "hot spares 1 (in service, running no job)   ib-a 1/1" in shown.stdout

        # A 2-node job never lands on the spare: Slurm keeps it for fleetctl.
        job_id = slurm_cluster.submit_sleep_job("-N2")
        first = slurm_cluster.wait_for_run(job_id, 0).nodes
        # Said in full if it ever fails (once, under load, in this session's CI: the pool or the
        # reservation must have moved between the check above and the job's start).
        assert spare not in first, (
            first,
            spare,
            spare_store.held(engine),
            scheduler.spares(),
            slurm_cluster.log_tail(20),
        )
        bad, kept = first
        await send_health_events(
            client,
            bad,
            [HealthEventInput(bad, "xid", 79, "GPU has fallen off the bus.", "dmesg", "slurm-spares", time.time())],
        )

        restart = await until(
            lambda: next((r for r in jobs.job_restarts(engine, job_id) if r.status == "succeeded"), None),
            settings.restart_island_wait_s,
            "the job restart",
        )
        rerun = slurm_cluster.wait_for_run(job_id, 1)
        assert set(rerun.nodes) == {kept, spare}  # its good node and the island's spare
        assert restart.spares_taken == [spare] and f"spare {spare}" in restart.placement_detail
        # The pool takes the one idle production node left (the bad one is in maintenance).
        refill = next(n for n in names if n not in (bad, kept, spare))
        await until(lambda: spare_store.held(engine) == {refill: "ib-a"}, ADMISSION_S, "the refill")
        assert scheduler.spares() == {"ib-a": (refill,)}
        assert queries.get_node(engine, bad).state == "maintenance"

        # A spare that leaves production leaves the pool; no idle production node is left to
        # take its place (the others run the job), so the island holds none.
        await request_transition(client, refill, "drain", "tester", "spare leaves production")
        await until(lambda: spare_store.held(engine) == {}, ADMISSION_S, "the drained spare out of the pool")
        assert scheduler.spares() == {} and scheduler.node_state(refill).drained
    finally:
        await terminate_node_workflows(settings, names)
        worker.stop()
        for island in scheduler.spares():
            scheduler.set_spares(island, ())
        slurm_cluster.reset()
