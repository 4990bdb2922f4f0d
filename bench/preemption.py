"""XID 79 while the node's workflow is busy, against the idle node: from the
event to the node taken out on it, and to its job running again off the node, on a
simulated fleet, the paths alternated on one worker and dev server:

- idle: a production node running a job, its workflow idle (the baseline);
- drain_wait: an operator's drain of that node waits for its job (2 h in a fleet);
- recheck: the node runs a recheck's HPL (minutes: the simulator at 8x the real tools' time);
- burn_in: a new node runs burn-in's HPL (no job: to the phase failed on the event).

"Taken out" is the transition the XID causes: the drain (idle, recheck), the drain's end
(drain_wait: it was draining already) or the failed phase (burn_in). Target: each busy path
within 1.2x of the idle figure. Before critical events pre-empted, drain_wait took the
drain's whole wait (2 h) and recheck/burn_in HPL's whole run."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench.fleet import dev_server, fleet_settings, fleetctl_worker, seed_fleet
from bench.harness import CannotMeasure, summary

TRIALS_QUICK = 5  # per path
TRIALS_FULL = 20
PATHS = ("idle", "drain_wait", "recheck", "burn_in")
LONG_SUITE = "long-hpl"
POLL_S = 0.02
TRIAL_TIMEOUT_S = 120.0
TARGET_RATIO = 1.2


async def _until(predicate, what: str) -> float:
    deadline = time.monotonic() + TRIAL_TIMEOUT_S
    while True:
        value = predicate()
        if asyncio.iscoroutine(value):
            value = await value
        if value:
            return time.time()
        if time.monotonic() > deadline:
            raise CannotMeasure(f"no {what} within {TRIAL_TIMEOUT_S:.0f} s")
        await asyncio.sleep(POLL_S)


async def _trial(client, settings, path: str, index: int) -> dict:
    from temporalio.common import WorkflowIDConflictPolicy

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.durations import as_utc
    from fleetctl.nodes.scheduler_sync import hold_new_nodes
    from fleetctl.sim.scheduler import SimScheduler
    from fleetctl.workflows.api import HealthEventInput, NodeLifecycleState, node_workflow_id
    from fleetctl.workflows.client import ensure_node_workflows, request_phase, request_transition, send_health_events
    from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle

    engine = get_engine(settings.db_url)
    names = seed_fleet(settings, 2, 2, name_prefix=f"{path.replace('_', '')}{index}")

    async def activity(node: str) -> str:
        return (await client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)).activity

    async def busy(node: str, prefix: str) -> bool:
        return (await activity(node)).startswith(prefix)

    async def idle(node: str) -> bool:
        return await activity(node) == ""

    job = None
    if path == "burn_in":
        node = names[0]
        # Held as `node import` holds new nodes: the simulated scheduler, as Slurm, fills any
        # node it has not drained, and a later trial's job must not land on these.
        hold_new_nodes([(n, "sim") for n in names], {"sim": SimScheduler(engine)})
        await ensure_node_workflows(client, settings, [(node, "new", 0)])
        await request_phase(client, node, "admit", "bench", LONG_SUITE)
        await _until(lambda: busy(node, "burn_in: hpl"), "burn-in's HPL")
    else:
        for n in names:
            await client.start_workflow(
                NodeLifecycle.run,
                NodeLifecycleState(node=n),
                id=node_workflow_id(n),
                task_queue=settings.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
            for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
                await request_transition(client, n, trigger, "bench", actor_kind="automation")
        await _until(lambda: all(queries.get_node(engine, n).state == "production" for n in names), "production")
        for n in names:  # back in its scheduler (the workflow's own step after production)
            await _until(lambda n=n: idle(n), f"{n} idle")
        if path == "recheck":
            # A recheck runs on an idle node, held in its scheduler (one running a job is
            # skipped): there is no job to run again.
            node = names[0]
            await request_phase(client, node, "recheck", "bench", LONG_SUITE)
            await _until(lambda: busy(node, "recheck: hpl"), "the recheck's HPL")
        else:
            job = SimScheduler(engine).submit(f"bench-{path}-{index}", 1)
            (node,) = job.nodes
        if path == "drain_wait":
            await request_transition(client, node, "drain", "bench@desk", cause="PDU maintenance")
            await _until(lambda: busy(node, "draining: jobs"), "the drain's wait for the job")
    out_trigger = {"idle": "drain", "recheck": "drain", "drain_wait": "drain_complete", "burn_in": "phase_failed"}[path]
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

    def taken_out() -> bool:
        return any(
            e.trigger == out_trigger and as_utc(e.at).timestamp() >= sent - 1 for e in queries.node_events(engine, node)
        )

    out_at = await _until(taken_out, f"{out_trigger} of {node}")
    sample = {"path": path, "node": node, "taken_out_s": out_at - sent}
    if job is not None:
        scheduler = SimScheduler(engine)
        running_at = await _until(
            lambda: (j := scheduler.job(job.job_id)).state == "running" and node not in j.nodes,
            f"job {job.job_id} running off {node}",
        )
        sample["running_again_s"] = running_at - sent
    return sample


async def _trials(directory: Path, trials: int) -> list[dict]:
    from fleetctl.workflows.client import connect

    suites = directory / "suites"
    suites.mkdir()
    (suites / f"{LONG_SUITE}.yaml").write_text(f"name: {LONG_SUITE}\ndescription: HPL alone\nchecks: [hpl]\n")
    (directory / "runbooks").mkdir()  # no runbook: remediation is not this subject
    with dev_server(directory) as server:
        settings = fleet_settings(f"sqlite:///{directory / 'fleet.db'}", server.address)
        settings.suites_dir, settings.runbooks_dir, settings.sim_time_scale = (
            str(suites),
            str(directory / "runbooks"),
            8.0,
        )
        worker = fleetctl_worker(settings, directory / "worker.log")
        try:
            client = await connect(settings)
            samples = []
            for index in range(trials):
                for path in PATHS:
                    samples.append(await _trial(client, settings, path, index))
            return samples
        finally:
            worker.stop()


def run(full: bool) -> dict:
    trials = TRIALS_FULL if full else TRIALS_QUICK
    with tempfile.TemporaryDirectory(prefix="bench-preemption-") as tmp:
        samples = asyncio.run(_trials(Path(tmp), trials))
    figures: dict = {"trials_per_path": trials, "target_ratio": TARGET_RATIO}
    for metric in ("taken_out_s", "running_again_s"):
        idle = summary([s[metric] for s in samples if s["path"] == "idle"])
        figures[metric] = {"idle": idle}
        for path in PATHS[1:]:
            values = [s[metric] for s in samples if s["path"] == path and metric in s]
            if not values:
                continue
            stats = summary(values)
            figures[metric][path] = {
                **stats,
                "p50_ratio_to_idle": round(stats["p50"] / idle["p50"], 2),
                "p95_ratio_to_idle": round(stats["p95"] / idle["p95"], 2),
            }
    return {"figures": figures, "samples": samples}


if __name__ == "__main__":
    import json

    print(json.dumps(run(False)["figures"], indent=1))
