"""A critical event is acted on at once, whatever the node's workflow is doing:
a drain waiting for its jobs becomes critical and restarts them now; a burn-in or recheck
check in flight is cancelled and recorded as interrupted, never as a pass or a fail.

Before, the node's workflow worked one item at a time: an XID 79 sent during an operator's
drain of a busy node waited behind the drain's wait for its jobs (2 h), and one sent during
HPL waited for HPL, while the node read Ready and its job ran on a GPU off the bus."""

from __future__ import annotations

import time

import pytest
from sqlmodel import Session, select

from fleetctl.db import jobs as job_store
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent, CheckRun
from fleetctl.executors.base import NodeTarget
from fleetctl.schedulers.base import recheck_hold_reason
from fleetctl.sim.executor import SimExecutor
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import DRAIN_JOB_WAIT_S, HealthEventInput, node_workflow_id
from fleetctl.workflows.client import (
    connect,
    ensure_node_workflows,
    request_phase,
    request_transition,
    send_health_events,
)
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import MESSAGE, QUICK, SCHEDULER_ROUND
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

# From the XID 79 to the node drained and its job restarted, each step in its first attempt:
# recording the event (QUICK), the guard's answer (MESSAGE), the cordon (SCHEDULER_ROUND's
# start-to-close). Far below what the node was busy with: a drain's 2 h wait for its jobs, an
# HPL of minutes.
ACTED_ON_WITHIN_S = (
    QUICK["start_to_close_timeout"] + MESSAGE["start_to_close_timeout"] + SCHEDULER_ROUND["start_to_close_timeout"]
).total_seconds()
LONG_SUITE = "long-hpl"


def _xid79(node: str, event_id: str) -> HealthEventInput:
    return HealthEventInput(
        node,
        "xid",
        79,
        "NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus",
        "agent",
        event_id,
        time.time(),
        severity="critical",
    )


async def _activity(client, node: str) -> str:
    return (await client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)).activity


async def _idle(client, node: str) -> bool:
    s = await client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)
    return not s.work and not s.activity


def _hpl_seconds(settings, name: str) -> float:
    """How long the simulated HPL runs at the test's time scale (the same executor, no wait)."""
    node = queries.get_node(get_engine(settings.db_url), name)
    executor = SimExecutor(lambda _: [], time_scale=settings.sim_time_scale, sleep=lambda _: None)
    target = NodeTarget(name=node.name, address=node.address, profile=node.profile)
    return executor.run(target, ("mpirun", "--bind-to", "none", "-np", "8", "xhpl"), timeout_s=1e9).duration_s


def _long_settings(make_settings, sqlite_url, tmp_path):
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path / "no-runbooks")  # the drained node waits in maintenance
    (tmp_path / "no-runbooks").mkdir()
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / f"{LONG_SUITE}.yaml").write_text(f"name: {LONG_SUITE}\ndescription: HPL alone\nchecks: [hpl]\n")
    settings.suites_dir = str(suites)
    settings.sim_time_scale = 8.0  # commands take 8 times as long as the real tools: an HPL of minutes
    return settings


def _interruptions(engine, node: str) -> list[str]:
    with Session(engine) as session:
        return [
            e.reason
            for e in session.exec(
                select(AutomationEvent).where(AutomationEvent.node_name == node, AutomationEvent.kind == "interrupted")
            )
        ]


def _hpl_runs(engine, node: str) -> list[CheckRun]:
    with Session(engine) as session:
        return list(session.exec(select(CheckRun).where(CheckRun.node_name == node, CheckRun.check_name == "hpl")))


async def test_a_drain_waiting_for_its_job_turns_critical_on_an_xid79_and_restarts_the_job_now(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        names = make_fleet(settings, 2)
        client = await connect(settings)
        for name in names:  # a fleet's own drain timing: wait 2 h for jobs, look every 30 s
            await start_in_production(client, settings, name)
        assert DRAIN_JOB_WAIT_S > 10 * ACTED_ON_WITHIN_S
        scheduler = SimScheduler(engine)
        job = scheduler.submit("train", 1)
        (node,) = job.nodes
        await request_transition(client, node, "drain", "alice@desk", cause="PDU maintenance")
        await wait_for(lambda: queries.get_node(engine, node).state == "draining", ACTED_ON_WITHIN_S, "the drain")
        # The drain looked at the node's jobs and waits for them.
        await wait_for(lambda: _activity_is(client, node, "draining: jobs"), ACTED_ON_WITHIN_S, "the wait for the job")

        await send_health_events(client, node, [_xid79(node, "preempt-drain-79")])
        await wait_for(
            lambda: job_store.job_restarts(engine, job.job_id), ACTED_ON_WITHIN_S, "the job restarted off the node"
        )
        await wait_for(
            lambda: (j := scheduler.job(job.job_id)).state == "running" and node not in j.nodes,
            ACTED_ON_WITHIN_S,
            "the job running again off the node",
        )
        (restart,) = job_store.job_restarts(engine, job.job_id)
        assert restart.bad_nodes == [node] and "79" in restart.cause, restart.cause
        await wait_for(
            lambda: queries.get_node(engine, node).state == "maintenance", ACTED_ON_WITHIN_S, "the drain completed"
        )
        completed = next(e for e in queries.node_events(engine, node) if e.trigger == "drain_complete")
        assert "79" in completed.cause, completed.cause
    finally:
        worker.stop()


async def _activity_is(client, node: str, prefix: str) -> bool:
    return (await _activity(client, node)).startswith(prefix)


async def test_an_xid79_during_a_recheck_cancels_the_check_and_drains_the_node_at_once(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = _long_settings(make_settings, sqlite_url, tmp_path)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        names = make_fleet(settings, 2)
        client = await connect(settings)
        for name in names:
            await start_in_production(client, settings, name)
        # A recheck runs on an idle node, held in its scheduler (a job there would skip it).
        node = names[0]
        hpl_s = _hpl_seconds(settings, node)
        assert hpl_s > 4 * ACTED_ON_WITHIN_S, hpl_s  # the check would outlast every bound below

        _, accepted, message = await request_phase(client, node, "recheck", "tester", LONG_SUITE)
        assert accepted, message
        await wait_for(lambda: _activity_is(client, node, "recheck: hpl"), ACTED_ON_WITHIN_S, "HPL running")
        assert SimScheduler(engine).node_state(node).reason == recheck_hold_reason(LONG_SUITE)
        started = time.monotonic()
        await send_health_events(client, node, [_xid79(node, "preempt-recheck-79")])

        await wait_for(
            lambda: queries.get_node(engine, node).state in ("draining", "maintenance"),
            ACTED_ON_WITHIN_S,
            "the node drained",
        )
        assert time.monotonic() - started < hpl_s  # HPL did not run to its end first
        # The XID's drain keeps the node out: the recheck's release, behind it, lifts nothing.
        await wait_for(lambda: queries.get_node(engine, node).state == "maintenance", ACTED_ON_WITHIN_S, "drained")
        await wait_for(lambda: _idle(client, node), ACTED_ON_WITHIN_S, "the node's queue worked")
        held = SimScheduler(engine).node_state(node)
        assert held.drained and "79" in held.reason, held
        (reason,) = _interruptions(engine, node)
        assert reason == "recheck long-hpl: hpl: interrupted by xid 79"
        # The cut check is neither a pass nor a fail: it left no result at all.
        assert _hpl_runs(engine, node) == []
        drain = next(e for e in queries.node_events(engine, node) if e.trigger == "drain")
        assert drain.failure == "xid 79" and "recheck" not in drain.cause
    finally:
        worker.stop()


async def test_an_xid79_during_burn_in_cancels_its_check_and_fails_the_phase_on_the_event(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = _long_settings(make_settings, sqlite_url, tmp_path)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        (node,) = make_fleet(settings, 1)
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(node, "new", 0)])
        hpl_s = _hpl_seconds(settings, node)
        _, accepted, message = await request_phase(client, node, "admit", "tester", LONG_SUITE)
        assert accepted, message
        await wait_for(lambda: _activity_is(client, node, "burn_in: hpl"), ACTED_ON_WITHIN_S, "HPL running")
        started = time.monotonic()
        await send_health_events(client, node, [_xid79(node, "preempt-burn-in-79")])

        await wait_for(
            lambda: queries.get_node(engine, node).state == "maintenance",
            ACTED_ON_WITHIN_S,
            "burn-in failed on the event",
        )
        assert time.monotonic() - started < hpl_s
        failed = next(e for e in queries.node_events(engine, node) if e.trigger == "phase_failed")
        assert "critical health event" in failed.cause, failed.cause
        assert _interruptions(engine, node) == ["burn-in: hpl: interrupted by xid 79"]
        assert _hpl_runs(engine, node) == []
        assert [e.code for e in queries.health_events(engine, node)] == [79]
    finally:
        worker.stop()
