"""Scale: N nodes imported (default 1,000; --full 10,000), each with its lifecycle workflow
alive in production, then one active-check sweep (quick suite) over all of them: worker
RSS, server and fleet database sizes, history events per node per day, and how long
`fleetctl node list -o json`, `fleetctl fleet status` and `fleetctl report` take at that size.

Shortcut, stated in the results: the nodes are put in production by writing their state to
the fleet database before `fleetctl node import`, which then starts each node's workflow in
production; driving N nodes through burn-in is the throughput benchmark's subject."""

from __future__ import annotations

import asyncio
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.fleet import cpu_seconds, dev_server, fleet_settings, fleetctl_worker, settings_env
from bench.harness import CannotMeasure, load, rounded, rss_mib

NODES = 1000
NODES_FULL = 10000
NODES_PER_RACK = 32
SUITE = "quick"
SWEEPS_PER_DAY = 24  # `fleetctl schedule create active-checks --every 1h`
CLI_RUNS = 3
SAMPLED_NODE_HISTORIES = 20
SWEEP_TIMEOUT_S = 3 * 3600
CLI_COMMANDS = {
    "node list -o json": ["node", "list", "-o", "json"],
    "fleet status": ["fleet", "status"],
    "report": ["report"],
}


def _file_mib(*paths: Path) -> float:
    return round(sum(p.stat().st_size for p in paths if p.exists()) / 2**20, 1)


def _sqlite_mib(db: Path) -> float:
    """The database with its WAL and shared-memory files: what it takes on disk."""
    return _file_mib(db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"))


def _inventory(directory: Path, nodes: int) -> Path:
    import yaml

    from fleetctl.sim.inventory import render_inventory

    path = directory / "inventory.yaml"
    path.write_text(
        yaml.safe_dump({"nodes": render_inventory(nodes, max(1, nodes // NODES_PER_RACK), "h100-sxm", seed=1)})
    )
    return path


def _put_in_production(settings, inventory: Path) -> None:
    from sqlalchemy import update
    from sqlmodel import Session

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import Node
    from fleetctl.inventory.parse import load_inventory

    engine = get_engine(settings.db_url)
    queries.upsert_nodes(engine, load_inventory(inventory))
    with Session(engine) as session:
        session.exec(update(Node).values(state="production"))
        session.commit()


def _fleetctl(settings, args: list[str], timeout_s: float = 1800) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "fleetctl.cli.main", *args],
        env=settings_env(settings),
        capture_output=True,
        text=True,
        timeout=timeout_s,
    )
    return time.perf_counter() - started, done


def _cli_timings(settings) -> dict:
    timings = {}
    for name, args in CLI_COMMANDS.items():
        samples = []
        for _ in range(CLI_RUNS):
            seconds, done = _fleetctl(settings, args)
            if done.returncode != 0:
                samples = None
                timings[name] = {"error": f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-200:]}"}
                break
            samples.append(seconds)
        if samples:
            timings[name] = {
                "seconds": rounded(samples),
                "median_s": round(statistics.median(samples), 3),
                "output_bytes": len(done.stdout),
            }
    return timings


async def _history_lengths(client, workflow_ids: list[str]) -> list[int]:
    async def length(workflow_id: str) -> int:
        return len([e async for e in client.get_workflow_handle(workflow_id).fetch_history_events()])

    return list(await asyncio.gather(*(length(w) for w in workflow_ids)))


async def _settled_history_lengths(client, workflow_ids: list[str], timeout_s: float = 1800) -> list[int]:
    """History lengths once every workflow has finished its first task (started, scheduled,
    started, completed: 4 events), so the sweep is not measured against start-up work."""
    deadline = time.monotonic() + timeout_s
    while min(lengths := await _history_lengths(client, workflow_ids)) < 4:
        if time.monotonic() > deadline:
            raise CannotMeasure(f"node workflows not settled after {timeout_s} s: {lengths}")
        await asyncio.sleep(1)
    return lengths


async def _sweep(client, settings) -> dict:
    from temporalio.client import WorkflowFailureError

    from fleetctl.workflows.api import SweepInput, SweepResult
    from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep

    handle = await client.start_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite=SUITE, fleet=settings.fleet),
        id=f"bench-sweep-{settings.fleet}",
        task_queue=settings.task_queue,
    )
    started = time.monotonic()
    try:
        result: SweepResult = await asyncio.wait_for(handle.result(), SWEEP_TIMEOUT_S)
        outcome = {
            "status": "completed",
            "checked": result.checked,
            "passed": result.passed,
            "failed": len(result.failed),
            "errors": len(result.errors),
        }
    except WorkflowFailureError as exc:
        # e.g. the sweep's own history outgrowing Temporal's limit: a finding, not a crash.
        outcome = {"status": "failed", "reason": str(exc.cause or exc)[:300]}
    outcome["seconds"] = round(time.monotonic() - started, 1)
    return {**outcome, **await sweep_history(client, handle, outcome.get("checked", 0))}


async def sweep_history(client, handle, checked: int) -> dict:
    """History events of a sweep: its own and its batches' (ActiveCheckBatch children, one
    per `batch_nodes` nodes), where a node's checks are recorded."""
    from fleetctl.workflows.api import SweepInput

    parent = (await handle.describe()).history_length
    batches = math.ceil(checked / SweepInput().batch_nodes)
    batch_events = await _history_lengths(client, [f"{handle.id}/batch-{i}" for i in range(batches)])
    return {
        "history_events": parent + sum(batch_events),
        "history_events_parent": parent,
        "history_events_largest_batch": max(batch_events, default=0),
    }


@dataclass
class FleetDatabase:
    """Where the fleet database lives, what it takes on disk, and the CPU its own processes
    have used (None: it runs inside the worker, as SQLite does)."""

    url: str
    mib: Callable[[], float]
    cpu_seconds: Callable[[], float] | None = None


def sqlite_database(directory: Path) -> FleetDatabase:
    return FleetDatabase(f"sqlite:///{directory / 'fleet.db'}", lambda: _sqlite_mib(directory / "fleet.db"))


async def measure(nodes: int, directory: Path, database: FleetDatabase | None = None) -> dict:
    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.client import connect

    database = database or sqlite_database(directory)
    with dev_server(directory) as server:
        settings = fleet_settings(database.url, server.address)
        inventory = _inventory(directory, nodes)
        _put_in_production(settings, inventory)
        worker = fleetctl_worker(settings, directory / "worker.log")
        try:
            import_s, done = _fleetctl(settings, ["node", "import", str(inventory)])
            if done.returncode != 0:
                raise CannotMeasure(f"fleetctl node import exited {done.returncode}: {done.stderr.strip()[-300:]}")
            client = await connect(settings)
            names = [f"gpu-{i:0{max(3, len(str(nodes)))}d}" for i in range(1, nodes + 1)]
            # Spread over the fleet, and the last one started: its first task runs last.
            sampled = [node_workflow_id(n) for n in names[:: max(1, nodes // SAMPLED_NODE_HISTORIES)] + names[-1:]]
            node_events_before = await _settled_history_lengths(client, sampled)
            rss_idle = worker.rss_mib()
            processes = {"worker": worker.cpu_seconds, "server": lambda: cpu_seconds(server.process.pid) or 0.0}
            if database.cpu_seconds:
                processes["database"] = database.cpu_seconds
            cpu_before, load_before = {k: f() or 0.0 for k, f in processes.items()}, load()
            sweep = await _sweep(client, settings)
            sweep["cpu_s"] = {k: round((f() or 0.0) - cpu_before[k], 1) for k, f in processes.items()}
            sweep["load_before"], sweep["load_after"] = load_before, load()
            node_events_after = await _history_lengths(client, sampled)
            rss_after_sweep, rss_peak = worker.rss_mib(), rss_mib(worker.pid, peak=True)
            cli = _cli_timings(settings)
        finally:
            worker.stop()
        temporal_db_mib = _sqlite_mib(directory / "temporal.db")
    node_growth = statistics.fmean(a - b for a, b in zip(node_events_after, node_events_before, strict=False))
    sweep_events_per_node = sweep["history_events"] / nodes
    return {
        "nodes": nodes,
        "import_s": round(import_s, 1),
        "sweep": sweep,
        "worker_rss_mib": {"idle_in_production": rss_idle, "after_sweep": rss_after_sweep, "peak": rss_peak},
        "temporal_db_mib": temporal_db_mib,
        "fleet_db_mib": database.mib(),
        "history": {
            "node_workflow_events_sampled": {"before_sweep": node_events_before, "after_sweep": node_events_after},
            "node_workflow_events_per_sweep": round(node_growth, 2),
            "sweep_events_per_node": round(sweep_events_per_node, 2),
            "sweeps_per_day": SWEEPS_PER_DAY,
            "events_per_node_per_day": round(SWEEPS_PER_DAY * (node_growth + sweep_events_per_node), 1),
        },
        "cli": cli,
    }


def run(full: bool) -> dict:
    nodes = NODES_FULL if full else NODES
    with tempfile.TemporaryDirectory(prefix=f"bench-scale-{nodes}-") as tmp:
        measured = asyncio.run(measure(nodes, Path(tmp)))
    figures = {
        "nodes": nodes,
        "import_s": measured["import_s"],
        "sweep": f"{measured['sweep']['status']} in {measured['sweep']['seconds']} s",
        "worker_rss_mib_peak": measured["worker_rss_mib"]["peak"],
        "temporal_db_mib": measured["temporal_db_mib"],
        "fleet_db_mib": measured["fleet_db_mib"],
        "history_events_per_node_per_day": measured["history"]["events_per_node_per_day"],
        **{f"cli {name} median_s": t.get("median_s", t.get("error")) for name, t in measured["cli"].items()},
    }
    return {
        "figures": figures,
        "suite": SUITE,
        "shortcut": "nodes set to production in the fleet database before `fleetctl node import`; no burn-in",
        **measured,
    }
