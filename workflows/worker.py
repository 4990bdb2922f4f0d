"""The worker: hosts every fleetctl workflow and activity on one task queue."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

from temporalio.client import Client
from temporalio.worker import Worker

from fleetctl.config import Settings
from workflows.activities import LifecycleActivities
from workflows.node_lifecycle import NodeLifecycle

WORKFLOWS = [NodeLifecycle]


def build_worker(client: Client, settings: Settings, executor: ThreadPoolExecutor) -> Worker:
    lifecycle = LifecycleActivities(settings)
    return Worker(
        client,
        task_queue=settings.task_queue,
        workflows=WORKFLOWS,
        activities=[lifecycle.record_transition],
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
