"""The critical lane (workflows.worker): an XID 79's drain, its job's restart and the guard's
grant never wait behind bulk work. A worker's checks run in the bulk lane, on activity slots
of their own; here more rechecks than there are slots in either lane block in their first
check until the test releases them, and an XID 79 on another node, running a job, still
drains the node and moves its job while every one of them is still blocked.

With the checks back on the task queue (the lanes undone), the blocked checks hold every
slot the node's workflow needs to ask the guard and cordon the node (its short records run as
local activities, on threads of their own), and the XID waits until the checks end: the test
fails at its bound."""

from __future__ import annotations

import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio import activity

from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import CheckOutcome, CheckRequest, guard_id, node_workflow_id
from fleetctl.workflows.client import connect, request_phase, send_health_events
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import HEARTBEAT_TIMEOUT
from fleetctl.workflows.worker import activities_for, build_worker, collect_less_often, lane_slots, slots_of
from tests.lifecycle.test_preemption import ACTED_ON_WITHIN_S, _xid79
from tests.support.fleet import wait_for
from tests.support.history import activity_steps
from tests.support.sim_fleet import make_fleet
from tests.support.worker import DRAIN_LOOKS_OFTEN, start_in_production, terminate_node_workflows

# The test's worker: 4 critical slots and 4 bulk ones at the default share, and a thread for
# the critical lane's local activities.
THREADS = 9


@pytest.mark.parametrize(
    ("threads", "share", "slots"),
    [
        (64, 0.5, (32, 32)),
        (64, 0.25, (48, 16)),
        (64, 0.9, (7, 57)),  # rounded down: bulk never takes more than its share
        (10, 0.33, (7, 3)),
        (4, 0.1, (3, 1)),  # bulk keeps one slot however small its share
        (2, 0.9, (1, 1)),  # and the critical lane one however large bulk's
    ],
)
def test_bulk_takes_at_most_its_share_of_the_slots_and_neither_lane_is_left_without_one(threads, share, slots):
    assert slots_of(threads, share) == slots
    assert sum(slots) == threads  # together the threads: no task of either lane queues for one


@pytest.mark.parametrize(
    ("lanes", "slots"),
    [("both", (28, 28, 8)), ("critical", (56, 0, 8)), ("bulk", (0, 64, 0)), ("both", (4, 4, 1))],
)
def test_a_process_of_one_lane_gives_it_every_slot_and_the_critical_lanes_local_steps_have_threads_of_their_own(
    lanes, slots, make_settings
) -> None:
    settings = make_settings("sqlite://")
    settings.worker_lanes = lanes
    threads = sum(slots)
    assert lane_slots(threads, settings) == slots


@pytest.mark.parametrize(("lanes", "threads"), [("both", 2), ("critical", 1)])
def test_a_pool_too_small_for_the_lanes_and_their_local_steps_is_refused(lanes, threads, make_settings) -> None:
    settings = make_settings("sqlite://")
    settings.worker_lanes = lanes
    with pytest.raises(ValueError, match="the lanes need"):
        lane_slots(threads, settings)


def test_a_lane_choice_that_is_no_lane_is_refused_in_one_line() -> None:
    import os

    from fleetctl.config import ConfigError, load_settings

    with pytest.raises(ConfigError, match="worker_lanes: 'fast' is not a lane choice") as caught:
        load_settings(env={"FLEETCTL_WORKER_LANES": "fast"}, config_file=os.devnull)
    assert "\n" not in str(caught.value)


async def steps_of(client, workflow_id: str) -> tuple[set[str], set[str]]:
    """(local, scheduled): the activity types a workflow ran as local activities and those it
    scheduled on a task queue."""
    steps = activity_steps(await client.get_workflow_handle(workflow_id).fetch_history())
    return {name for name, local in steps if local}, {name for name, local in steps if not local}


@pytest.mark.temporal
async def test_an_xid79_drains_its_node_and_moves_its_job_while_blocked_checks_fill_the_bulk_lane(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)  # no runbook: the drained node waits in maintenance
    engine = get_engine(sqlite_url)
    critical_slots, bulk_slots, _ = lane_slots(THREADS, settings)
    assert critical_slots == bulk_slots  # so the blocked checks fill whichever lane they run in
    checking = critical_slots + bulk_slots  # more rechecks than either lane has slots: some queue
    names = make_fleet(settings, checking + 2)  # and a node with a job, and one free for the job to move to
    client = await connect(settings)

    release = threading.Event()
    started: list[str] = []
    activities = activities_for(settings, client)
    real_check = next(a for a in activities if getattr(a, "__name__", "") == "run_check")

    @activity.defn(name="run_check")
    def blocked_check(req: CheckRequest) -> CheckOutcome:
        started.append(req.node)
        # Alive to Temporal while it blocks (a beat well inside the heartbeat timeout), so it
        # is neither timed out nor retried: it holds its slot until released.
        while not release.wait(HEARTBEAT_TIMEOUT.total_seconds() / 5):
            activity.heartbeat()
        return real_check(req)

    activities = [blocked_check if a is real_check else a for a in activities]
    rechecked: list[str] = []

    async def rechecks_over() -> bool:
        for name in rechecked:
            s = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
            if s.work or s.activity:
                return False
        return True

    try:
        with ThreadPoolExecutor(THREADS) as pool:
            async with build_worker(client, settings, pool, activities=activities):
                try:
                    for name in names:
                        await start_in_production(client, settings, name, **DRAIN_LOOKS_OFTEN)
                    scheduler = SimScheduler(engine)
                    job = scheduler.submit("train", 1)
                    (node,) = job.nodes
                    rechecked.extend([n for n in names if n != node][:checking])
                    for name in rechecked:
                        _, accepted, message = await request_phase(client, name, "recheck", "tester", "quick")
                        assert accepted, message

                    # As many checks blocked as the bulk lane has slots (the critical lane as many).
                    await wait_for(lambda: len(started) == bulk_slots, ACTED_ON_WITHIN_S, "the bulk lane full")

                    await send_health_events(client, node, [_xid79(node, "critical-lane-79")])
                    await wait_for(
                        lambda: queries.get_node(engine, node).state != "production",
                        ACTED_ON_WITHIN_S,
                        "the node out of production",
                    )
                    await wait_for(
                        lambda: (j := scheduler.job(job.job_id)).state == "running" and node not in j.nodes,
                        ACTED_ON_WITHIN_S,
                        "the job running again off the node",
                    )
                    drained = next(e for e in queries.node_events(engine, node) if e.trigger == "drain")
                    assert "79" in drained.cause, drained.cause
                    # Its short steps, and the guard's, ran in the worker as local activities:
                    # none was a task of the server's queues.
                    local, scheduled = await steps_of(client, node_workflow_id(node))
                    assert {"record_health_events", "node_facts", "record_transition_with_facts"} <= local
                    assert "ask_capacity_guard" in scheduled and not local & scheduled
                    local, scheduled = await steps_of(client, guard_id(settings.fleet))
                    assert {"removal_facts", "record_automation_event"} <= local and not scheduled

                    async def every_recheck_at_its_check() -> bool:
                        for name in rechecked:
                            s = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
                            if not s.activity.startswith("recheck: "):
                                return False
                        return True

                    # All the while the lane stayed full, the other rechecks' checks queued behind
                    # the blocked ones: none ended, none other started.
                    await wait_for(every_recheck_at_its_check, ACTED_ON_WITHIN_S, "every recheck at its check")
                    assert len(started) == bulk_slots and set(started) <= set(rechecked), started
                    assert [queries.get_node(engine, n).state for n in rechecked] == ["production"] * checking
                finally:
                    release.set()
                    # The rechecks end before the worker stops: a sync activity the stopping
                    # worker cancels gets an exception raised into its thread, which can leave
                    # a lock it held (an import's) taken for good.
                    with contextlib.suppress(AssertionError):
                        await wait_for(rechecks_over, ACTED_ON_WITHIN_S, "the rechecks over")
    finally:
        release.set()
        await terminate_node_workflows(settings, names)


async def test_the_server_paces_the_bulk_lane_at_its_rate(make_settings, sqlite_url, tmp_path) -> None:
    """settings.bulk_activities_per_s is the bulk lane's rate, held by the Temporal server: a
    recheck's checks start no faster than it allows (at most a rate's worth at once, then one
    per 1/rate s). Without the limit the simulated checks run back to back in a fraction of it."""
    import time

    from fleetctl.checks.suites import load_suite

    settings = make_settings(sqlite_url)
    settings.bulk_activities_per_s = 2.0
    (name,) = make_fleet(settings, 1)
    client = await connect(settings)
    starts: list[float] = []
    activities = activities_for(settings, client)
    real_check = next(a for a in activities if getattr(a, "__name__", "") == "run_check")

    @activity.defn(name="run_check")
    def timed_check(req: CheckRequest) -> CheckOutcome:
        starts.append(time.monotonic())
        return real_check(req)

    activities = [timed_check if a is real_check else a for a in activities]
    with ThreadPoolExecutor(THREADS) as pool:
        async with build_worker(client, settings, pool, activities=activities):
            try:
                await start_in_production(client, settings, name)
                _, accepted, message = await request_phase(client, name, "recheck", "tester", "quick")
                assert accepted, message

                async def recheck_over() -> bool:
                    s = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
                    return bool(starts) and not s.work and not s.activity

                checks = len(load_suite("quick").checks)
                await wait_for(
                    recheck_over, checks / settings.bulk_activities_per_s + ACTED_ON_WITHIN_S, "the recheck over"
                )
            finally:
                await terminate_node_workflows(settings, [name])
    rate = settings.bulk_activities_per_s
    paced = (len(starts) - 1 - rate) / rate  # a rate's worth at once, the rest one per 1/rate s
    assert len(starts) > 2 * rate, starts
    assert starts[-1] - starts[0] >= paced * 0.8, (len(starts), starts[-1] - starts[0])


def test_a_worker_collects_its_young_generation_at_the_setting_and_keeps_the_older_thresholds() -> None:
    import gc

    before = gc.get_threshold()
    try:
        collect_less_often(Settings(worker_gc_young=12_345))
        assert gc.get_threshold() == (12_345, *before[1:])
    finally:
        gc.set_threshold(*before)
