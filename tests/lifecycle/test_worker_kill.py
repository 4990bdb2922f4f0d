"""A real worker process SIGKILLed in the middle of burn-in: after a restart the workflow
resumes where it was, with no transition lost or written twice."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from bench.recovery import activity_started, kill_cost
from fleetctl.checks.catalog import CHECKS
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect, ensure_node_workflows, request_phase
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import QUICK
from tests.support.checks import recorded_checks
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


# Burn-in's long checks (dcgm r3: 15 min, HPL: 10 min) take a few seconds at this scale.
TIME_SCALE = 0.005
# What the workflows allow one step of work (its start-to-close timeout), from the presets
# where they live today; a wait after the kill adds what the kill costs (bench/recovery.py).
STEP_S = QUICK["start_to_close_timeout"].total_seconds()
BURN_IN = recorded_checks("burn-in", "h100-sxm")  # what make_fleet's nodes run


def start_worker(settings, log) -> subprocess.Popen:
    env = {
        **os.environ,
        "FLEETCTL_DB_URL": settings.db_url,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "FLEETCTL_TASK_QUEUE": settings.task_queue,
        "FLEETCTL_FLEET": settings.fleet,
        "FLEETCTL_SIM_TIME_SCALE": str(TIME_SCALE),
        "FLEETCTL_CONFIG": os.devnull,
    }
    return subprocess.Popen(
        [sys.executable, "-m", "fleetctl.cli.main", "worker"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


async def _running(client, name: str, check: str) -> bool:
    """The node's workflow is in `check` and a worker has taken its run_check."""
    current = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
    return current.activity.startswith(f"burn_in: {check} ") and await activity_started(
        client, node_workflow_id(name), "run_check"
    )


async def test_worker_killed_mid_burn_in_resumes_without_lost_or_duplicate_transitions(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    # One node is admitted; the other two, new and idle, are its partners over the fabric.
    name, *_ = make_fleet(settings, 3)
    engine = get_engine(settings.db_url)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(name, "new", 0)])
    with open(tmp_path / "worker.log", "wb") as log:
        worker = start_worker(settings, log)
        try:
            _, accepted, message = await request_phase(client, name, "admit", "tester", "burn-in")
            assert accepted, message
            before_r3 = BURN_IN[: BURN_IN.index("dcgm-r3")]
            await wait_for(
                lambda: _running(client, name, "dcgm-r3"),
                STEP_S + sum(CHECKS[c].typical_duration_s for c in before_r3) * TIME_SCALE,
                "burn-in to reach its long dcgm-r3 check",
            )
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
            cost = await kill_cost(client, settings.task_queue)
            # Where the kill landed: inside dcgm-r3, the node's one activity, taken by the dead worker.
            assert [
                (a.activity, a.lost_after_s > 0) for a in cost.in_flight if a.workflow_id == node_workflow_id(name)
            ] == [("run_check", True)], cost.landed_in()
            recorded = [r.check_name for r in queries.latest_checks(engine, name, limit=50)]
            assert sorted(recorded) == sorted(before_r3)
            assert queries.get_node(engine, name).state == "burn_in"

            worker = start_worker(settings, log)
            rest_s = sum(CHECKS[c].typical_duration_s for c in BURN_IN[len(before_r3) :]) * TIME_SCALE
            await wait_for(
                lambda: queries.get_node(engine, name).state in ("production", "maintenance"),
                cost.bound_s(STEP_S + rest_s),
                f"burn-in to finish (killed in {cost.landed_in()})",
            )
        finally:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.wait(10)
    events = queries.node_events(engine, name)
    assert [(e.from_state, e.to_state) for e in events] == [
        ("new", "burn_in"),
        ("burn_in", "admission"),
        ("admission", "production"),
    ]
    assert [e.state_version for e in events] == [1, 2, 3]
    # Every check recorded exactly once, dcgm-r3 (killed mid-way) included.
    assert sorted(r.check_name for r in queries.latest_checks(engine, name, limit=50)) == sorted(BURN_IN)
