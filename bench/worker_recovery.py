"""Worker recovery: `fleetctl worker` SIGKILLed mid job restart -> the job running again,
next to the same restart without a kill, in the same run on the same dev server.

Each trial, on a fresh fleet database and task queue: three simulated nodes in production
and a 2-node job on the first two (simulated scheduler); XID 79 on the first. Its workflow
drains it and starts the JobRestart, which drains it in the scheduler and requeues the job
onto the other two. The clock starts when the restart has begun (its row is recorded, the
requeue not yet). With a kill the worker process is SIGKILLed at that moment and started
again at once, as a supervisor would; without one nothing happens. Timed: until the job runs
off the bad node in the scheduler's tables. Each kill records where it landed (the
activities in flight and the timeouts they were given, bench/recovery.py) and, read
back from the histories once the job runs again, what the workflows waited on before it did
(the timeouts that fired, the workflow tasks left on the dead worker's sticky queue): what a
dead worker costs is those timeouts, which is what the ratio shows.
"""

from __future__ import annotations

import asyncio
import os
import signal
import tempfile
import time
import uuid
from pathlib import Path

from bench.fleet import dev_server, fleet_settings, fleetctl_worker, seed_fleet
from bench.harness import CannotMeasure, rounded, summary

TRIALS = 3
TRIALS_FULL = 10
POLL_S = 0.01
TRIAL_TIMEOUT_S = 600.0  # past any timeout the workflows configure today: a hang is "could not measure"
TO_PRODUCTION = ("begin_burn_in", "begin_admission", "enter_production")


async def _until(predicate, what: str, since: float) -> float:
    """Seconds from `since` until predicate() holds, polled every POLL_S."""
    while not predicate():
        if time.monotonic() - since > TRIAL_TIMEOUT_S:
            raise CannotMeasure(f"{what}: not within {TRIAL_TIMEOUT_S:.0f} s")
        await asyncio.sleep(POLL_S)
    return time.monotonic() - since


async def _trial(server, directory: Path, kill: bool) -> dict:
    from bench.recovery import kill_cost, waits_after_kill
    from fleetctl.db import jobs as job_store
    from fleetctl.db.engine import get_engine
    from fleetctl.sim.scheduler import SimScheduler
    from fleetctl.workflows.api import HealthEventInput
    from fleetctl.workflows.client import connect, ensure_node_workflows, request_transition, send_health_events

    directory.mkdir()
    settings = fleet_settings(f"sqlite:///{directory / 'fleet.db'}", server.address)
    prefix = f"s{uuid.uuid4().hex[:6]}"  # the trials share one server, and node workflow ids are node names
    names = bad, peer, _spare = seed_fleet(settings, 3, racks=3, name_prefix=prefix)
    engine = get_engine(settings.db_url)
    worker = fleetctl_worker(settings, directory / "worker.log")
    try:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for name in names:
            for trigger in TO_PRODUCTION:
                await request_transition(client, name, trigger, "bench", actor_kind="automation")
        job = SimScheduler(engine).submit("train", 2)
        if job.nodes != (bad, peer):
            raise CannotMeasure(f"the job was placed on {job.nodes}, not on {(bad, peer)}")
        await send_health_events(
            client,
            bad,
            [HealthEventInput(bad, "xid", 79, "GPU has fallen off the bus", "bench", f"bench-79-{bad}", 0.0)],
        )
        await _until(lambda: bool(job_store.job_restarts(engine, job.job_id)), "the restart to begin", time.monotonic())
        started = time.monotonic()
        landed_in = None
        if kill:
            killed_at = time.time()
            os.killpg(worker.pid, signal.SIGKILL)
            worker.process.wait(10)
            requeued_before_kill = job_store.job_restarts(engine, job.job_id)[0].requeued_at is not None
            cost = await kill_cost(client, settings.task_queue)
            landed_in = {
                "activities": [str(a) for a in cost.in_flight],
                "requeued_before_kill": requeued_before_kill,
                "derived_bound_s": round(cost.seconds, 1),
            }
            worker = fleetctl_worker(settings, directory / "worker.log")

        def running_again() -> bool:
            current = job_store.get_job(engine, job.job_id)
            return current.state == "running" and bad not in current.nodes

        seconds = await _until(running_again, "the job to run again", started)
        if kill:
            landed_in["waited_on"] = [
                str(w)
                for w in await waits_after_kill(client, settings.task_queue, killed_at)
                if w.after_kill_s <= seconds
            ]
        return {"seconds": seconds, "kill": landed_in}
    finally:
        # The worker left behind by a failed start is stopped too; a killed one is gone already.
        if worker.process.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
            worker.process.wait(10)


async def _trials(directory: Path, trials: int) -> dict[str, list[dict]]:
    samples: dict[str, list[dict]] = {"without_kill": [], "with_kill": []}
    with dev_server(directory) as server:
        for i in range(trials):  # alternated, so that load drifting over the run hits both alike
            for kind in samples:
                samples[kind].append(await _trial(server, directory / f"{kind}-{i}", kill=kind == "with_kill"))
    return samples


def run(full: bool) -> dict:
    with tempfile.TemporaryDirectory(prefix="bench-worker-recovery-") as tmp:
        samples = asyncio.run(_trials(Path(tmp), TRIALS_FULL if full else TRIALS))
    seconds = {kind: [s["seconds"] for s in found] for kind, found in samples.items()}
    stats = {kind: summary(values, 3) for kind, values in seconds.items()}
    figures = {
        "without_kill_p50_s": stats["without_kill"]["p50"],
        "with_kill_p50_s": stats["with_kill"]["p50"],
        "with_over_without_p50": round(stats["with_kill"]["p50"] / stats["without_kill"]["p50"], 1),
        "with_kill_max_s": stats["with_kill"]["max"],
        "derived_bound_max_s": max(s["kill"]["derived_bound_s"] for s in samples["with_kill"]),
    }
    return {
        "figures": figures,
        "stats": stats,
        "samples": {k: rounded(v, 3) for k, v in seconds.items()},
        "kills": [s["kill"] for s in samples["with_kill"]],
        "trials": len(samples["with_kill"]),
    }
