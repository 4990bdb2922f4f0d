"""Many workers, one fleet: three `fleetctl worker` processes start at once
on one EMPTY PostgreSQL and one Temporal, a fleet is admitted, one worker is SIGKILLed in the
middle of burn-in. Every node reaches production with exactly one transition per step and
every check recorded once, and Temporal's histories show the work was shared."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetctl.db import queries
from fleetctl.db.engine import dispose_all, get_engine
from tests.support.checks import recorded_checks

pytestmark = [pytest.mark.temporal, pytest.mark.postgres, pytest.mark.slow]
FLEETCTL = str(Path(sys.executable).parent / "fleetctl")
NODES = 6
WORKERS = 3
# burn-in's long checks (dcgm r3: 15 min, HPL: 10 min) take a few seconds at this scale.
SIM_TIME_SCALE = "0.005"
# After the kill, Temporal hands the dead worker's work to the others once its timeouts pass:
# a check's 10 s heartbeat timeout, a short activity's 30 s start-to-close timeout
# (workflows/node_lifecycle.py), the sticky workflow-task timeout (5 s); then the rest of
# burn-in (~20 s of checks here) on two workers sharing two loaded cores, with room.
ALL_IN_PRODUCTION_WITHIN_S = 240


def start_worker(env: dict[str, str], log) -> subprocess.Popen:
    return subprocess.Popen([FLEETCTL, "worker"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def fleetctl(env: dict[str, str], *args: str) -> None:
    result = subprocess.run([FLEETCTL, *args], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


async def running_activity(address: str, names: list[str], workers: list[subprocess.Popen]) -> tuple[str, str, int]:
    """Waits until one of `workers` is running an activity of these nodes' workflows: the
    (workflow id, activity id, worker pid) of one such activity."""
    from temporalio.api.enums.v1 import PendingActivityState
    from temporalio.client import Client

    client = await Client.connect(address)
    pids = {w.pid for w in workers}
    deadline = time.monotonic() + 120
    while True:
        for name in names:
            description = await client.get_workflow_handle(f"node/{name}").describe()
            for pending in description.raw_description.pending_activities:
                pid = pending.last_worker_identity.partition("@")[0]
                if (
                    pending.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
                    and pid.isdigit()
                    and int(pid) in pids
                ):
                    return f"node/{name}", pending.activity_id, int(pid)
        assert time.monotonic() < deadline, "no worker ever ran an activity of burn-in"
        assert all(w.poll() is None for w in workers), "a worker died before the kill"
        await asyncio.sleep(0.2)


async def activity_starts(address: str, names: list[str]) -> list[tuple[str, str, str, int]]:
    """(workflow id, activity id, worker identity, attempt) of every activity these nodes'
    workflows ran: Temporal records the start of an activity's last attempt."""
    from temporalio.client import Client

    client = await Client.connect(address)
    starts = []
    for name in names:
        history = await client.get_workflow_handle(f"node/{name}").fetch_history()
        activity_ids = {
            event.event_id: event.activity_task_scheduled_event_attributes.activity_id
            for event in history.events
            if event.HasField("activity_task_scheduled_event_attributes")
        }
        starts += [
            (f"node/{name}", activity_ids[started.scheduled_event_id], started.identity, started.attempt)
            for event in history.events
            if event.HasField("activity_task_started_event_attributes")
            for started in [event.activity_task_started_event_attributes]
        ]
    return starts


def test_three_workers_share_a_fleet_and_survive_a_kill(postgres_server, temporal_address, tmp_path):
    from bench.postgres import fresh_database_url

    db_url = fresh_database_url(postgres_server)  # empty: the three workers migrate it together
    queue = f"three-{uuid.uuid4().hex[:8]}"
    (tmp_path / "temporal.toml").write_text("")
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "temporal.toml"),
        "FLEETCTL_DB_URL": db_url,
        "TEMPORAL_ADDRESS": temporal_address,
        "FLEETCTL_TASK_QUEUE": queue,
        "FLEETCTL_FLEET": queue,
        "FLEETCTL_SIM_TIME_SCALE": SIM_TIME_SCALE,
        "FLEETCTL_OPERATOR": "tester@ci",
    }
    names = [f"w{uuid.uuid4().hex[:5]}-{i}" for i in range(NODES)]
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: rack-{i % 2}, scheduler: sim}}\n"
            for i, n in enumerate(names)
        )
    )
    log = open(tmp_path / "workers.log", "wb")
    workers = [start_worker(env, log) for _ in range(WORKERS)]
    try:
        fleetctl(env, "node", "import", str(inventory))
        fleetctl(env, "node", "admit", *names)
        engine = get_engine(db_url)
        # The victim is a worker caught running an activity, so its death hands work over.
        workflow_id, activity_id, victim_pid = asyncio.run(running_activity(temporal_address, names, workers))
        victim = next(w for w in workers if w.pid == victim_pid)
        os.killpg(victim.pid, signal.SIGKILL)
        victim.wait(10)
        states_at_kill = {queries.get_node(engine, n).state for n in names}
        assert states_at_kill != {"production"}, "the kill came after the work was done"

        deadline = time.monotonic() + ALL_IN_PRODUCTION_WITHIN_S
        while {queries.get_node(engine, n).state for n in names} != {"production"}:
            assert time.monotonic() < deadline, (tmp_path / "workers.log").read_text()[-3000:]
            time.sleep(0.5)
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, signal.SIGKILL)
                worker.wait(10)
        log.close()

    suite = recorded_checks("burn-in", "h100-sxm")  # imex is a GB200 tray's check: not run here
    for name in names:
        events = queries.node_events(engine, name)
        assert [(e.from_state, e.to_state, e.state_version) for e in events] == [
            ("new", "burn_in", 1),
            ("burn_in", "admission", 2),
            ("admission", "production", 3),
        ], name
        runs = queries.latest_checks(engine, name, limit=50)
        assert sorted(r.check_name for r in runs) == sorted(suite), name  # each check once
    dispose_all()

    starts = asyncio.run(activity_starts(temporal_address, names))
    (interrupted,) = [
        (identity, attempt) for wf, act, identity, attempt in starts if (wf, act) == (workflow_id, activity_id)
    ]
    # The activity the victim was running either finished just before the kill or was run
    # again by a surviving worker once the dead one's timeout passed.
    assert interrupted[0].startswith(f"{victim.pid}@") or interrupted[1] >= 2, interrupted
    survivors = {identity for _, _, identity, _ in starts if not identity.startswith(f"{victim.pid}@")}
    assert survivors, starts  # the others did the rest
