"""Orchestration throughput: N simulated nodes driven new -> production with the standard
suite (checks at zero duration) on the embedded dev server, next to a bare Temporal
baseline on the same server with the same client: N workflows of as many no-op activities.

The baseline runs first, then fleetctl, back to back on one fresh server per size. Both
workers run in processes of their own; CPU seconds per node of worker, server and driver
say where the gap is."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.bare import BareNode
from bench.fleet import WorkerProcess, cpu_seconds, dev_server, fleet_settings, fleetctl_worker, seed_fleet
from bench.harness import CannotMeasure

SIZES_FULL = (100, 1000)
# 1,000 nodes take minutes per side even on an idle 2-core machine: --full only.
SIZES = (100, 300)
SUITE = "standard"
# Requests in flight at once from the driver, for both sides: ensure_node_workflows' default.
CLIENT_CONCURRENCY = 50
NODES_PER_RACK = 32
DONE_STATES = ("production", "maintenance")
TIMEOUT_S = 1200
ADMIT_ATTEMPTS = 10


def admission_activity_count(suite: str) -> int:
    """Activities of one `admit` in NodeLifecycle._admit on a fleet without a firmware
    baseline: the baseline lookup, the suite lookup, the suite's checks, the admission
    verdict, three recorded transitions (burn_in, admission, production) and the resume in
    the scheduler. Each run checks this against the fleetctl node's real history."""
    from fleetctl.checks.suites import load_suite

    return 1 + 1 + len(load_suite(suite).checks) + 1 + 3 + 1


def _history_shape(events) -> dict:
    from temporalio.api.enums.v1 import EventType

    kinds = Counter(event.event_type for event in events)
    return {
        "events": len(events),
        "activities": kinds[EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED],
        "workflow_tasks": kinds[EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED],
    }


async def _gather_limited(coroutines) -> list:
    gate = asyncio.Semaphore(CLIENT_CONCURRENCY)

    async def limited(coroutine):
        async with gate:
            return await coroutine

    return await asyncio.gather(*(limited(c) for c in coroutines))


class _Meter:
    """Wall and CPU time of worker, server and this driver over one side's run."""

    def __init__(self, worker: WorkerProcess, server_pid: int):
        self.worker, self.server_pid = worker, server_pid
        self.wall, self.driver = time.monotonic(), time.process_time()
        self.worker_cpu, self.server_cpu = worker.cpu_seconds(), cpu_seconds(server_pid)

    def read(self, nodes: int) -> dict:
        wall = time.monotonic() - self.wall
        return {
            "nodes": nodes,
            "seconds": round(wall, 2),
            "nodes_per_min": round(nodes / wall * 60, 1),
            "cpu_s_per_node": {
                "worker": round((self.worker.cpu_seconds() - self.worker_cpu) / nodes, 4),
                "server": round((cpu_seconds(self.server_pid) - self.server_cpu) / nodes, 4),
                "driver": round((time.process_time() - self.driver) / nodes, 4),
            },
            "worker_rss_mib": self.worker.rss_mib(),
        }


async def bare_run(client, server, directory: Path, nodes: int, steps: int) -> dict:
    task_queue = f"bench-bare-{nodes}"
    worker = WorkerProcess.start(
        [sys.executable, "-m", "bench.bare", server.address, task_queue],
        dict(os.environ),
        directory / "bare-worker.log",
        ready_text="bare worker polling",
    )
    try:
        meter = _Meter(worker, server.process.pid)
        handles = await _gather_limited(
            client.start_workflow(BareNode.run, steps, id=f"bare/{i}", task_queue=task_queue) for i in range(nodes)
        )
        started = time.monotonic() - meter.wall
        await asyncio.wait_for(asyncio.gather(*(h.result() for h in handles)), TIMEOUT_S)
        result = meter.read(nodes)
        result["phases_s"] = {"workflows_started": round(started, 2)}
        result["history"] = _history_shape([e async for e in handles[0].fetch_history_events()])
        return result
    finally:
        worker.stop()


async def _admit_all(client, names: list[str]) -> int:
    """Admit every node with the standard suite, as `fleetctl node admit` does (the product's
    request_phases: CLIENT_CONCURRENCY in flight, a stable update id per node, calls that time
    out on the busy worker retried); the number of update calls that timed out."""
    from fleetctl.workflows.client import request_phases

    outcomes = await request_phases(
        client, names, "admit", "bench", SUITE, concurrency=CLIENT_CONCURRENCY, attempts=ADMIT_ATTEMPTS
    )
    refused = [o for o in outcomes if not o.accepted]
    if refused:
        raise CannotMeasure(f"{len(refused)} of {len(names)} admits not accepted, e.g. {refused[0].message}")
    return sum(o.timeouts for o in outcomes)


async def fleetctl_run(server, directory: Path, nodes: int) -> dict:
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.client import connect, ensure_node_workflows

    settings = fleet_settings(f"sqlite:///{directory / 'fleet.db'}", server.address)
    names = seed_fleet(settings, nodes, racks=max(1, nodes // NODES_PER_RACK))
    engine = get_engine(settings.db_url)
    worker = fleetctl_worker(settings, directory / "fleetctl-worker.log")
    try:
        client = await connect(settings)
        meter = _Meter(worker, server.process.pid)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names], concurrency=CLIENT_CONCURRENCY)
        started = time.monotonic() - meter.wall
        update_timeouts = await _admit_all(client, names)
        admitted = time.monotonic() - meter.wall
        deadline = time.monotonic() + TIMEOUT_S
        while sum(queries.state_counts(engine).get(s, 0) for s in DONE_STATES) < nodes:
            if time.monotonic() > deadline:
                raise CannotMeasure(f"nodes not through admission after {TIMEOUT_S} s: {queries.state_counts(engine)}")
            await asyncio.sleep(0.25)
        result = meter.read(nodes)
        result["phases_s"] = {"workflows_started": round(started, 2), "admits_accepted": round(admitted, 2)}
        result["admit_update_timeouts"] = update_timeouts
        result["end_states"] = queries.state_counts(engine)
        handle = client.get_workflow_handle(node_workflow_id(names[0]))
        result["history"] = _history_shape([e async for e in handle.fetch_history_events()])
        return result
    finally:
        worker.stop()


async def measure_size(nodes: int, steps: int) -> dict:
    from temporalio.client import Client

    with tempfile.TemporaryDirectory(prefix=f"bench-throughput-{nodes}-") as tmp, dev_server(Path(tmp)) as server:
        client = await Client.connect(server.address)
        bare = await bare_run(client, server, Path(tmp), nodes, steps)
        fleetctl = await fleetctl_run(server, Path(tmp), nodes)
    if fleetctl["history"]["activities"] != steps:
        raise CannotMeasure(
            f"the baseline ran {steps} activities per node but a fleetctl node ran "
            f"{fleetctl['history']['activities']}: update admission_activity_count"
        )
    return {
        "bare": bare,
        "fleetctl": fleetctl,
        "bare_over_fleetctl": round(bare["nodes_per_min"] / fleetctl["nodes_per_min"], 2),
    }


def run(full: bool) -> dict:
    steps = admission_activity_count(SUITE)
    sizes = {str(n): asyncio.run(measure_size(n, steps)) for n in (SIZES_FULL if full else SIZES)}
    figures = {
        f"N={n}": {
            "fleetctl_nodes_per_min": m["fleetctl"]["nodes_per_min"],
            "bare_nodes_per_min": m["bare"]["nodes_per_min"],
            "bare_over_fleetctl": m["bare_over_fleetctl"],
        }
        for n, m in sizes.items()
    }
    return {
        "figures": figures,
        "suite": SUITE,
        "activities_per_node": steps,
        "order": ["bare", "fleetctl"],
        "client_concurrency": CLIENT_CONCURRENCY,
        "sizes": sizes,
    }
