"""A real `fleetctl worker` process SIGKILLed while work is in flight: a drain, a job
restart, a runbook step, a firmware batch. After a restart the workflows resume where they
were: every transition recorded once (the node's events in order, state versions 1..n),
and the simulated scheduler's tables agree with the database."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from pathlib import Path

import pytest

from bench.recovery import activity_started, kill_cost
from fleetctl.checks.catalog import CHECKS
from fleetctl.db import jobs as job_store
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import BURN_IN_HOLD
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import connect, ensure_node_workflows, request_transition, send_health_events
from fleetctl.workflows.definitions.shared import QUICK, SCHEDULER
from tests.lifecycle.test_worker_kill import TIME_SCALE, start_worker
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

TO_PRODUCTION = ["begin_burn_in", "begin_admission", "enter_production"]
# What the workflows allow one step of work (its start-to-close timeout), from the presets
# where they live today. A wait after a kill adds what the kill costs (bench/recovery.py).
STEP_S = QUICK["start_to_close_timeout"].total_seconds()
SCHEDULER_STEP_S = SCHEDULER["start_to_close_timeout"].total_seconds()
# The runbook's long check at the workers' time scale (tests/lifecycle/test_worker_kill.py).
DCGM_R3_S = CHECKS["dcgm-r3"].typical_duration_s * TIME_SCALE
LOG_TAIL_LINES = 200


class KillableWorker:
    """The worker as a process of its own, SIGKILLed (no cleanup of any kind) and restarted."""

    def __init__(self, settings, log: Path):
        self.settings, self.log_path, self.log = settings, log, open(log, "ab")
        self.process: subprocess.Popen = start_worker(settings, self.log)

    def kill(self) -> None:
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)

    def restart(self) -> None:
        self.process = start_worker(self.settings, self.log)

    def close(self) -> None:
        if self.process.poll() is None:
            self.kill()
        self.log.close()
        # The worker's own account (its errors and warnings, every run of it): pytest shows
        # this output only when the test failed, so a failure carries the worker's side.
        print(f"--- {self.log_path}, last {LOG_TAIL_LINES} lines ---")
        print("\n".join(self.log_path.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]))


@pytest.fixture
def killable_worker(make_settings, sqlite_url, tmp_path, monkeypatch):
    """factory(runbooks_dir=None) -> (settings, KillableWorker); without runbooks a drained
    node waits in maintenance."""
    started: list[KillableWorker] = []

    def factory(runbooks_dir: Path | None = None):
        monkeypatch.setenv("FLEETCTL_RUNBOOKS_DIR", str(runbooks_dir or tmp_path))
        settings = make_settings(sqlite_url)
        started.append(KillableWorker(settings, tmp_path / "worker.log"))
        return settings, started[-1]

    yield factory
    for worker in started:
        worker.close()


def assert_events(engine, name: str, triggers: list[str]) -> None:
    events = queries.node_events(engine, name)
    assert [e.trigger for e in events] == triggers, [(e.trigger, e.cause) for e in events]
    assert [e.state_version for e in events] == list(range(1, len(triggers) + 1))
    assert queries.get_node(engine, name).state_version == len(triggers)


async def test_worker_killed_mid_xid79_drain_and_mid_job_restart(killable_worker, tmp_path) -> None:
    settings, worker = killable_worker()
    bad, peer, busy, spare = names = make_fleet(settings, 4)
    engine = get_engine(settings.db_url)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
    for name in (bad, peer, busy):
        for trigger in TO_PRODUCTION:
            await request_transition(client, name, trigger, "setup", actor_kind="automation")
    scheduler = SimScheduler(engine)
    scheduler.drain(spare, BURN_IN_HOLD)  # still new: held, as `node import` holds it, until admitted
    train = scheduler.submit("train", 2)
    other = scheduler.submit("other", 1)
    assert (train.nodes, other.nodes) == ((bad, peer), (busy,))

    def restarts():
        return job_store.job_restarts(engine, train.job_id)

    await send_health_events(
        client, bad, [HealthEventInput(bad, "xid", 79, "GPU has fallen off the bus", "dmesg-watcher", "kill-79", 0.0)]
    )
    await wait_for(lambda: queries.get_node(engine, bad).state != "production", STEP_S, "the drain", interval_s=0.01)
    worker.kill()  # in the drain: cordon, jobs, the restart child, drain_complete still to come
    first = await kill_cost(client, settings.task_queue)
    assert queries.get_node(engine, bad).state in ("draining", "maintenance")

    worker.restart()
    # The job cannot run again yet: off `bad`, only `peer` is free. The restart waits for nodes.
    await wait_for(
        lambda: [r.requeued_at is not None for r in restarts()] == [True],
        first.bound_s(SCHEDULER_STEP_S),
        f"the job to be requeued (killed in {first.landed_in()})",
    )
    (waiting,) = restarts()
    await wait_for(
        lambda: activity_started(client, waiting.workflow_id, "wait_until_running"),
        STEP_S,
        "the restart to wait for the job to run",
    )
    worker.kill()  # in the job restart, while it waits for the job to run
    second = await kill_cost(client, settings.task_queue)
    # Landed where meant: the restart's only activity in flight is the wait, taken by the dead worker.
    assert [(a.activity, a.lost_after_s > 0) for a in second.in_flight if a.workflow_id == waiting.workflow_id] == [
        ("wait_until_running", True)
    ], second.landed_in()
    assert restarts()[0].status == "in_progress"

    worker.restart()
    for trigger in TO_PRODUCTION:  # a node comes back into service: the job can run
        await request_transition(client, spare, trigger, "setup", actor_kind="automation")
    await wait_for(
        lambda: [r.status for r in restarts()] == ["succeeded"],
        second.bound_s(STEP_S),
        f"the restart to finish (killed in {second.landed_in()})",
    )
    await wait_for(
        lambda: queries.get_node(engine, bad).state == "maintenance", second.bound_s(STEP_S), "the drain to complete"
    )

    assert_events(engine, bad, [*TO_PRODUCTION, "drain", "drain_complete"])
    assert [h.code for h in queries.health_events(engine, bad)] == [79]
    (restart,) = restarts()
    assert sorted(restart.new_nodes) == sorted([peer, spare]) and restart.bad_nodes == [bad]
    # The scheduler and the database agree: bad drained by fleetctl and idle; the job runs off it.
    in_scheduler = scheduler.node_state(bad)
    assert in_scheduler.drained and in_scheduler.owned_by_fleetctl and in_scheduler.state == "drain"
    assert sorted(scheduler.job(train.job_id).nodes) == sorted([peer, spare])
    assert scheduler.job(other.job_id).nodes == (busy,)
    for name in (peer, busy, spare):
        assert queries.get_node(engine, name).state == "production" and not scheduler.node_state(name).drained


SLOW_RUNBOOK = """
name: long-diagnostic
match: {xid: [48]}
steps:
  - action: run_check
    name: diag
    with: {check: dcgm-r3}
  - action: rma
    with: {reason: "diagnosed by {{ runbook }}"}
"""


async def test_worker_killed_mid_runbook_step(killable_worker) -> None:
    from fleetctl.db import remediation as runs_store
    from fleetctl.remediation.events import Event
    from fleetctl.remediation.runbooks import parse_runbook
    from fleetctl.workflows.client import start_remediation

    settings, worker = killable_worker()
    (name,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(name, "new", 0)])
    for trigger in ("begin_burn_in", "phase_failed"):  # in maintenance, where runbooks work
        await request_transition(client, name, trigger, "setup", actor_kind="automation")
    handle = await start_remediation(
        client, settings, name, parse_runbook(SLOW_RUNBOOK), Event("xid", code=48), "tester"
    )
    # Before the check: begin_run and prepare_step, one step each.
    await wait_for(lambda: activity_started(client, handle.id, "run_check"), 2 * STEP_S, "the runbook's dcgm-r3 check")
    (run,) = runs_store.runs(engine, node_name=name)
    run_key = run.run_key
    worker.kill()
    cost = await kill_cost(client, settings.task_queue)
    # Landed where meant: inside the check, taken by the dead worker, nothing of it recorded yet.
    assert [(a.activity, a.lost_after_s > 0) for a in cost.in_flight if a.workflow_id == handle.id] == [
        ("run_check", True)
    ], cost.landed_in()
    assert runs_store.steps(engine, run_key) == [] and queries.latest_checks(engine, name) == []

    worker.restart()
    # After the kill: dcgm-r3 again from the start, then the run's remaining quick steps.
    result = await asyncio.wait_for(handle.result(), cost.bound_s(STEP_S + DCGM_R3_S))
    assert result.status in ("succeeded", "escalated"), result
    assert runs_store.get_run(engine, run_key).status == result.status
    assert [(s.step_index, s.action, s.status) for s in runs_store.steps(engine, run_key)] == [
        (0, "run_check", "passed"),
        (1, "rma", "passed"),
    ]
    assert [r.check_name for r in queries.latest_checks(engine, name, limit=10)] == ["dcgm-r3"]  # recorded once
    assert_events(engine, name, ["begin_burn_in", "phase_failed", "send_to_rma"])
    assert len(runs_store.rma_records(engine, node_name=name)) == 1


async def test_worker_killed_mid_firmware_batch(killable_worker, monkeypatch) -> None:
    from fleetctl.db import firmware as firmware_store
    from fleetctl.remediation.firmware import load_baseline
    from fleetctl.sim.store import add_fault
    from fleetctl.workflows.api import RolloutInput
    from fleetctl.workflows.client import start_rollout
    from tests.support.checks import record_check

    baseline_file = Path(__file__).parents[1] / "fixtures" / "firmware" / "h100-baseline.yaml"
    # Two nodes: the guard's 10 % limit would hold batch 2 while the canary is still out.
    monkeypatch.setenv("FLEETCTL_GUARD_MAX_UNAVAILABLE_FLEET", "1.0")
    settings, worker = killable_worker()
    names = make_fleet(settings, 2)
    engine = get_engine(settings.db_url)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
    for name in names:
        for trigger in TO_PRODUCTION:
            await request_transition(client, name, trigger, "setup", actor_kind="automation")
        add_fault(engine, name, "firmware-drift")
        record_check(settings, name, "firmware-inventory")
        record_check(settings, name, "nic-firmware")
    recorded = firmware_store.record_rollout(
        engine, load_baseline(baseline_file), baseline_file.read_text(), 1, "1", 1, False, "tester"
    )
    rollout_id = recorded.rollout_id
    plan = RolloutInput(rollout_id, recorded.baseline_id, recorded.batches, max_failures=1, actor="tester")
    await start_rollout(client, settings, plan)
    assert plan.batches == [[names[0]], [names[1]]]
    # The canary's batch drains it and waits for it to leave production: kill the worker then.
    await wait_for(
        lambda: queries.get_node(engine, names[0]).state != "production", 30, "the canary's drain", interval_s=0.01
    )
    worker.kill()
    assert firmware_store.rollout_nodes(engine, rollout_id) == []

    worker.restart()
    await wait_for(lambda: firmware_store.get_rollout(engine, rollout_id).status == "completed", 90, "the roll-out")
    await wait_for(
        lambda: all(queries.get_node(engine, n).state == "production" for n in names), 60, "the updated nodes' burn-in"
    )
    results = firmware_store.rollout_nodes(engine, rollout_id)
    assert [(r.node_name, r.status) for r in results] == [(names[0], "updated"), (names[1], "updated")], [
        r.detail for r in results
    ]
    row = firmware_store.get_rollout(engine, rollout_id)
    assert (row.done, row.failed, row.total) == (2, 0, 2)
    for name in names:
        assert_events(engine, name, [*TO_PRODUCTION, "drain", "drain_complete", *TO_PRODUCTION])
        # back in the scheduler with production: the workflow's next step after the transition,
        # one scheduler call (its start-to-close) once the recorded state says production
        await wait_for(
            lambda name=name: not SimScheduler(engine).node_state(name).drained,
            2 * SCHEDULER["start_to_close_timeout"].total_seconds(),
            f"{name} resumed in its scheduler",
        )
