"""The post-job checks on the real Slurm cluster: fleetctl's Epilog (the same shipped script
as the Prolog, run as the epilog by slurmd) checks each node a job just ended on. A node that
broke during the job is drained through fleetctl with the check as cause before it takes
another job; a node that ended its job healthy stays in production and idle in Slurm."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from sqlmodel import Session, col, select

from fleetctl.checks.suites import load_suite
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.sim.store import add_fault
from fleetctl.workflows.client import connect
from tests.support.jobs import import_slurm_nodes, slurm_gate_wrapper, until
from tests.support.worker import WorkerThread, start_in_production, terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

PREJOB = load_suite("prejob").checks  # the epilog's default suite
EPILOG_TIMEOUT_S = 120  # the shipped default FLEETCTL_PROLOG_TIMEOUT_S, the epilog's limit too
JOB_STARTS_WITHIN_S = 30  # Slurm's scheduling pass (sched_interval=1) and the batch launch
# The epilog's checks and the guarded drain, then the node workflow's drain to maintenance.
DRAINED_WITHIN_S = EPILOG_TIMEOUT_S + 90


@pytest.fixture
def epilog_on(slurm_cluster, tmp_path, make_settings, sqlite_url):
    """The shared cluster with fleetctl's Epilog configured as the script's header says, for
    this test only."""
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    conf = slurm_cluster.conf_path
    original = conf.read_text()
    conf.write_text(original + f"Epilog={slurm_gate_wrapper(tmp_path / 'epilog', settings, EPILOG_TIMEOUT_S)}\n")
    slurm_cluster.run("scontrol", "reconfigure")
    try:
        yield settings
    finally:
        conf.write_text(original)
        slurm_cluster.run("scontrol", "reconfigure")
        slurm_cluster.reset()


def _gated_job(cluster, node: str, go: Path) -> str:
    """A job on `node` that says it runs, then waits for `go` to exist and ends."""
    return cluster.sbatch(
        f"--nodelist={node}",
        "-N1",
        "--wrap",
        f'echo "run on $SLURM_JOB_NODELIST"; while [ ! -e {go} ]; do sleep 0.1; done',
    )


def _ran(cluster, job_id: str) -> bool:
    output = cluster.root / "jobs" / f"{job_id}.out"
    return output.exists() and "run on " in output.read_text()


@pytest.mark.timeout(JOB_STARTS_WITHIN_S + DRAINED_WITHIN_S + EPILOG_TIMEOUT_S + 120)
async def test_a_node_that_broke_during_a_job_is_drained_by_the_epilog(slurm_cluster, epilog_on, tmp_path) -> None:
    settings = epilog_on
    engine = get_engine(settings.db_url)
    names = import_slurm_nodes(engine, slurm_cluster.node_names)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        for n in names:
            await start_in_production(client, settings, n)
        go = tmp_path / "go"
        broken_job = _gated_job(slurm_cluster, "node1", go)
        healthy_job = _gated_job(slurm_cluster, "node2", go)
        await until(lambda: _ran(slurm_cluster, broken_job), JOB_STARTS_WITHIN_S, "the job on node1 to run")
        await until(lambda: _ran(slurm_cluster, healthy_job), JOB_STARTS_WITHIN_S, "the job on node2 to run")

        # node1's GPU falls off the bus while its job runs; then both jobs end.
        add_fault(engine, "node1", "xid79", None, time.time(), None, 1)
        go.touch()

        drain = await until(
            lambda: next((e for e in queries.node_events(engine, "node1") if e.trigger == "drain"), None),
            DRAINED_WITHIN_S,
            "node1's epilog to drain it",
        )
        assert drain.actor_kind == "automation" and drain.actor == f"epilog@{broken_job}", drain
        check = drain.cause.removeprefix("epilog prejob: ").split(":")[0]
        assert check in ("xid-scan", "nvidia-smi-query"), drain.cause
        assert drain.failure == f"check {check}"
        await until(
            lambda: slurm_cluster.scheduler().node_state("node1").drained, DRAINED_WITHIN_S, "node1 drained in Slurm"
        )

        # node2's epilog passed: its job ended, the node stays in production and takes jobs.
        def node2_epilog_runs() -> list[CheckRun]:
            with Session(engine) as session:
                return list(
                    session.exec(
                        select(CheckRun).where(
                            CheckRun.node_name == "node2",
                            col(CheckRun.workflow_id).startswith(f"epilog/{healthy_job}-"),
                        )
                    )
                )

        runs = await until(
            lambda: runs if len(runs := node2_epilog_runs()) == len(PREJOB) else None,
            EPILOG_TIMEOUT_S,
            "node2's epilog checks",
        )
        assert {r.status for r in runs} == {"pass"}, [(r.check_name, r.status, r.reason) for r in runs]
        assert queries.get_node(engine, "node2").state == "production"
        assert not slurm_cluster.scheduler().node_state("node2").drained
    finally:
        await terminate_node_workflows(settings, names)
        worker.stop()
