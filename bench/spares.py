"""Hot spares on the real 4-node Slurm test cluster: `fleetctl node event NODE --xid 79` under
a 2-node job -> the job's script running again, when the job's island holds a spare (the
restart takes it out of the reservation fleetctl-spares-<island> and names it) against the
same restart without one (the restart names a free node of the island, as before spares), the
two alternated in the same run on the same cluster and worker.

Every node is in one island. What a spare saves on an idle test cluster is little: a free
node is there either way. Its worth is on a full fleet, where without one the job waits for
a node to free up; that wait has no bound to measure, so this measures the path itself."""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from bench.fleet import dev_server, fleet_settings, fleetctl_worker
from bench.harness import CannotMeasure, summary
from bench.reaction import POLL_S, TRIAL_TIMEOUT_S, _back_in_production, _fleetctl_trial, _slurm

TRIALS_QUICK = 3  # per path
TRIALS_FULL = 20
ISLAND = "ib-a"
# (path, the job's nodes, spares held), taken in turn. A 1-node job moved onto a spare runs
# on no node that ran it: Slurm releases it without waiting out the credential-revoke second.
PATHS = (("spare_2_nodes", 2, 1), ("no_spare_2_nodes", 2, 0), ("spare_1_node", 1, 1), ("no_spare_1_node", 1, 0))


def _register_nodes(settings, names: tuple[str, ...]) -> None:
    import yaml

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.inventory.parse import parse_inventory

    entries = [
        {
            "name": n,
            "address": f"sim://{n}",
            "rack": "rack-01",
            "profile": "h100-sxm",
            "scheduler": "slurm",
            "island": ISLAND,
        }
        for n in names
    ]
    queries.upsert_nodes(get_engine(settings.db_url), parse_inventory(yaml.safe_dump({"nodes": entries})))


def _set_pool(cluster, settings, spares: int) -> tuple[str, ...]:
    """The island holds `spares` idle production nodes (0: none); the pool."""
    from fleetctl.db import spares as store
    from fleetctl.db.engine import get_engine
    from fleetctl.jobs import spares_sync

    engine = get_engine(settings.db_url)
    scheduler = cluster.scheduler()
    if spares == 0:
        scheduler.set_spares(ISLAND, [])
        store.record_pool(engine, ISLAND, [])
        return ()
    result = spares_sync.fill(engine, spares, lambda kind: scheduler)
    if result.errors:
        raise CannotMeasure(f"spares not held: {result.errors}")
    return tuple(sorted(store.held(engine)))


def _restart_record(settings, job_id: str):
    from fleetctl.db import jobs
    from fleetctl.db.engine import get_engine

    # The job's script runs before the restart's own poll sees it run and records the outcome.
    deadline = time.monotonic() + TRIAL_TIMEOUT_S
    while time.monotonic() < deadline:
        restarts = [r for r in jobs.job_restarts(get_engine(settings.db_url), job_id) if r.status == "succeeded"]
        if restarts:
            return restarts[-1]
        time.sleep(POLL_S)
    raise CannotMeasure(f"job {job_id}: no succeeded restart recorded {TRIAL_TIMEOUT_S:.0f} s after it ran again")


async def _trials(cluster, directory: Path, trials: int) -> dict[str, list[dict]]:
    from fleetctl.workflows.client import connect

    with dev_server(directory) as server:
        settings = fleet_settings(f"sqlite:///{directory / 'fleet.db'}", server.address)
        settings.slurm_conf = str(cluster.conf_path)
        settings.remediation_shadow = True  # remediation is not this subject
        settings.spares_per_island = 1  # the worker refills the pool once a restart took its spare
        _register_nodes(settings, cluster.node_names)
        client = await connect(settings)
        for node in cluster.node_names:
            await _back_in_production(client, settings, node)
        worker = fleetctl_worker(settings, directory / "worker.log")
        samples: dict[str, list[dict]] = {path: [] for path, _, _ in PATHS}
        try:
            for i in range(len(PATHS) * trials):
                path, job_nodes, spares = PATHS[i % len(PATHS)]
                pool = _set_pool(cluster, settings, spares)
                sample = _fleetctl_trial(cluster, settings, job_nodes)
                restart = _restart_record(settings, sample["job"])
                if spares and restart.spares_taken != list(pool):
                    raise CannotMeasure(f"job {sample['job']}: took {restart.spares_taken}, not the spare {pool}")
                if not spares and restart.spares_taken:
                    raise CannotMeasure(f"job {sample['job']}: took spares {restart.spares_taken} with none held")
                samples[path].append(
                    {
                        **sample,
                        "pool": list(pool),
                        "placement": restart.placement,
                        "placed_on": restart.placed_on,
                        "new_nodes": restart.new_nodes,
                    }
                )
                _set_pool(cluster, settings, 0)  # the worker refilled it; reset() waits for every node idle
                cluster.reset()
                await _back_in_production(client, settings, sample["bad_node"])
            return samples
        finally:
            worker.stop()
            cluster.scheduler().set_spares(ISLAND, [])


def run(full: bool) -> dict:
    slurm = _slurm()
    trials = TRIALS_FULL if full else TRIALS_QUICK
    with tempfile.TemporaryDirectory(prefix="bench-spares-") as tmp:
        cluster = slurm.start_slurm_cluster(Path(tmp) / "slurm")
        try:
            samples = asyncio.run(_trials(cluster, Path(tmp), trials))
        finally:
            cluster.stop()
    keys = ("command_exit_s", "drained_s", "running_again_s", "event_to_drained_s", "event_to_running_again_s")
    series = {path: {key: summary([s[key] for s in runs], 3) for key in keys} for path, runs in samples.items()}
    figures = {}
    for size in ("2_nodes", "1_node"):
        spare, plain = (series[f"{p}_{size}"]["event_to_running_again_s"] for p in ("spare", "no_spare"))
        job = size.replace("_", "-")
        figures[f"{job} job, XID 79 -> running again on the island's spare, from the event (p50/p95 s)"] = _pair(spare)
        figures[f"{job} job, same without a spare (a free island node named), from the event (p50/p95 s)"] = _pair(
            plain
        )
        figures[f"{job} job, spare / no spare (p50)"] = round(spare["p50"] / plain["p50"], 2)
    figures["trials per path (the four alternated)"] = trials
    return {
        "figures": figures,
        "cluster": {"nodes": 4, "island": ISLAND, "spares_per_island": 1},
        "series": series,
        "trials": samples,
    }


def _pair(stats: dict) -> str:
    return f"{stats['p50']:.2f} / {stats['p95']:.2f}"
