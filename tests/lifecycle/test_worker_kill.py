"""A real worker process SIGKILLed in the middle of burn-in: after a restart the workflow
resumes where it was, with no transition lost or written twice."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from tests.lifecycle.conftest import make_fleet
from workflows.client import connect, ensure_node_workflows, request_phase

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


def start_worker(settings, log) -> subprocess.Popen:
    env = {**os.environ, "FLEETCTL_DB_URL": settings.db_url, "TEMPORAL_ADDRESS": settings.temporal_address,
           "FLEETCTL_TASK_QUEUE": settings.task_queue, "FLEETCTL_FLEET": settings.fleet,
           # burn-in's long checks (dcgm r3: 15 min, HPL: 10 min) take a few seconds here
           "FLEETCTL_SIM_TIME_SCALE": "0.005", "FLEETCTL_CONFIG": os.devnull}
    return subprocess.Popen([sys.executable, "-m", "fleetctl.cli.main", "worker"], env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


async def test_worker_killed_mid_burn_in_resumes_without_lost_or_duplicate_transitions(make_settings, sqlite_url, tmp_path) -> None:
    settings = make_settings(sqlite_url)
    (name,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(name, "new", 0)])
    with open(tmp_path / "worker.log", "wb") as log:
        worker = start_worker(settings, log)
        try:
            _, accepted, message = await request_phase(client, name, "admit", "tester", "burn-in")
            assert accepted, message
            deadline = time.monotonic() + 60
            while queries.get_node(engine, name).state != "burn_in" or not queries.latest_checks(engine, name):
                assert time.monotonic() < deadline, "burn-in never started"
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # inside a long check (dcgm r3 runs ~4.5 s here)
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
            killed_at_checks = len(queries.latest_checks(engine, name, limit=50))
            assert queries.get_node(engine, name).state == "burn_in"

            worker = start_worker(settings, log)
            deadline = time.monotonic() + 120
            while queries.get_node(engine, name).state not in ("production", "maintenance"):
                assert time.monotonic() < deadline, (tmp_path / "worker.log").read_text()[-2000:]
                await asyncio.sleep(0.2)
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
    events = queries.node_events(engine, name)
    assert [(e.from_state, e.to_state) for e in events] == [
        ("new", "burn_in"), ("burn_in", "admission"), ("admission", "production")]
    assert [e.state_version for e in events] == [1, 2, 3]
    runs = queries.latest_checks(engine, name, limit=50)
    assert killed_at_checks < 10 and len(runs) == 10  # every check recorded exactly once
