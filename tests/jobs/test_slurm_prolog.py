"""The pre-job checks on the real Slurm cluster: fleetctl's Prolog (fleetctl/prolog/
slurm-prolog.sh) finds a fault on the node a job was allocated, drains it through fleetctl
with the check as cause, and Slurm requeues the job onto another node."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest
from sqlmodel import Session, select

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.sim.store import add_fault
from fleetctl.workflows.client import connect
from tests.support.jobs import import_slurm_nodes, slurm_gate_wrapper
from tests.support.worker import WorkerThread, start_in_production, terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

PROLOG_TIMEOUT_S = 120  # the shipped default FLEETCTL_PROLOG_TIMEOUT_S: the most one prolog may take
# How long Slurm may hold a requeued job back: its credential lifetime, the shared cluster's
# default 120 s (bench/slurm_cluster.py).
REQUEUE_HOLD_S = 120
# node1's prolog, the hold, the prolog on the node it lands on, and Slurm's scheduling passes.
JOB_RUNS_WITHIN_S = 2 * PROLOG_TIMEOUT_S + REQUEUE_HOLD_S + 30


async def _until(predicate, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while not (value := predicate()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.2)
    return value


@pytest.fixture
def prolog_on(slurm_cluster, tmp_path, make_settings, sqlite_url):
    """The shared cluster with fleetctl's Prolog configured as the script's header says, for
    this test only."""
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    conf = slurm_cluster.conf_path
    original = conf.read_text()
    assert "SchedulerParameters=sched_interval=1\n" in original
    conf.write_text(
        original.replace(
            "SchedulerParameters=sched_interval=1\n", "SchedulerParameters=sched_interval=1,nohold_on_prolog_fail\n"
        )
        + f"Prolog={slurm_gate_wrapper(tmp_path / 'prolog', settings, PROLOG_TIMEOUT_S)}\nPrologFlags=Alloc\n"
        # Slurm gives up a batch launch after 10 s by default and requeues the job
        # without draining the node: the prolog must be allowed its whole limit.
        + f"BatchStartTimeout={PROLOG_TIMEOUT_S + 30}\n"
    )
    slurm_cluster.run("scontrol", "reconfigure")
    try:
        yield settings
    finally:
        conf.write_text(original)
        slurm_cluster.run("scontrol", "reconfigure")
        slurm_cluster.reset()


def _runs(output: Path) -> list[str]:
    return [line for line in output.read_text().splitlines() if line.startswith("run ")] if output.exists() else []


# The job's wait, node1's drain (90 s below) and the start of the workers and workflows.
@pytest.mark.timeout(JOB_RUNS_WITHIN_S + 90 + 120)
async def test_a_job_allocated_a_faulty_node_runs_elsewhere_and_the_node_is_drained(slurm_cluster, prolog_on) -> None:
    settings = prolog_on
    engine = get_engine(settings.db_url)
    names = import_slurm_nodes(engine, slurm_cluster.node_names)
    add_fault(engine, "node1", "xid79", None, time.time(), None, 1)  # the GPU fell off the bus
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        for n in names:
            await start_in_production(client, settings, n)

        # The builtin scheduler gives a 1-node job the first idle node: node1.
        job_id = slurm_cluster.submit_sleep_job("-N1", "--requeue")
        output = slurm_cluster.root / "jobs" / f"{job_id}.out"

        def show_job() -> str:
            return subprocess.run(
                ["scontrol", "show", "job", job_id],
                env={**os.environ, "SLURM_CONF": str(slurm_cluster.conf_path)},
                capture_output=True,
                text=True,
                check=True,
            ).stdout

        try:
            runs = await _until(lambda: _runs(output), JOB_RUNS_WITHIN_S, "the job to run")
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; node1: {[(e.trigger, e.cause) for e in queries.node_events(engine, 'node1')]}\n{show_job()}"
            ) from None
        assert "node1" not in runs[0], runs  # its script ran only on a healthy node
        assert len(runs) == 1
        restarts = show_job()
        assert "Restarts=1" in restarts  # requeued once, off node1

        # Drained to maintenance; the runbook for the failed check may take it on from there.
        await _until(
            lambda: any(e.trigger == "drain_complete" for e in queries.node_events(engine, "node1")),
            90,
            "node1 in maintenance",
        )
        drain = next(e for e in queries.node_events(engine, "node1") if e.trigger == "drain")
        assert drain.actor_kind == "automation" and drain.actor == f"prolog@{job_id}"
        check = drain.cause.removeprefix("prolog prejob: ").split(":")[0]
        assert check in ("xid-scan", "nvidia-smi-query"), drain.cause
        assert drain.failure == f"check {check}"  # counted as the check's failure in MTTF
        with Session(engine) as session:
            failed = list(
                session.exec(select(CheckRun).where(CheckRun.node_name == "node1", CheckRun.status == "fail"))
            )
        # one prolog check failed (the remediation's own checks after it are its workflow's)
        assert [r.check_name for r in failed if r.workflow_id.startswith("prolog/")] == [check]
        assert all(r.workflow_id.startswith(f"prolog/{job_id}-") for r in failed if r.workflow_id.startswith("prolog/"))
        state = slurm_cluster.scheduler().node_state("node1")
        assert state.drained  # by fleetctl's cordon, or by Slurm for the failed prolog
        print(f"\nprolog on node1: {drain.cause}; Slurm node1: {state.reason}; job {job_id}: {runs[0]}")
        # The healthy nodes passed their prolog and stay in production.
        assert all(queries.get_node(engine, n).state == "production" for n in names[1:])
    finally:
        await terminate_node_workflows(settings, names)
        worker.stop()
