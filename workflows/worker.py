"""The worker: hosts every fleetctl workflow and activity on one task queue."""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from temporalio.client import Client
from temporalio.worker import Worker

from fleetctl.config import Settings
from fleetctl.text import one_line
from workflows.activities.checks import CheckActivities
from workflows.activities.executors import ExecutorRegistry
from workflows.activities.firmware import FirmwareActivities
from workflows.activities.guard import GuardActivities
from workflows.activities.jobs import JobRestartActivities
from workflows.activities.node import NodeActivities, NodeCommandActivities
from workflows.activities.remediation import RemediationActivities
from workflows.activities.schedulers import SchedulerRegistry
from workflows.activities.stragglers import StragglerActivities
from workflows.client import connect, ensure_capacity_guard, require_search_attributes, stalled_nodes
from workflows.definitions.active_checks import ActiveCheckBatch, ActiveCheckSweep
from workflows.definitions.capacity_guard import CapacityGuard
from workflows.definitions.firmware_rollout import FirmwareRollout
from workflows.definitions.job_restart import JobRestart
from workflows.definitions.node_lifecycle import NodeLifecycle
from workflows.definitions.remediation import Remediation
from workflows.definitions.stragglers import ProductionStragglers

WORKFLOWS: list[type] = [NodeLifecycle, CapacityGuard, ActiveCheckSweep, ActiveCheckBatch, JobRestart, Remediation, FirmwareRollout,
                         ProductionStragglers]


def activities_for(settings: Settings, client: Client) -> list[Callable[..., Any]]:
    """Every activity the worker hosts, bound to this process's settings and client. One
    executor registry and one scheduler registry serve them all, so the SSH pool and its
    concurrency limit cover every command this worker runs."""
    executors = ExecutorRegistry(settings)
    schedulers = SchedulerRegistry(settings, executors)
    node = NodeActivities(settings, schedulers)
    commands = NodeCommandActivities(client)
    checks = CheckActivities(settings, executors)
    guard = GuardActivities(settings, lambda: ensure_capacity_guard(client, settings))
    remediation = RemediationActivities(settings, executors, client)
    fw = FirmwareActivities(settings, executors)
    restarts = JobRestartActivities(settings, schedulers)
    stragglers = StragglerActivities(settings)
    return [
        node.record_transition, node.record_transition_with_facts, node.node_facts, node.record_health_event,
        node.record_health_events, node.record_automation_event, node.judge_reachability, node.judge_agent_silence,
        node.idle_production_nodes, node.running_jobs_on, node.cordon_in_scheduler, node.resume_in_scheduler,
        node.hold_in_scheduler, node.release_hold, node.drain_pods_on, node.report_state,
        node.choose_remediation, commands.command_node,
        checks.suite_checks, checks.run_check, checks.judge_admission, checks.judge_against_peers,
        guard.fleet_snapshot, guard.fleet_policy, guard.critical_evidence, guard.state_versions,
        guard.ask_capacity_guard, guard.report_check_errors,
        remediation.begin_run, remediation.node_state, remediation.prepare_step, remediation.record_step,
        remediation.finish_run, remediation.gpu_reset, remediation.reboot, remediation.admit_node,
        remediation.notify, remediation.open_rma,
        fw.current_baseline_id, fw.node_drift, fw.apply_updates, fw.record_node, fw.record_progress,
        restarts.record_restart_started, restarts.drain_nodes, restarts.restart_job, restarts.wait_until_running,
        restarts.record_restart_step, restarts.record_restart_outcome,
        stragglers.judge_running_jobs, stragglers.record_straggler_drain,
    ]


def build_worker(client: Client, settings: Settings, executor: ThreadPoolExecutor) -> Worker:
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=activities_for(settings, client),
        activity_executor=executor,
        max_concurrent_activities=executor._max_workers,
    )


async def watch_stalls(client: Client, settings: Settings) -> None:
    """Every settings.stall_watch_s: which of this task queue's node workflows are stalled
    (failing workflow tasks, queued work past settings.stall_after_s), recorded where `node
    list`, `fleet status` and the exporter read it. Outside every workflow, so a stalled one
    cannot hide itself; any worker of the queue may do it (the records are idempotent)."""
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import utcnow

    log = logging.getLogger(__name__)
    engine = get_engine(settings.db_url)
    while True:
        try:
            now = utcnow()
            stalls = await stalled_nodes(client, settings, now)
            newly, cleared = await asyncio.to_thread(queries.record_stalls, engine, stalls, now, settings.fleet)
            for stall in (s for s in stalls if s.node in newly):
                log.warning("node %s stalled: %s", stall.node, stall.reason)
            for node in cleared:
                log.info("node %s works its queue again", node)
        except Exception as exc:  # noqa: BLE001 - the watch goes on; the next round asks again
            log.warning("stall watch: %s", one_line(exc))
        await asyncio.sleep(settings.stall_watch_s)


async def run_worker(settings: Settings, stop: asyncio.Event | None = None) -> None:
    client = await connect(settings)
    # Before polling: a namespace without the search attributes would stall every node's workflow.
    warning = await require_search_attributes(client)
    if warning:
        logging.getLogger(__name__).warning(warning)
    watcher = asyncio.create_task(watch_stalls(client, settings))
    try:
        with ThreadPoolExecutor(max_workers=64, thread_name_prefix="fleetctl-activity") as executor:
            worker = build_worker(client, settings, executor)
            if stop is None:
                await worker.run()
            else:
                async with worker:
                    await stop.wait()
    finally:
        watcher.cancel()


class BackgroundWorker:
    """A worker on its own event loop in a daemon thread: for the demo (and tests) that
    drive the CLI from the main thread while workflows run."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="fleetctl-worker", daemon=True)

    def _main(self) -> None:
        async def body() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await run_worker(self.settings, self._stop)

        try:
            asyncio.run(body())
        except BaseException as exc:  # noqa: BLE001 - surfaced to the owner in stop()
            self._error = exc
            self._ready.set()

    def start(self) -> BackgroundWorker:
        self._thread.start()
        self._ready.wait(30)
        return self

    def stop(self) -> None:
        # A worker that already died has closed its loop: raise why it died, not "loop closed".
        if self._loop and self._stop and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._error:
            raise self._error
