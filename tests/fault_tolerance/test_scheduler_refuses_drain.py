"""The scheduler refuses a drain (slurmctld down, the Kubernetes API answering 500/429): the
cordon is retried with backoff, the refusal shows in `fleet status`, and the node stays in
`draining` (never reported drained) until the scheduler takes the drain; then it completes.

Only the edge is mocked: the simulated scheduler's drain raises SchedulerError while a flag
file exists, as an adapter does when its scheduler cannot be reached. Worker, workflows,
database and the rest of the simulated scheduler are the real ones.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path

import pytest

from fleetctl.db import jobs as job_store
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.schedulers import scheduler_for
from fleetctl.schedulers.base import SchedulerError
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.activities import schedulers as scheduler_registry
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect, ensure_node_workflows, request_transition
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.support.fleet import Cli, wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

SLURM_DOWN = "slurm_update error: Unable to contact slurm controller (connect failure)"


class RefusingScheduler:
    """The simulated scheduler, whose drain fails while `down` exists (and its job listing
    while `jobs_down` exists); records each drain attempt."""

    def __init__(self, real: SimScheduler, down: Path, jobs_down: Path | None = None):
        self.real, self.down, self.jobs_down = real, down, jobs_down
        self.drain_attempts: list[float] = []
        self._lock = threading.Lock()

    def jobs_on_node(self, node: str):
        if self.jobs_down is not None and self.jobs_down.exists():
            raise SchedulerError(SLURM_DOWN)
        return self.real.jobs_on_node(node)

    def drain(self, node: str, reason: str, critical: bool = False) -> None:
        with self._lock:
            self.drain_attempts.append(time.monotonic())
        if self.down.exists():
            raise SchedulerError(SLURM_DOWN)
        self.real.drain(node, reason, critical=critical)

    def __getattr__(self, name: str):
        return getattr(self.real, name)


async def test_refused_drain_is_retried_with_backoff_surfaced_and_completes_when_the_scheduler_returns(
    make_settings, sqlite_url, tmp_path, monkeypatch
) -> None:
    down = tmp_path / "slurmctld-down"
    down.touch()
    refusing: list[RefusingScheduler] = []

    def scheduler_with_outage(kind, settings):
        refusing.append(RefusingScheduler(scheduler_for(kind, settings), down))
        return refusing[-1]

    monkeypatch.setattr(scheduler_registry, "scheduler_for", scheduler_with_outage)
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)  # no runbook: the drained node waits in maintenance
    worker = WorkerThread(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        engine = get_engine(settings.db_url)
        client = await connect(settings)
        # Rounds of cordon attempts 1 s apart instead of a minute, so the test sees the next round.
        await start_in_production(client, settings, name, scheduler_retry_s=1.0)

        cli = Cli(settings)
        drained = await asyncio.to_thread(cli, "node", "drain", name, "--reason", "swap optics")
        assert drained.exit_code == 0, drained.output

        def scheduler_errors() -> list:
            return [
                e
                for e in queries.automation_events(engine, limit=50)
                if e.kind == "scheduler_error" and e.node_name == name
            ]

        await wait_for(lambda: bool(scheduler_errors()), 60, "a round of refused cordons")
        (sim,) = refusing
        await wait_for(lambda: len(sim.drain_attempts) > 5, 10, "the next round of attempts")
        # Backoff: each round is five attempts whose gaps grow (1, 2, 4, 8 s).
        gaps = [b - a for a, b in zip(sim.drain_attempts, sim.drain_attempts[1:5], strict=False)]
        assert len(gaps) == 4 and all(0.8 * 2**i <= gap for i, gap in enumerate(gaps)), gaps
        assert queries.get_node(engine, name).state == "draining"  # not moved on as if it had worked
        assert not SimScheduler(engine).node_state(name).drained
        assert SLURM_DOWN in scheduler_errors()[0].reason
        status = await asyncio.to_thread(cli, "fleet", "status", "-o", "json")
        assert any(
            e["kind"] == "scheduler_error" and e["node"] == name and SLURM_DOWN in e["reason"]
            for e in json.loads(status.stdout)["recent_automation_events"]
        ), status.stdout
        shown = (await asyncio.to_thread(cli, "fleet", "status")).stdout
        assert "scheduler_error" in shown and "Unable to contact slurm" in shown, shown
        current = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
        assert current.activity.startswith("draining") and "scheduler refused the drain" in current.last_outcome

        down.unlink()  # slurmctld is back
        await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", 60, "the drain to complete")
    finally:
        worker.stop()
    events = queries.node_events(engine, name)
    assert [e.trigger for e in events] == [
        "begin_burn_in",
        "begin_admission",
        "enter_production",
        "drain",
        "drain_complete",
    ]
    assert [e.state_version for e in events] == [1, 2, 3, 4, 5]
    in_scheduler = SimScheduler(engine).node_state(name)
    assert in_scheduler.drained and in_scheduler.owned_by_fleetctl and "swap optics" in in_scheduler.reason


async def test_node_back_in_production_is_resumed_in_its_scheduler_unless_someone_else_drained_it(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    worker = WorkerThread(settings).start()
    try:
        mine, theirs = names = make_fleet(settings, 2)
        engine = get_engine(settings.db_url)
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for name in names:
            for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
                await request_transition(client, name, trigger, "setup", actor_kind="automation")
            await request_transition(client, name, "drain", "alice@console", "operator: optics")
            await wait_for(lambda name=name: queries.get_node(engine, name).state == "maintenance", 30, "the drain")
        job_store.set_sim_drain(engine, theirs, True, "hand drain: cabling")  # an operator's, in the scheduler
        for name in names:
            await request_transition(client, name, "undrain", "alice@console", "operator: undrain")
        scheduler = SimScheduler(engine)

        def refusals() -> list:
            return [e for e in queries.automation_events(engine, limit=50) if e.kind == "scheduler_error"]

        await wait_for(lambda: not scheduler.node_state(mine).drained, 30, "fleetctl's own drain to be lifted")
        await wait_for(refusals, 30, "the refusal to lift someone else's drain to be recorded")
    finally:
        worker.stop()
    assert scheduler.node_state(theirs).reason == "hand drain: cabling"  # not fleetctl's to lift
    (refused,) = refusals()
    assert refused.node_name == theirs and "not by fleetctl" in refused.reason


async def test_a_scheduler_that_takes_the_cordon_but_cannot_list_the_jobs_keeps_the_node_draining_and_says_why(
    make_settings, sqlite_url, tmp_path, monkeypatch
) -> None:
    """slurmctld goes away between the cordon and the job listing: "cannot ask" is never read
    as "no jobs" (the node would go to maintenance under a running job)."""
    jobs_down = tmp_path / "squeue-down"
    jobs_down.touch()
    monkeypatch.setattr(
        scheduler_registry,
        "scheduler_for",
        lambda kind, settings: RefusingScheduler(scheduler_for(kind, settings), tmp_path / "up", jobs_down),
    )
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    worker = WorkerThread(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        engine = get_engine(settings.db_url)
        client = await connect(settings)
        await start_in_production(client, settings, name, scheduler_retry_s=1.0)
        await request_transition(client, name, "drain", "alice@console", "operator: optics")

        def refusals() -> list:
            return [
                e
                for e in queries.automation_events(engine, limit=50)
                if e.kind == "scheduler_error" and e.node_name == name
            ]

        await wait_for(refusals, 60, "the refused job listing to be recorded")
        assert "cannot list the node's jobs" in refusals()[0].reason and SLURM_DOWN in refusals()[0].reason
        assert SimScheduler(engine).node_state(name).drained  # the cordon itself went through
        assert queries.get_node(engine, name).state == "draining"
        current = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
        assert "scheduler refused the drain" in current.last_outcome
        jobs_down.unlink()
        await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", 60, "the drain to complete")
    finally:
        worker.stop()
