"""Worker scale-out: admission throughput of 1, 2 and 3 `fleetctl worker` processes against one
Temporal dev server, with PostgreSQL as the fleet database, in one run.

For each worker count: a fresh, empty PostgreSQL database (the workers migrate it together),
a fresh task queue, N simulated nodes admitted with the standard suite (checks at zero
duration), as in the throughput benchmark. The baseline is the 1-worker run of the same run:
the figure is each count's nodes/min over it. CPU seconds per node of the workers (all of
them), the server, PostgreSQL (its processes, backends included) and the driver say where the
machine's cores went: on 2 cores the curve flattens once they are all busy."""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
from pathlib import Path

from bench.fleet import WorkerProcess, cpu_seconds, dev_server, fleet_settings, fleetctl_worker, seed_fleet
from bench.harness import CannotMeasure
from bench.throughput import CLIENT_CONCURRENCY, DONE_STATES, NODES_PER_RACK, TIMEOUT_S, _admit_all

WORKER_COUNTS = (1, 2, 3)
NODES = 100
NODES_FULL = 300


def postgres_cpu_seconds(datadir: Path) -> float:
    """CPU time of this cluster's postmaster and its children (backends, background workers),
    live ones and those that have exited: a connection opened and closed between two readings
    (a pool's overflow, a CLI command) is counted too. Other PostgreSQL servers on the machine
    are not counted."""
    postmaster = int((datadir / "postmaster.pid").read_text().split()[0])
    total = cpu_seconds(postmaster, reaped_children=True) or 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                    total += cpu_seconds(int(entry.name)) or 0.0
            except (OSError, ValueError, IndexError):
                continue
    return total


async def admit_with(workers_count: int, nodes: int, server, db_url: str, datadir: Path, directory: Path) -> dict:
    from fleetctl.db import queries
    from fleetctl.db.engine import dispose_all, get_engine
    from fleetctl.workflows.client import connect, ensure_node_workflows

    settings = fleet_settings(db_url, server.address)
    workers: list[WorkerProcess] = []
    try:
        # On an empty database: the first to start migrates it (under the migration lock).
        workers = [
            fleetctl_worker(settings, directory / f"worker-{workers_count}-{i}.log") for i in range(workers_count)
        ]
        names = seed_fleet(settings, nodes, racks=max(1, nodes // NODES_PER_RACK), name_prefix=f"w{workers_count}-gpu")
        engine = get_engine(db_url)
        client = await connect(settings)
        wall, driver = time.monotonic(), time.process_time()
        before = {
            "workers": sum(w.cpu_seconds() or 0 for w in workers),
            "server": cpu_seconds(server.process.pid) or 0,
            "postgresql": postgres_cpu_seconds(datadir),
        }
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names], concurrency=CLIENT_CONCURRENCY)
        timeouts = await _admit_all(client, names)
        deadline = time.monotonic() + TIMEOUT_S
        while sum(queries.state_counts(engine).get(s, 0) for s in DONE_STATES) < nodes:
            if time.monotonic() > deadline:
                raise CannotMeasure(f"{workers_count} workers: not through admission after {TIMEOUT_S} s")
            await asyncio.sleep(0.25)
        seconds = time.monotonic() - wall
        after = {
            "workers": sum(w.cpu_seconds() or 0 for w in workers),
            "server": cpu_seconds(server.process.pid) or 0,
            "postgresql": postgres_cpu_seconds(datadir),
        }
        cpu = {k: round((after[k] - before[k]) / nodes, 4) for k in before}
        cpu["driver"] = round((time.process_time() - driver) / nodes, 4)
        return {
            "workers": workers_count,
            "nodes": nodes,
            "seconds": round(seconds, 2),
            "nodes_per_min": round(nodes / seconds * 60, 1),
            "cpu_s_per_node": cpu,
            "cpu_cores_busy": round(sum(cpu.values()) * nodes / seconds, 2),
            "admit_update_timeouts": timeouts,
            "end_states": queries.state_counts(engine),
            "worker_rss_mib": [w.rss_mib() for w in workers],
        }
    finally:
        for worker in workers:
            worker.stop()
        dispose_all()


async def measure(nodes: int) -> dict:
    try:
        from bench.postgres import remove_cluster, start_postgres
    except ImportError as exc:
        raise CannotMeasure(f"bench/postgres.py not importable: {exc}") from None
    try:
        cluster = start_postgres()
    except FileNotFoundError as exc:
        raise CannotMeasure(f"no PostgreSQL: {exc}") from None
    from bench.postgres import fresh_database_url

    try:
        with tempfile.TemporaryDirectory(prefix="bench-scaleout-") as tmp, dev_server(Path(tmp)) as server:
            return {
                str(n): await admit_with(n, nodes, server, fresh_database_url(cluster), cluster.datadir, Path(tmp))
                for n in WORKER_COUNTS
            }
    finally:
        remove_cluster(cluster)


def run(full: bool) -> dict:
    nodes = NODES_FULL if full else NODES
    runs = asyncio.run(measure(nodes))
    baseline = runs["1"]["nodes_per_min"]
    figures = {
        f"{n} worker(s)": {
            "nodes_per_min": r["nodes_per_min"],
            "over_1_worker": round(r["nodes_per_min"] / baseline, 2),
            "cpu_cores_busy": r["cpu_cores_busy"],
        }
        for n, r in runs.items()
    }
    return {"figures": figures, "nodes": nodes, "cpus": os.cpu_count(), "order": list(runs), "runs": runs}
