"""Load: a simulated fleet under steady automation for a stretch of simulated time.

What is simulated, exactly: N nodes (default 1,000) in production, each with its lifecycle
workflow, and an active-check sweep (quick suite) every SWEEP_EVERY_MIN simulated minutes
for SIM_MINUTES simulated minutes. Time is compressed: the sweeps run back to back (each
one's wall time is what it is), and the faults that would arrive between two sweeps are
injected just before each: FAULTS_PER_MIN simulated hardware faults per simulated minute,
found by the next sweep (row-remap failures, IB ports down, thermal throttling, in turn),
and XIDS_PER_MIN XID 79 events per simulated minute sent as signals (a critical drain each,
then the shipped runbooks remediate). The
capacity guard, the remediations and the node workflows are the real ones, on a real
Temporal dev server with the worker in a process of its own; checks run instantly
(FLEETCTL_SIM_TIME_SCALE=0).

Measured: every sweep completes; after the last one, every workflow settles (no node with
work queued, no remediation or job restart left running); the history length of every
node workflow and of the capacity guard (and whether they continued-as-new); the worker's
RSS sampled every few seconds throughout.

Run: `python -m bench.load [--nodes N] [--sim-minutes M]`; the result lands in
bench/results/load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

from bench.fleet import dev_server, fleet_settings, fleetctl_worker
from bench.harness import CannotMeasure, machine, now_iso, rss_mib, write_result
from bench.scale import _fleetctl, _history_lengths, _inventory, _put_in_production, sweep_history

NODES = 1000
SIM_MINUTES = 30
SWEEP_EVERY_MIN = 5
FAULTS_PER_MIN = 0.6
XIDS_PER_MIN = 0.2
SWEEP_CONCURRENCY = 0.10  # of the idle nodes checked at once (the default is 5 %)
FAULT_KINDS = ("row-remap-failure", "ib-port-down", "thermal-throttle")
RSS_EVERY_S = 2.0
SETTLE_TIMEOUT_S = 600


async def _sample_rss(pid: int, samples: list[tuple[float, float]], started: float, stop: asyncio.Event) -> None:
    while not stop.is_set():
        value = rss_mib(pid)
        if value is not None:
            samples.append((round(time.monotonic() - started, 1), value))
        try:
            await asyncio.wait_for(stop.wait(), RSS_EVERY_S)
        except TimeoutError:
            pass


async def _sweep(client, settings, index: int) -> dict:
    from fleetctl.workflows.api import SweepInput
    from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep

    started = time.monotonic()
    handle = await client.start_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent_fraction=SWEEP_CONCURRENCY, fleet=settings.fleet),
        id=f"load-sweep-{index}-{settings.fleet}",
        task_queue=settings.task_queue,
    )
    result = await handle.result()
    return {
        "sweep": index,
        "seconds": round(time.monotonic() - started, 1),
        "checked": result.checked,
        "failed": len(result.failed),
        "errors": len(result.errors),
        "drained": len(result.drained),
        "held": len(result.held),
        **await sweep_history(client, handle, result.checked),
    }


async def _inject(client, settings, rng: random.Random, index: int, faults: int, xids: int) -> list[str]:
    """This interval's faults on nodes in production now; the nodes hit."""
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.sim.store import add_fault
    from fleetctl.workflows.api import HealthEventInput
    from fleetctl.workflows.client import send_health_events

    engine = get_engine(settings.db_url)
    healthy = sorted(n.name for n in queries.list_nodes(engine, state="production"))
    hit = rng.sample(healthy, faults + xids)
    for k, name in enumerate(hit[:faults]):
        add_fault(engine, name, FAULT_KINDS[(index * faults + k) % len(FAULT_KINDS)], seed=index)
    for name in hit[faults:]:
        await send_health_events(
            client,
            name,
            [
                HealthEventInput(
                    name, "xid", 79, "GPU has fallen off the bus", "load-bench", f"load-{index}-{name}", time.time()
                )
            ],
        )
    return hit


async def _settle(client, settings, names: list[str]) -> dict:
    """Wait until no node has work queued and no remediation or job restart runs; what is
    still busy at the deadline is reported as stuck."""
    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle

    async def busy_nodes() -> list[str]:
        async def busy(name: str) -> bool:
            s = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
            return bool(s.work or s.activity)

        flags = await asyncio.gather(*(busy(n) for n in names))
        return [n for n, b in zip(names, flags, strict=False) if b]

    async def running(kind: str) -> list[str]:
        query = f"WorkflowType = '{kind}' AND ExecutionStatus = 'Running' AND TaskQueue = '{settings.task_queue}'"
        return [w.id async for w in client.list_workflows(query)]

    started = time.monotonic()
    while True:
        nodes, remediations, restarts = await busy_nodes(), await running("Remediation"), await running("JobRestart")
        if not (nodes or remediations or restarts) or time.monotonic() - started > SETTLE_TIMEOUT_S:
            return {
                "seconds": round(time.monotonic() - started, 1),
                "stuck_nodes": nodes,
                "stuck_remediations": remediations,
                "stuck_job_restarts": restarts,
            }
        await asyncio.sleep(2)


async def _histories(client, settings, names: list[str]) -> dict:
    from fleetctl.workflows.api import guard_id, node_workflow_id

    lengths = await _history_lengths(client, [node_workflow_id(n) for n in names])
    described = await asyncio.gather(*(client.get_workflow_handle(node_workflow_id(n)).describe() for n in names))
    continued = sum(1 for d in described if d.run_id != d.raw_description.workflow_execution_info.first_run_id)
    guard = await client.get_workflow_handle(guard_id(settings.fleet)).describe()
    return {
        "node_workflow_events": {
            "max": max(lengths),
            "median": statistics.median(lengths),
            "nodes_over_100": sum(1 for n in lengths if n > 100),
        },
        "node_workflows_continued_as_new": continued,
        "capacity_guard_events": guard.history_length,
    }


async def measure(nodes: int, sim_minutes: int, sweep_every_min: int, directory: Path, seed: int) -> dict:
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.workflows.client import connect

    sweeps = max(1, sim_minutes // sweep_every_min)
    faults, xids = round(FAULTS_PER_MIN * sweep_every_min), round(XIDS_PER_MIN * sweep_every_min)
    rng = random.Random(seed)
    with dev_server(directory) as server:
        settings = fleet_settings(f"sqlite:///{directory / 'fleet.db'}", server.address)
        settings.sim_time_scale = 0.0
        inventory = _inventory(directory, nodes)
        _put_in_production(settings, inventory)
        worker = fleetctl_worker(settings, directory / "worker.log")
        rss: list[tuple[float, float]] = []
        stop = asyncio.Event()
        started = time.monotonic()
        sampler = asyncio.create_task(_sample_rss(worker.pid, rss, started, stop))
        try:
            _, done = _fleetctl(settings, ["node", "import", str(inventory)])
            if done.returncode != 0:
                raise CannotMeasure(f"fleetctl node import exited {done.returncode}: {done.stderr.strip()[-300:]}")
            client = await connect(settings)
            names = sorted(n.name for n in queries.list_nodes(get_engine(settings.db_url)))
            rss_after_import = worker.rss_mib()
            runs, hit = [], []
            for index in range(sweeps):
                hit += await _inject(client, settings, rng, index, faults, xids)
                runs.append(await _sweep(client, settings, index))
                runs[-1]["worker_rss_mib"] = worker.rss_mib()
            settled = await _settle(client, settings, names)
            histories = await _histories(client, settings, names)
            states = queries.list_nodes(get_engine(settings.db_url))
        finally:
            stop.set()
            await sampler
            worker.stop()
    per_state: dict[str, int] = {}
    for n in states:
        per_state[n.state] = per_state.get(n.state, 0) + 1
    values = [v for _, v in rss]
    return {
        "simulated": {
            "nodes": nodes,
            "minutes": sim_minutes,
            "sweeps": sweeps,
            "sweep_every_min": sweep_every_min,
            "faults_per_sweep": faults,
            "xid79_per_sweep": xids,
            "nodes_hit": len(set(hit)),
        },
        "wall_s": round(time.monotonic() - started, 1),
        "sweeps": runs,
        "settle": settled,
        "history": histories,
        "final_states": per_state,
        "worker_rss_mib": {
            "after_import": rss_after_import,
            "first_sweep": runs[0]["worker_rss_mib"],
            "last_sweep": runs[-1]["worker_rss_mib"],
            "min": min(values),
            "max": max(values),
            "samples": len(values),
            "series": rss,
        },
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--sim-minutes", type=int, default=SIM_MINUTES)
    parser.add_argument("--sweep-every-min", type=int, default=SWEEP_EVERY_MIN)
    parser.add_argument("--seed", type=int, default=9)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"bench-load-{args.nodes}-") as tmp:
        measured = asyncio.run(measure(args.nodes, args.sim_minutes, args.sweep_every_min, Path(tmp), args.seed))
    path = write_result("load", {"machine": machine(), "at": now_iso(), **measured})
    summary = {k: v for k, v in measured.items() if k not in ("worker_rss_mib",)}
    print({**summary, "worker_rss_mib": {k: v for k, v in measured["worker_rss_mib"].items() if k != "series"}})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
