"""Reaction latency on the real 4-node Slurm test cluster: from `fleetctl node event NODE
--xid 79` to the node drained in Slurm and to the job running again, p50/p95 over 20
trials; next to it, in the same run and on the same cluster, the restart done the plain
Slurm way (drain, `scontrol requeue`, Slurm starts the job when its requeue hold ends) and
fleetctl's scheduler call alone (drain, requeue and release, no Temporal).

Each trial: a 2-node `sleep` job runs; its first node gets the XID. "Running again" is the
job's batch script starting its next run (it logs a line), not Slurm's state flag. The
timed path is the whole product: CLI start, signal, the node's workflow (health verdict,
capacity guard, drain transition, cordon), the JobRestart workflow and Slurm."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import tempfile
import time
from datetime import UTC
from pathlib import Path

from bench.fleet import dev_server, fleet_settings, fleetctl_worker, settings_env
from bench.harness import CannotMeasure, rounded, summary

TRIALS = 20
CALL_ONLY_TRIALS_QUICK = 10
# The plain way waits out Slurm's requeue hold (cred_expire, 120 s by default) every time,
# so the default run takes two samples of it; --full takes 20.
PLAIN_TRIALS_QUICK = 2
POLL_S = 0.02
TRIAL_TIMEOUT_S = 300.0


def _slurm():
    """The test cluster module (it lives with the tests), or CannotMeasure with why not."""
    try:
        from bench import slurm_cluster
    except ImportError as exc:
        raise CannotMeasure(f"bench/slurm_cluster.py not importable: {exc}") from None
    reason = slurm_cluster.slurm_unavailable_reason()
    if reason:
        raise CannotMeasure(f"no Slurm test cluster here: {reason}")
    return slurm_cluster


def _register_nodes(settings, names: tuple[str, ...]) -> None:
    import yaml

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.inventory.parse import parse_inventory

    entries = [
        {"name": n, "address": f"sim://{n}", "rack": "rack-01", "profile": "h100-sxm", "scheduler": "slurm"}
        for n in names
    ]
    queries.upsert_nodes(get_engine(settings.db_url), parse_inventory(yaml.safe_dump({"nodes": entries})))


async def _back_in_production(client, settings, node: str) -> None:
    """Between trials: the node as if repaired, in production in fleetctl with a fresh
    lifecycle workflow (the old one, and its remediation, are ended)."""
    from sqlalchemy import update
    from sqlmodel import Session
    from temporalio.service import RPCError

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import Node
    from fleetctl.workflows.api import node_workflow_id, remediation_id
    from fleetctl.workflows.client import ensure_node_workflows

    for workflow_id in (node_workflow_id(node), remediation_id(node)):
        try:
            await client.get_workflow_handle(workflow_id).terminate("bench: next trial")
        except RPCError:
            pass  # not running
    engine = get_engine(settings.db_url)
    with Session(engine) as session:
        session.exec(update(Node).where(Node.name == node).values(state="production"))
        session.commit()
    version = queries.get_node(engine, node).state_version
    await ensure_node_workflows(client, settings, [(node, "production", version)])


def _event_seen_at(settings, node: str) -> float:
    """When `fleetctl node event` saw the fault (the time it stamps on the event, unix)."""
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine

    at = queries.health_events(get_engine(settings.db_url), node, limit=1)[0].at
    return (at if at.tzinfo else at.replace(tzinfo=UTC)).timestamp()


def _fleetctl_trial(cluster, settings, nodes: int = 2) -> dict:
    """Times on the wall clock, from the moment the operator's command starts; polled while
    it runs, since the drain may land before the CLI process has exited."""
    scheduler = cluster.scheduler()
    job_id = cluster.submit_sleep_job(f"--nodes={nodes}", "--job-name=bench-reaction")
    bad = cluster.wait_for_run(job_id, run=0, timeout_s=TRIAL_TIMEOUT_S).nodes[0]
    output = cluster.root / "jobs" / f"{job_id}.out"
    started = time.time()
    event = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "node",
            "event",
            bad,
            "--xid",
            "79",
            "--message",
            "GPU has fallen off the bus",
        ],
        env=settings_env(settings),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    exited = drained = running = None
    while exited is None or drained is None or running is None:
        now = time.time()
        if now - started > TRIAL_TIMEOUT_S:
            event.kill()
            raise CannotMeasure(
                f"job {job_id}: not drained/running again {TRIAL_TIMEOUT_S:.0f} s after XID 79 "
                f"on {bad} (drained {drained}, running {running})\n{cluster.log_tail(5)}"
            )
        if exited is None and event.poll() is not None:
            exited, stderr = now, event.stderr.read()
            # temporalio's client threads can abort the interpreter's exit after the command
            # has done its work (sdk-python#300): counted, and the trial goes on.
            aborted_at_exit = event.returncode == -signal.SIGABRT and "PyGILState_Release" in stderr
            if event.returncode != 0 and not aborted_at_exit:
                raise CannotMeasure(f"fleetctl node event exited {event.returncode}: {stderr.strip()[-300:]}")
        if drained is None and scheduler.node_state(bad).drained:
            drained = now
        if running is None and output.exists() and "run 1 on " in output.read_text():
            running = now
        time.sleep(POLL_S)
    seen = _event_seen_at(settings, bad)
    return {
        "job": job_id,
        "bad_node": bad,
        "command_aborted_at_exit": aborted_at_exit,
        **dict(
            zip(
                ("command_exit_s", "drained_s", "running_again_s", "event_to_drained_s", "event_to_running_again_s"),
                rounded([exited - started, drained - started, running - started, drained - seen, running - seen], 3),
                strict=False,
            )
        ),
    }


async def _fleetctl_trials(cluster, directory: Path, trials: int) -> list[dict]:
    from fleetctl.workflows.client import connect

    with dev_server(directory) as server:
        settings = fleet_settings(f"sqlite:///{directory / 'fleet.db'}", server.address)
        settings.slurm_conf = str(cluster.conf_path)
        # Runbooks record what they would do and do nothing: remediation is not this subject.
        settings.remediation_shadow = True
        _register_nodes(settings, cluster.node_names)
        client = await connect(settings)
        for node in cluster.node_names:
            await _back_in_production(client, settings, node)
        worker = fleetctl_worker(settings, directory / "worker.log")
        try:
            samples = []
            for _ in range(trials):
                samples.append(_fleetctl_trial(cluster, settings))
                cluster.reset()
                await _back_in_production(client, settings, samples[-1]["bad_node"])
            return samples
        finally:
            worker.stop()


def _scheduler_trials(cluster, trials: int, with_release: bool) -> list[dict]:
    from bench.slurm_cluster import measure_restart

    samples = []
    for _ in range(trials):
        m = measure_restart(cluster, with_release=with_release, timeout_s=TRIAL_TIMEOUT_S)
        samples.append(
            {
                "job": m.job_id,
                "bad_node": m.bad_node,
                "running_again_s": round(m.seconds, 3),
                "held_for_begin_time": m.held_for_begin_time,
            }
        )
    return samples


def _series(samples: list[dict], *keys: str) -> dict:
    return {key: summary([s[key] for s in samples], 3) for key in keys}


def run(full: bool) -> dict:
    slurm = _slurm()
    call_only_trials = TRIALS if full else CALL_ONLY_TRIALS_QUICK
    plain_trials = TRIALS if full else PLAIN_TRIALS_QUICK
    with tempfile.TemporaryDirectory(prefix="bench-reaction-") as tmp:
        cluster = slurm.start_slurm_cluster(Path(tmp) / "slurm")
        try:
            fleetctl = asyncio.run(_fleetctl_trials(cluster, Path(tmp), TRIALS))
            release_only = _scheduler_trials(cluster, call_only_trials, with_release=True)
            plain = _scheduler_trials(cluster, plain_trials, with_release=False)
        finally:
            cluster.stop()
    series = {
        "fleetctl_xid79": _series(
            fleetctl, "command_exit_s", "drained_s", "running_again_s", "event_to_drained_s", "event_to_running_again_s"
        ),
        "scheduler_call_only": _series(release_only, "running_again_s"),
        "plain_slurm_requeue": _series(plain, "running_again_s"),
    }
    figures = {
        "fleetctl: XID 79 -> drained in Slurm (p50/p95 s)": _pair(series["fleetctl_xid79"]["drained_s"]),
        "fleetctl: XID 79 -> job running again (p50/p95 s)": _pair(series["fleetctl_xid79"]["running_again_s"]),
        "same, from the event's timestamp, CLI start excluded (p50/p95 s)": f"{_pair(series['fleetctl_xid79']['event_to_drained_s'])} drained, "
        f"{_pair(series['fleetctl_xid79']['event_to_running_again_s'])} running",
        "scheduler call alone: drain -> running again (p50/p95 s)": _pair(
            series["scheduler_call_only"]["running_again_s"]
        ),
        "plain Slurm requeue: drain -> running again (p50/p95 s)": _pair(
            series["plain_slurm_requeue"]["running_again_s"]
        ),
        "trials (fleetctl / call alone / plain)": f"{len(fleetctl)} / {len(release_only)} / {len(plain)}",
        "`fleetctl node event` aborted at exit (SIGABRT, sdk-python#300)": f"{sum(t['command_aborted_at_exit'] for t in fleetctl)} of {len(fleetctl)}",
    }
    return {
        "figures": figures,
        "cluster": {"nodes": 4, "cred_expire_s": "Slurm default (120)"},
        "series": series,
        "trials": {"fleetctl_xid79": fleetctl, "scheduler_call_only": release_only, "plain_slurm_requeue": plain},
    }


def _pair(stats: dict) -> str:
    return f"{stats['p50']:.2f} / {stats['p95']:.2f}"
