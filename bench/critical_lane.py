"""XID 79 while an active-check sweep runs, against the idle fleet: from the event to the node
out of production, and to its job running again off the node, on N simulated nodes in
production (default 1,000) with checks at zero duration (FLEETCTL_SIM_TIME_SCALE=0), one
worker process and one dev server, in one run:

- idle: nothing else runs (trials before the sweep and after it, half each; one more first,
  not counted: the worker's first XID imports what the drain and the restart need); each
  trial starts once the last one's node workflow has settled (drain, restart, maintenance);
- sweep: a quick-suite sweep at 10 % concurrency runs over the fleet's idle nodes (a new
  one starts when it ends, until the trials are done); a trial counts only if the sweep
  was running from the event to the node out of production.

The XID 79 is sent as the agent sends it: a `health_event` signal with severity critical.
Each trial's node runs a one-node job (the simulated scheduler's), so the sweep never checks
it and its drain restarts a job. Target: the sweep's p50 and p95 within 1.2x of idle.

Each trial's result says where its time went, read from the node's and the guard's histories.

Run: `python -m bench.run --only critical_lane` (`--full`: 20 trials a path; default 10),
or `python -m bench.critical_lane [--nodes N] [--trials T]` (`--help`: the deployment's
settings, and `--server-config KEY=VALUE` for a dynamic setting of the dev server)."""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path

from bench.fleet import WorkerProcess, cpu_seconds, dev_server, fleet_settings, fleetctl_worker
from bench.harness import CannotMeasure, load, machine, now_iso, ratio_interval, summary, write_result
from bench.scale import _fleetctl, _inventory, _put_in_production, _settled_history_lengths
from fleetctl.config import Settings
from fleetctl.connections.temporal_server import CRITICAL_PATH_DYNAMIC_CONFIG

NODES = 1000
TRIALS_QUICK = 10  # per path
TRIALS_FULL = 20
SWEEP_CONCURRENCY = 0.10
SUITE = "quick"
# Out of production is seen by a read of the node's state every OUT_POLL_S (one indexed column
# over a held connection: tens of microseconds, so the poll neither loads the machine nor rounds a
# 60 ms drain up to the next 20 ms); the job's restart, seconds long, is read every POLL_S.
OUT_POLL_S = 0.002
POLL_S = 0.02
TRIAL_TIMEOUT_S = 120.0
SWEEP_START_TIMEOUT_S = 300.0
TARGET_RATIO = 1.2
GC_PROBE = Path(__file__).parent / "gc_probe"


async def _until(predicate, what: str, poll_s: float = POLL_S) -> float:
    """When `predicate` (a plain or an async function) first holds, polled every `poll_s`."""
    deadline = time.monotonic() + TRIAL_TIMEOUT_S
    while True:
        held = predicate()
        if await held if inspect.isawaitable(held) else held:
            return time.time()
        if time.monotonic() > deadline:
            raise CannotMeasure(f"no {what} within {TRIAL_TIMEOUT_S:.0f} s")
        await asyncio.sleep(poll_s)


class Sweeps:
    """Sweeps one after another while the sweep path's trials run."""

    def __init__(self, client, settings):
        self.client, self.settings = client, settings
        self.handle = None
        self.runs: list[dict] = []

    def running(self) -> bool:
        return self.handle is not None and not self._task.done()

    async def ensure_running(self) -> None:
        """A sweep in full swing: its first batch has started checking nodes."""
        if self.running():
            return
        from fleetctl.workflows.api import SweepInput
        from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep

        index = len(self.runs)
        self.handle = await self.client.start_workflow(
            ActiveCheckSweep.run,
            SweepInput(suite=SUITE, max_concurrent_fraction=SWEEP_CONCURRENCY, fleet=self.settings.fleet),
            id=f"bench-sweep-{index}-{self.settings.fleet}",
            task_queue=self.settings.task_queue,
        )
        started = time.monotonic()
        run = {"sweep": index}
        self.runs.append(run)

        async def finish() -> None:
            result = await self.handle.result()
            run.update(seconds=round(time.monotonic() - started, 1), checked=result.checked, passed=result.passed)

        self._task = asyncio.ensure_future(finish())
        batch = self.client.get_workflow_handle(f"{self.handle.id}/batch-0")
        deadline = time.monotonic() + SWEEP_START_TIMEOUT_S
        while True:
            try:
                if (await batch.describe()).history_length > 20:  # its first holds and checks under way
                    return
            except Exception:  # noqa: BLE001 - not started yet
                pass
            if time.monotonic() > deadline:
                raise CannotMeasure(f"sweep {self.handle.id}: no batch under way after {SWEEP_START_TIMEOUT_S:.0f} s")
            await asyncio.sleep(0.2)

    async def wait(self) -> None:
        if self.handle is not None:
            await self._task

    async def end(self) -> None:
        """The sweep terminated (its batches with it, their backlog of checks dropped by the
        server), not waited out: the idle trials after it need only the bulk lane quiet. The
        nodes its batch held stay held, a tenth of the fleet at most, none of them a trial's."""
        if self.handle is None or self._task.done():
            return
        await self.handle.terminate("the benchmark's sweep trials are done")
        self.runs[-1]["ended"] = "terminated after the sweep trials"
        self._task.cancel()


async def _trial(client, settings, path: str, index: int, sweeps: Sweeps | None, watch) -> dict:
    from fleetctl.db.engine import get_engine
    from fleetctl.sim.scheduler import SimScheduler
    from fleetctl.workflows.api import HealthEventInput
    from fleetctl.workflows.client import send_health_events

    engine = get_engine(settings.db_url)
    scheduler = SimScheduler(engine)
    job = scheduler.submit(f"bench-{path}-{index}", 1)
    (node,) = job.nodes
    if sweeps is not None:
        await sweeps.ensure_running()
    sent = time.time()
    await send_health_events(
        client,
        node,
        [
            HealthEventInput(
                node,
                "xid",
                79,
                "GPU has fallen off the bus",
                "bench",
                f"bench-{path}-{index}",
                sent,
                severity="critical",
            )
        ],
    )

    out_at = await _until(lambda: watch(node) != "production", f"drain of {node}", OUT_POLL_S)
    during_sweep = sweeps is not None and sweeps.running()
    from fleetctl.workflows.api import guard_id, node_workflow_id

    steps = await _steps(client, node_workflow_id(node), sent, out_at)
    guard_steps = await _steps(client, guard_id(settings.fleet), sent, out_at)
    running_at = await _until(
        lambda: (j := scheduler.job(job.job_id)).state == "running" and node not in j.nodes,
        f"job {job.job_id} running off {node}",
    )
    settled_at = await _settled(client, node)
    return {
        "path": path,
        "node": node,
        "out_of_production_s": round(out_at - sent, 4),
        "running_again_s": round(running_at - sent, 4),
        "settled_s": round(settled_at - sent, 4),
        "sent_at": round(sent, 6),
        "out_at": round(out_at, 6),
        **steps,
        "guard": guard_steps,
        **({"sweep": len(sweeps.runs) - 1, "sweep_running_throughout": during_sweep} if sweeps else {}),
    }


async def _settled(client, node: str) -> float:
    """When the node's workflow is done with what the trial's XID started (its drain, the job's
    restart, the hand-over to maintenance): the next trial starts on a fleet where only what
    its path runs (nothing, or the sweep) is running."""
    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle

    handle = client.get_workflow_handle(node_workflow_id(node))

    async def idle() -> bool:
        current = await handle.query(NodeLifecycle.current)
        return not current.work and not current.activity

    return await _until(idle, f"settled workflow of {node}")


async def _steps(client, workflow_id: str, sent: float, out_at: float) -> dict:
    """Where a trial's time went, from a workflow's own history (the node's, the guard's)
    between the event and the node out of production: each activity's time from scheduled to
    completed; each workflow task's wait from scheduled to started (the server's dispatch and
    the worker's poll) and its work from started to completed (the worker's, with the local
    activities it ran: their markers carry no time of their own to read)."""
    from temporalio.api.enums.v1 import EventType

    history = await client.get_workflow_handle(workflow_id).fetch_history()
    activities: dict[int, tuple[str, float]] = {}
    took: list[tuple[str, float]] = []
    waits: list[float] = []
    work: list[float] = []
    task_scheduled: float | None = None
    task_started: float | None = None
    for event in history.events:
        at = event.event_time.ToDatetime().replace(tzinfo=UTC).timestamp()
        if not sent <= at <= out_at:
            continue
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            task_scheduled = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED and task_scheduled is not None:
            waits.append(round((at - task_scheduled) * 1000, 1))
            task_started = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and task_started is not None:
            work.append(round((at - task_started) * 1000, 1))
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            activities[event.event_id] = (event.activity_task_scheduled_event_attributes.activity_type.name, at)
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            name, scheduled = activities.get(
                event.activity_task_completed_event_attributes.scheduled_event_id, ("?", at)
            )
            took.append((name, round((at - scheduled) * 1000, 1)))
    return {"activities_ms": took, "workflow_task_waits_ms": waits, "workflow_task_work_ms": work}


def _workers(
    settings,
    directory: Path,
    split_lanes: bool,
    lanes: tuple[str, ...] = ("critical", "bulk"),
    gc_dir: Path | None = None,
) -> dict[str, WorkerProcess]:
    """One worker serving both lanes; or, split, a critical-lane process and a bulk-lane one
    (the bulk one at its lower CPU priority, worker_bulk_nice); `lanes`: those to start; with
    `gc_dir`, each records its garbage collections there (bench/gc_probe)."""
    env = {"PYTHONPATH": str(GC_PROBE), "FLEETCTL_BENCH_GC_DIR": str(gc_dir)} if gc_dir else {}
    if not split_lanes:
        return {"worker": fleetctl_worker(settings, directory / "worker.log", env)}
    started = {}
    for lane in lanes:
        settings.worker_lanes = lane
        started[f"worker_{lane}"] = fleetctl_worker(settings, directory / f"worker-{lane}.log", env)
    settings.worker_lanes = "both"
    return started


def _limit_bulk(
    workers: dict[str, WorkerProcess], settings, directory: Path, split_lanes: bool, rate: float, gc_dir: Path | None
) -> None:
    """The workers that serve the bulk lane started again with its rate limit
    (settings.bulk_activities_per_s, held by the server): the fleet was put in production
    without it, as a site adopting a fleet would before the limit matters."""
    settings.bulk_activities_per_s = rate
    serving_bulk = "worker_bulk" if split_lanes else "worker"
    workers.pop(serving_bulk).stop()
    workers.update(_workers(settings, directory, split_lanes, ("bulk",), gc_dir))


def gc_pauses(gc_dir: Path, workers: dict[str, int], samples: list[dict]) -> dict:
    """The workers' garbage collections while the trials ran (from the first counted trial's
    event to the last one's node out of production): per worker and generation, how many, their
    total and longest (ms); and per path, how many trials a collection of any worker overlapped,
    and the median and the most of the time it held each of them (ms)."""
    from statistics import median

    counted = [s for s in samples if s["path"] in ("idle", "sweep")]
    start, end = min(s["sent_at"] for s in counted), max(s["out_at"] for s in counted)
    pauses: dict[str, list[tuple[int, float, float]]] = {}
    for name, pid in workers.items():
        lines = (gc_dir / str(pid)).read_text().split() if (gc_dir / str(pid)).exists() else []
        rows = [(int(g), float(at), float(ms)) for g, at, ms in zip(lines[::3], lines[1::3], lines[2::3], strict=True)]
        pauses[name] = [row for row in rows if start <= row[1] <= end]
    by_worker = {
        name: {
            f"gen{generation}": {
                "count": len(held := [ms for g, _, ms in rows if g == generation]),
                "total_ms": round(sum(held), 1),
                "max_ms": round(max(held, default=0.0), 1),
            }
            for generation in (0, 1, 2)
        }
        for name, rows in pauses.items()
    }
    every = [row for rows in pauses.values() for row in rows]
    by_path: dict[str, dict] = {}
    for path in ("idle", "sweep"):
        overlaps = []
        for sample in (s for s in counted if s["path"] == path):
            held = sum(
                max(0.0, min(at + ms / 1000, sample["out_at"]) - max(at, sample["sent_at"])) for _, at, ms in every
            )
            if held:
                overlaps.append(held * 1000)
        by_path[path] = {
            "trials_overlapped": len(overlaps),
            "overlap_ms_p50": round(median(overlaps), 1) if overlaps else 0.0,
            "overlap_ms_max": round(max(overlaps, default=0.0), 1),
        }
    return {"workers": by_worker, "trials": by_path}


@dataclass(frozen=True)
class Setup:
    """How the run is deployed: a worker process per lane or one for both; the bulk lane's
    rate (0: unlimited); the fleet database; the sweep waited out or ended after its trials."""

    split_lanes: bool = False
    bulk_rate: float = 0.0
    fleet_db: str = "sqlite"  # or "postgresql": a throwaway cluster of Debian's PostgreSQL
    end_sweep: bool = False
    server_config: tuple[tuple[str, str], ...] = ()  # the dev server's dynamic settings
    bulk_nice: int = Settings.worker_bulk_nice  # the bulk-lane process's niceness
    gc_young: int = Settings.worker_gc_young  # the workers' young generation (objects)
    gc_pauses: bool = False  # the workers record their garbage collections (bench/gc_probe)


@contextmanager
def state_watch(db_url: str) -> Iterator[Callable[[str], str]]:
    """A node's state as the fleet database has it now, read on one held connection (each read
    its own transaction: SQLite's WAL shows every commit before it)."""
    from sqlalchemy import text

    from fleetctl.db.engine import get_engine

    query = text("SELECT state FROM nodes WHERE name = :name")
    with get_engine(db_url).connect() as connection:

        def state(node: str) -> str:
            value = connection.execute(query, {"name": node}).scalar_one()
            connection.rollback()
            return value

        yield state


@contextmanager
def fleet_database(directory: Path, kind: str) -> Iterator[str]:
    if kind == "sqlite":
        yield f"sqlite:///{directory / 'fleet.db'}"
        return
    from bench.postgres import fresh_database_url, remove_cluster, start_postgres

    try:
        cluster = start_postgres()
    except FileNotFoundError as exc:
        raise CannotMeasure(f"no PostgreSQL: {exc}") from None
    try:
        yield fresh_database_url(cluster)
    finally:
        from fleetctl.db.engine import dispose_all

        dispose_all()
        remove_cluster(cluster)


async def measure(nodes: int, trials: int, directory: Path, setup: Setup) -> dict:
    from fleetctl.workflows.api import node_workflow_id
    from fleetctl.workflows.client import connect

    (directory / "runbooks").mkdir()  # no runbook: remediation is not this subject
    with (
        dev_server(directory, dict(setup.server_config)) as server,
        fleet_database(directory, setup.fleet_db) as db_url,
    ):
        settings = fleet_settings(db_url, server.address)
        split_lanes, bulk_rate = setup.split_lanes, setup.bulk_rate
        settings.sim_time_scale = 0.0
        settings.worker_bulk_nice = setup.bulk_nice
        settings.worker_gc_young = setup.gc_young
        gc_dir = directory / "gc" if setup.gc_pauses else None
        if gc_dir:
            gc_dir.mkdir()
        settings.runbooks_dir = str(directory / "runbooks")
        inventory = _inventory(directory, nodes)
        _put_in_production(settings, inventory)
        workers = _workers(settings, directory, split_lanes, gc_dir=gc_dir)
        try:
            _, done = _fleetctl(settings, ["node", "import", str(inventory)])
            if done.returncode != 0:
                raise CannotMeasure(f"fleetctl node import exited {done.returncode}: {done.stderr.strip()[-300:]}")
            client = await connect(settings)
            names = [f"gpu-{i:0{max(3, len(str(nodes)))}d}" for i in range(1, nodes + 1)]
            await _settled_history_lengths(client, [node_workflow_id(n) for n in names[:: max(1, nodes // 20)]])
            if bulk_rate:
                _limit_bulk(workers, settings, directory, split_lanes, bulk_rate, gc_dir)
            processes: dict[str, Callable[[], float | None]] = {name: w.cpu_seconds for name, w in workers.items()}
            processes["server"] = lambda: cpu_seconds(server.process.pid) or 0.0
            cpu: dict[str, dict[str, float]] = {}
            samples: list[dict] = []

            async def phase(name: str, count: int, sweeps: Sweeps | None) -> None:
                before, started = {k: f() or 0.0 for k, f in processes.items()}, time.monotonic()
                done = 0
                while done < count:
                    sample = await _trial(client, settings, name, len(samples), sweeps, watch)
                    samples.append(sample)
                    done += sweeps is None or sample["sweep_running_throughout"]
                wall = time.monotonic() - started
                spent = cpu.setdefault(name, {"wall_s": 0.0, **dict.fromkeys(processes, 0.0)})
                spent["wall_s"] = round(spent["wall_s"] + wall, 1)
                for k, f in processes.items():
                    spent[k] = round(spent[k] + (f() or 0.0) - before[k], 1)

            with state_watch(settings.db_url) as watch:
                samples.append(await _trial(client, settings, "warm-up", 0, None, watch))
                await phase("idle", trials - trials // 2, None)
                sweeps = Sweeps(client, settings)
                await phase("sweep", trials, sweeps)
                await (sweeps.end() if setup.end_sweep else sweeps.wait())
                await phase("idle", trials // 2, None)
            rss = {name: worker.rss_mib() for name, worker in workers.items()}
        finally:
            for worker in workers.values():
                worker.stop()
        pauses = {"gc_pauses": gc_pauses(gc_dir, {n: w.pid for n, w in workers.items()}, samples)} if gc_dir else {}
    return {"samples": samples, "sweeps": sweeps.runs, "cpu_s": cpu, "rss_mib_after": rss, **pauses}


def where_the_time_goes(samples: list[dict]) -> dict:
    """Per path, for the node's workflow and the guard's: the median of each activity's time
    and of a trial's summed workflow-task waits and work (milliseconds, event to out of
    production)."""
    paths: dict = {}
    for path in ("idle", "sweep"):
        counted = [s for s in samples if s["path"] == path and s.get("sweep_running_throughout", True)]
        paths[path] = {**_medians(counted), "guard": _medians([s["guard"] for s in counted])}
    return paths


def _medians(steps: list[dict]) -> dict:
    from statistics import median

    if not steps:
        return {}
    by_activity: dict[str, list[float]] = {}
    for step in steps:
        for name, ms in step["activities_ms"]:
            by_activity.setdefault(name, []).append(ms)
    return {
        **{
            key: round(median(sum(s[key]) for s in steps), 1)
            for key in ("workflow_task_waits_ms", "workflow_task_work_ms")
        },
        **{name: round(median(times), 1) for name, times in by_activity.items()},
    }


def figures_of(samples: list[dict]) -> dict:
    figures: dict = {"where_the_time_goes_ms": where_the_time_goes(samples)}
    for metric in ("out_of_production_s", "running_again_s"):
        idle_s = [s[metric] for s in samples if s["path"] == "idle"]
        sweep_s = [s[metric] for s in samples if s["path"] == "sweep" and s["sweep_running_throughout"]]
        idle, sweep = summary(idle_s), summary(sweep_s)
        figures[metric] = {
            "idle": idle,
            "sweep": sweep,
            "p50_ratio": round(sweep["p50"] / idle["p50"], 2),
            "p95_ratio": round(sweep["p95"] / idle["p95"], 2),
            # How far chance alone moves each ratio with this many trials: runs of one
            # configuration measured 1.13 to 1.38 (BENCHMARKS.md).
            "p50_ratio_90ci": ratio_interval(sweep_s, idle_s, 50),
            "p95_ratio_90ci": ratio_interval(sweep_s, idle_s, 95),
        }
    return figures


def run(full: bool, nodes: int = NODES, trials: int | None = None, setup: Setup = Setup()) -> dict:
    trials = trials or (TRIALS_FULL if full else TRIALS_QUICK)
    with tempfile.TemporaryDirectory(prefix="bench-critical-lane-") as tmp:
        measured = asyncio.run(measure(nodes, trials, Path(tmp), setup))
    return {
        "figures": {
            "nodes": nodes,
            "trials_per_path": trials,
            "sweep_concurrency": SWEEP_CONCURRENCY,
            "target_ratio": TARGET_RATIO,
            "workers": "a critical-lane and a bulk-lane process" if setup.split_lanes else "one process, both lanes",
            "bulk_activities_per_s": setup.bulk_rate or "unlimited",
            "worker_bulk_nice": setup.bulk_nice,
            "worker_gc_young": setup.gc_young,
            "fleet_db": setup.fleet_db,
            "sweep_after_trials": "terminated" if setup.end_sweep else "waited out",
            "temporal_dynamic_config": {**CRITICAL_PATH_DYNAMIC_CONFIG, **dict(setup.server_config)},
            **figures_of(measured["samples"]),
        },
        **measured,
    }


def _dynamic_setting(text: str) -> tuple[str, str]:
    """`--server-config`'s KEY=VALUE, refused in one line (argparse) without a key or an `=`."""
    key, sep, value = text.partition("=")
    if not key or not sep:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.critical_lane", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--nodes", type=int, default=NODES)
    parser.add_argument("--trials", type=int, default=TRIALS_QUICK, help="per path")
    parser.add_argument("--name", default="critical_lane", help="result file bench/results/NAME.json")
    parser.add_argument(
        "--split-lanes", action="store_true", help="a worker process per lane (FLEETCTL_WORKER_LANES), bulk niced"
    )
    parser.add_argument(
        "--bulk-rate",
        type=float,
        default=0.0,
        help="bulk activities a second for the trials (FLEETCTL_BULK_ACTIVITIES_PER_S); 0: unlimited",
    )
    parser.add_argument(
        "--bulk-nice",
        type=int,
        choices=range(20),
        default=Setup.bulk_nice,
        metavar="0-19",
        help="the bulk-lane process's niceness",
    )
    parser.add_argument(
        "--gc-young",
        type=int,
        default=Setup.gc_young,
        metavar="N",
        help="the workers' young generation (FLEETCTL_WORKER_GC_YOUNG; CPython's own: 700)",
    )
    parser.add_argument(
        "--gc-pauses", action="store_true", help="record the workers' garbage collections (bench/gc_probe)"
    )
    parser.add_argument("--fleet-db", choices=("sqlite", "postgresql"), default="sqlite", help="the fleet database")
    parser.add_argument(
        "--end-sweep", action="store_true", help="terminate the sweep after its trials instead of waiting it out"
    )
    parser.add_argument(
        "--server-config",
        action="append",
        type=_dynamic_setting,
        default=[],
        metavar="KEY=VALUE",
        help="a dynamic setting of the dev server (value as JSON); repeatable",
    )
    args = parser.parse_args(argv)
    started_at, load_before, started = now_iso(), load(), time.monotonic()
    setup = Setup(
        args.split_lanes,
        args.bulk_rate,
        args.fleet_db,
        args.end_sweep,
        tuple(args.server_config),
        args.bulk_nice,
        args.gc_young,
        args.gc_pauses,
    )
    measured = run(False, args.nodes, args.trials, setup)
    result = {
        "benchmark": "critical_lane",
        "date": started_at,
        "wall_s": round(time.monotonic() - started, 1),
        "load_before": load_before,
        "load_after": load(),
        "machine": machine(),
        **measured,
    }
    path = write_result(args.name, result)
    print(json.dumps(measured["figures"], indent=1))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
