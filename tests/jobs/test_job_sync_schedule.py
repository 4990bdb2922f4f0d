"""Jobs without cron: `fleetctl schedule create job-sync` makes a Temporal
Schedule whose runs reconcile the schedulers' jobs into the database, so `report` reads a
real Slurm job that nobody ran `fleetctl job sync` for."""

from __future__ import annotations

import asyncio
import json
import uuid

import pytest

from fleetctl.db import jobs
from fleetctl.db.engine import get_engine
from fleetctl.workflows.definitions.job_history import SYNC
from tests.support.cli import console
from tests.support.jobs import sim_fleet, until

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

EVERY_S = 1
# A scheduled run is started within its interval; its one activity within SYNC's timeout.
BOUND_S = 2 * EVERY_S + SYNC["start_to_close_timeout"].total_seconds()


def test_the_schedule_mirrors_a_slurm_job_that_report_then_shows(
    slurm_cluster, make_settings, sqlite_url, monkeypatch
) -> None:
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    monkeypatch.setenv("SLURM_CONF", settings.slurm_conf)
    engine = get_engine(sqlite_url)
    sim_fleet(engine, slurm_cluster.node_names, scheduler="slurm")
    name = f"job-sync-{uuid.uuid4().hex[:6]}"
    try:
        with console(settings) as cli:
            r = cli("schedule", "create", "job-sync", "--every", f"{EVERY_S}s", "--name", name)
            assert r.exit_code == 0 and "the schedulers' jobs into the database every 1s" in r.stdout, r.output
            job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2", "--job-name=llm-pretrain")
            slurm_cluster.wait_for_run(job_id, 0)
            stored = asyncio.run(
                until(
                    lambda: (j := jobs.get_job(engine, job_id)) is not None and j.started_at and j,
                    BOUND_S,
                    "the scheduled sync recording the running job",
                )
            )
            assert (stored.scheduler, stored.state, stored.nodes, stored.name) == (
                "slurm",
                "running",
                ["node1", "node2"],
                "llm-pretrain",
            )
            # The report reads it without syncing itself (--no-sync) and without `job sync`.
            r = cli("report", "-o", "json", "--no-sync")
            assert r.exit_code == 0, r.output
            assert job_id in json.dumps(json.loads(r.stdout))
            assert cli("schedule", "delete", name, "--yes").exit_code == 0
    finally:
        slurm_cluster.reset()


def test_a_bad_interval_is_one_line_and_creates_nothing(make_settings, sqlite_url) -> None:
    with console(make_settings(sqlite_url)) as cli:
        r = cli("schedule", "create", "job-sync", "--every", "soon", "--name", f"job-sync-{uuid.uuid4().hex[:6]}")
        assert r.exit_code == 2 and len(r.stderr.strip().splitlines()) == 1, r.output
