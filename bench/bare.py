"""The bare Temporal baseline of the throughput benchmark: per node one workflow that runs,
one after another, as many no-op activities as fleetctl's admission does, hosted by a
worker built like fleetctl's (same thread pool, same concurrency), on the same server.

Run as `python -m bench.bare ADDRESS TASK_QUEUE` (the worker; Ctrl-C stops it)."""

from __future__ import annotations

import asyncio
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import Worker

# fleetctl's worker (workflows.worker.run_worker) runs its sync activities on 64 threads.
ACTIVITY_THREADS = 64


@activity.defn
def noop(step: int) -> int:
    return step


@workflow.defn
class BareNode:
    @workflow.run
    async def run(self, steps: int) -> int:
        for step in range(steps):
            await workflow.execute_activity(noop, step, start_to_close_timeout=timedelta(seconds=30))
        return steps


async def serve(address: str, task_queue: str) -> None:
    client = await Client.connect(address)
    with ThreadPoolExecutor(max_workers=ACTIVITY_THREADS, thread_name_prefix="bare-activity") as executor:
        worker = Worker(
            client,
            task_queue=task_queue,
            workflows=[BareNode],
            activities=[noop],
            activity_executor=executor,
            max_concurrent_activities=ACTIVITY_THREADS,
        )
        print("bare worker polling", flush=True)
        await worker.run()


if __name__ == "__main__":
    try:
        asyncio.run(serve(sys.argv[1], sys.argv[2]))
    except KeyboardInterrupt:
        pass
