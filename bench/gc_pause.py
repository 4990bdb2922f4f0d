"""A full garbage collection inside a workflow activation, against the process's heap: the
TMPRL1101 flake of `make test` (CONTRIBUTING.md, "The suite's time and one test process's
memory"). A collection stops every thread of the process; one that starts inside an
activation (an allocation there starts it) makes the activation last as long as the
collection, and past 2 s Temporal's deadlock detector fails the task.

`python -m bench.gc_pause OBJECTS`: a heap of about OBJECTS tracked objects (what a test
process kept), a worker on a dev server of its own, and 30 s of queries, each an activation
that runs one full collection. Prints the collection's pause and how many queries failed
with TMPRL1101 (2026-12-02, 2 cores, load ~1.5: 149,986 objects, 0.05 s, 0 of 599;
16,049,986 objects, 2.65 s, 13 of 15; a query after a failed one is a legacy query, the
run replayed: the failed task evicted it)."""

from __future__ import annotations

import asyncio
import gc
import sys
import tempfile
import time
import uuid
from pathlib import Path

from temporalio import workflow


@workflow.defn
class Counting:
    def __init__(self) -> None:
        self.pokes = 0

    @workflow.run
    async def run(self) -> int:
        await workflow.wait_condition(lambda: self.pokes > 0)
        return self.pokes

    @workflow.signal
    def poke(self) -> None:
        self.pokes += 1

    @workflow.query
    def count(self) -> int:
        with workflow.unsafe.sandbox_unrestricted():
            gc.collect()  # the full collection an allocation in the activation would start
        return self.pokes


async def measure(objects: int) -> None:
    from temporalio.client import Client, WorkflowQueryFailedError
    from temporalio.worker import Worker

    from fleetctl.connections.temporal_server import start_dev_server

    heap = [{"k": [i], "t": (i, str(i))} for i in range(objects // 4)]  # ~4 tracked objects each
    server = start_dev_server(Path(tempfile.mkdtemp()) / "temporal.db")
    try:
        client = await Client.connect(server.address)
        queue = f"gc-pause-{uuid.uuid4().hex[:6]}"
        async with Worker(client, task_queue=queue, workflows=[Counting]):
            handle = await client.start_workflow(Counting.run, id=queue, task_queue=queue)
            started = time.perf_counter()
            gc.collect()
            print(f"{len(gc.get_objects()):,} objects: a full collection {time.perf_counter() - started:.2f} s")
            asked = deadlocked = 0
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                asked += 1
                try:
                    await handle.query(Counting.count)
                except WorkflowQueryFailedError as exc:
                    deadlocked += "TMPRL1101" in str(exc)
            print(f"queries: {asked}, failed with TMPRL1101: {deadlocked}")
            await handle.signal(Counting.poke)
    finally:
        server.stop()
        del heap


if __name__ == "__main__":
    asyncio.run(measure(int(sys.argv[1])))
