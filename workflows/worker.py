"""The worker: hosts every fleetctl workflow and activity on one task queue."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable

from temporalio.client import Client
from temporalio.worker import Worker

from fleetctl.config import Settings
from workflows.active_checks import ActiveCheckBatch, ActiveCheckSweep
from workflows.activities import LifecycleActivities, NodeCommandActivities
from workflows.capacity_guard import CapacityGuard
from workflows.executor_registry import ExecutorRegistry
from workflows.firmware_activities import FirmwareActivities
from workflows.firmware_rollout import FirmwareRollout
from workflows.job_activities import JobRestartActivities
from workflows.job_restart import JobRestart
from workflows.node_activities import NodeActivities
from workflows.node_lifecycle import NodeLifecycle
from workflows.remediation import Remediation
from workflows.remediation_activities import RemediationActivities
from workflows.scheduler_registry import SchedulerRegistry

WORKFLOWS: list[type] = [NodeLifecycle, CapacityGuard, ActiveCheckSweep, ActiveCheckBatch, JobRestart, Remediation, FirmwareRollout]


def activities_for(settings: Settings, client: Client) -> list[Callable[..., Any]]:
    """Every activity the worker hosts, bound to this process's settings and client. One
    executor registry and one scheduler registry serve them all, so the SSH pool and its
    concurrency limit cover every command this worker runs."""
    executors = ExecutorRegistry(settings)
    schedulers = SchedulerRegistry(settings, executors)
    lifecycle = LifecycleActivities(settings)
    commands = NodeCommandActivities(client, settings)
    node = NodeActivities(settings, executors, schedulers)
    remediation = RemediationActivities(settings, executors, client)
    fw = FirmwareActivities(settings, executors)
    restarts = JobRestartActivities(settings, schedulers)
    return [
        lifecycle.record_transition, commands.command_node, commands.ask_capacity_guard, commands.report_check_errors,
        node.node_facts, node.suite_checks, node.run_check, node.judge_admission, node.record_health_event,
        node.fleet_snapshot, node.state_versions, node.record_automation_event, node.idle_production_nodes,
        node.running_jobs_on, node.cordon_in_scheduler, node.resume_in_scheduler, node.choose_remediation,
        remediation.begin_run, remediation.node_state, remediation.prepare_step, remediation.record_step,
        remediation.finish_run, remediation.gpu_reset, remediation.reboot, remediation.admit_node,
        remediation.notify, remediation.open_rma,
        fw.current_baseline_id, fw.node_drift, fw.apply_updates, fw.record_node, fw.record_progress,
        restarts.record_restart_started, restarts.drain_nodes, restarts.restart_job, restarts.wait_until_running,
        restarts.record_restart_step, restarts.record_restart_outcome,
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


async def run_worker(settings: Settings, stop: asyncio.Event | None = None) -> None:
    from workflows.starter import connect

    client = await connect(settings)
    with ThreadPoolExecutor(max_workers=64, thread_name_prefix="fleetctl-activity") as executor:
        worker = build_worker(client, settings, executor)
        if stop is None:
            await worker.run()
        else:
            async with worker:
                await stop.wait()


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
