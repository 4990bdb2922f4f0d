"""`fleetctl job restart` and `fleetctl reconcile` on the real 4-node Slurm cluster."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import jobs
from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import REASON_PREFIX
from tests.support.jobs import sim_fleet
from tests.support.worker import WorkerThread

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

# How long a restart waits for the island's named nodes before any node will do: short, so
# the fallback test does not wait Slurm's minute; the scheduler starts a job on free named
# nodes at once (sched_interval=1), far within it.
ISLAND_WAIT_S = 3.0


@pytest.fixture
def cli(slurm_cluster, make_settings, sqlite_url):
    """The CLI and a worker on the Slurm cluster; its nodes are in the inventory, in production."""
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    settings.restart_island_wait_s = ISLAND_WAIT_S
    sim_fleet(get_engine(sqlite_url), slurm_cluster.node_names, scheduler="slurm")
    worker = WorkerThread(settings).start()
    base = [
        "--db-url",
        sqlite_url,
        "--temporal-address",
        settings.temporal_address,
        "--task-queue",
        settings.task_queue,
        "--fleet",
        settings.fleet,
        "--as",
        "alice@console",
    ]
    runner = CliRunner()

    def invoke(*args: str):
        # as redirected to a file: no terminal width, so no table line is wrapped
        return runner.invoke(
            app, [*base, *args], env={"SLURM_CONF": settings.slurm_conf, "COLUMNS": None, "LINES": None}
        )

    yield invoke
    worker.stop()
    slurm_cluster.reset()


def test_job_restart_moves_a_slurm_job_off_the_bad_node_and_reports_restart_seconds(cli, slurm_cluster) -> None:
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")
    listed = json.loads(cli("job", "list", "--node", "node1", "-o", "json").stdout)
    assert [(j["job_id"], j["scheduler"], j["state"]) for j in listed] == [(job_id, "slurm", "running")]

    r = cli("job", "restart", job_id, "--bad-node", "node1", "--reason", "XID 79: GPU has fallen off the bus", "--yes")
    assert r.exit_code == 0, r.output

    shown = json.loads(cli("job", "show", job_id, "-o", "json").stdout)
    (restart,) = shown["restarts"]
    at = {
        step: datetime.fromisoformat(restart[f"{step}_at"]) for step in ("fault_seen", "drained", "requeued", "running")
    }
    print(
        f"\nSlurm job {job_id}: fault seen -> running again on {','.join(restart['new_nodes'])} in "
        f"{shown['restart_seconds']:.2f}s (drained +{(at['drained'] - at['fault_seen']).total_seconds():.2f}s, "
        f"requeued +{(at['requeued'] - at['fault_seen']).total_seconds():.2f}s)"
    )
    assert shown["scheduler"] == "slurm" and shown["state"] == "running"
    assert shown["restart_seconds"] == restart["restart_seconds"] > 0
    assert "node1" not in shown["nodes"] and len(shown["nodes"]) == 2
    assert restart["new_nodes"] == shown["nodes"] and restart["status"] == "succeeded"
    # Slurm's RUNNING is the job's script running again, on the new nodes.
    assert slurm_cluster.wait_for_run(job_id, 1).nodes == tuple(shown["nodes"])
    node1 = slurm_cluster.scheduler().node_state("node1")
    assert node1.drained and node1.reason == f"{REASON_PREFIX} XID 79: GPU has fallen off the bus"


def test_reconcile_reports_and_fixes_slurm_drains_that_disagree(cli, slurm_cluster) -> None:
    # Node Health Check's drain, in the form its Slurm integration writes.
    slurm_cluster.run("scontrol", "update", "NodeName=node3", "State=DRAIN", "Reason=NHC: check_hw_ib: port down")
    slurm_cluster.scheduler().drain("node4", "XID 79")  # left behind: node4 is in production

    r = cli("reconcile", "-o", "json")
    assert r.exit_code == 1
    assert {d["node"]: (d["difference"], d["owner"]) for d in json.loads(r.stdout)["differences"]} == {
        "node3": ("drained_by_someone_else", "NHC"),
        "node4": ("stale_fleetctl_drain", ""),
    }

    assert cli("reconcile", "--fix").exit_code == 1  # NHC's drain is NHC's to lift
    assert slurm_cluster.scheduler().node_state("node3").drained
    assert not slurm_cluster.scheduler().node_state("node4").drained
    assert cli("reconcile", "--fix", "--include-owner", "NHC").exit_code == 0
    r = cli("reconcile")
    assert r.exit_code == 0 and "4 nodes checked: fleetctl and the schedulers agree" in r.stdout


def test_report_shows_ettr_and_restart_latency_of_a_real_slurm_job_with_checkpoints(cli, slurm_cluster) -> None:
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2", "--job-name=llm-pretrain")
    slurm_cluster.wait_for_run(job_id, 0)
    assert cli("job", "sync").exit_code == 0  # as a periodic sync would see its first run
    r = cli("job", "checkpoint", job_id)  # the training loop's call after writing a checkpoint
    assert r.exit_code == 0 and r.stdout.endswith(" recorded\n"), r.output
    r = cli("job", "restart", job_id, "--bad-node", "node1", "--reason", "XID 79: GPU has fallen off the bus", "--yes")
    assert r.exit_code == 0, r.output
    slurm_cluster.wait_for_run(job_id, 1)
    assert cli("job", "checkpoint", job_id).exit_code == 0

    r = cli("report", "-o", "json", "--job-gpus", "1024")
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)
    (job,) = [j for j in report["jobs"]["per_job"] if j["job_id"] == job_id]
    print(
        f"\nSlurm job {job_id}: ETTR {job['ettr']:.4f} over {job['wall_hours'] * 3600:.1f}s "
        f"(down {job['downtime_seconds']:.2f}s, lost since checkpoint {job['lost_seconds']:.2f}s), "
        f"restart {job['restart_seconds']}, predicted {job['predicted_ettr']}"
    )
    # node1, node2 of the inventory's h100-sxm profile: 16 GPUs. Slurm counted fleetctl's requeue.
    assert (job["name"], job["gpus"], job["restarts"], job["scheduler_restarts"], job["checkpoints"]) == (
        "llm-pretrain",
        16,
        1,
        1,
        2,
    )
    assert job["interruptions"] == ["xid 79"]
    # The wall time runs from the first run's start, through the restart, to now.
    assert job["downtime_seconds"] > 0 and job["lost_seconds"] > 0
    assert job["wall_hours"] * 3600 > job["downtime_seconds"] + job["lost_seconds"]
    assert 0 < job["ettr"] < 1
    latency = report["restart_latency"]
    assert latency["count"] == 1 and job["restart_seconds"] == latency["seconds"] and latency["p50"] > 0
    assert report["jobs"]["at_job_size"]["gpus"] == 1024

    table = cli("report", "--no-sync").stdout
    assert "job ETTR" in table and "restart median" in table and job_id in table


def _islands(sqlite_url: str, islands: dict[str, str]) -> None:
    """The inventory's islands of the cluster's nodes (each its own leaf switch)."""
    from sqlmodel import Session, select

    from fleetctl.db.models import Node

    with Session(get_engine(sqlite_url)) as session:
        for node in session.exec(select(Node)):
            node.island, node.switch = islands[node.name], f"leaf-{node.name}"
            session.add(node)
        session.commit()


def test_a_restart_replaces_the_bad_node_from_the_jobs_island(cli, slurm_cluster, sqlite_url) -> None:
    # Left to itself Slurm fills the lowest free names (node2, node3): the island is node4.
    _islands(sqlite_url, {"node1": "ib-a", "node2": "ib-a", "node3": "ib-b", "node4": "ib-a"})
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")

    r = cli("job", "restart", job_id, "--bad-node", "node1", "--reason", "XID 79", "--yes")
    assert r.exit_code == 0, r.output

    (restart,) = json.loads(cli("job", "show", job_id, "-o", "json").stdout)["restarts"]
    assert (restart["island"], restart["placement"], restart["landed"]) == ("ib-a", "island", "island")
    assert restart["placement_detail"] == "island ib-a: node4 for node1"
    assert sorted(restart["new_nodes"]) == ["node2", "node4"]
    assert slurm_cluster.wait_for_run(job_id, 1).nodes == ("node2", "node4")


def test_a_restart_falls_back_to_the_fleet_when_the_island_has_no_free_node(cli, slurm_cluster, sqlite_url) -> None:
    _islands(sqlite_url, {"node1": "ib-a", "node2": "ib-a", "node3": "ib-b", "node4": "ib-b"})
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")

    r = cli("job", "restart", job_id, "--bad-node", "node1", "--reason", "XID 79", "--yes")
    assert r.exit_code == 0, r.output

    (restart,) = json.loads(cli("job", "show", job_id, "-o", "json").stdout)["restarts"]
    assert (restart["island"], restart["placement"], restart["landed"]) == ("ib-a", "fleet", "outside")
    assert (
        restart["placement_detail"] == "island ib-a has 0 healthy free nodes of 1 needed: any healthy node in the fleet"
    )
    assert "node1" not in restart["new_nodes"] and len(restart["new_nodes"]) == 2
    shown = cli("job", "show", job_id)
    assert "fleet ib-a -> outside" in shown.stdout


@pytest.fixture
def node4_reserved(slurm_cluster):
    """node4 idle and undrained, but held by a reservation that is not fleetctl's (an
    operator's maintenance window): a job not in it cannot start there, and nothing fleetctl
    asks of the node says so."""
    slurm_cluster.run(
        "scontrol",
        "create",
        "reservation",
        "ReservationName=maint-node4",
        "Nodes=node4",
        "StartTime=now",
        "Duration=60",
        "Users=root",
    )
    yield
    slurm_cluster.run("scontrol", "delete", "ReservationName=maint-node4")


def test_a_restart_whose_island_node_cannot_start_it_falls_back_to_the_fleet(
    cli, slurm_cluster, sqlite_url, node4_reserved
) -> None:
    # node4 is free for fleetctl and for sinfo, but an operator's reservation holds it: the
    # island's one free node cannot take the job, and the restart must not wait for it.
    _islands(sqlite_url, {"node1": "ib-a", "node2": "ib-a", "node3": "ib-b", "node4": "ib-a"})
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")

    # Bounded: without the fallback the job would wait for node4 until the restart gives up.
    r = cli("job", "restart", job_id, "--bad-node", "node1", "--reason", "XID 79", "--yes", "--timeout", "60")
    assert r.exit_code == 0, r.output

    (restart,) = json.loads(cli("job", "show", job_id, "-o", "json").stdout)["restarts"]
    assert (restart["island"], restart["placement"], restart["landed"]) == ("ib-a", "fleet", "outside")
    assert restart["placement_detail"] == (
        f"the island's named nodes had not taken the job after {ISLAND_WAIT_S:g}s: any healthy node in the fleet"
    )
    assert slurm_cluster.wait_for_run(job_id, 1).nodes == ("node2", "node3")


def test_a_restart_never_names_an_island_node_slurm_has_drained(cli, slurm_cluster, sqlite_url) -> None:
    # node4 is in production for fleetctl but drained in Slurm by someone else (NHC): the
    # restart does not name it and wait, it goes to the fleet at once.
    _islands(sqlite_url, {"node1": "ib-a", "node2": "ib-a", "node3": "ib-b", "node4": "ib-a"})
    slurm_cluster.run("scontrol", "update", "NodeName=node4", "State=DRAIN", "Reason=NHC: check_hw_ib: port down")
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")

    r = cli("job", "restart", job_id, "--bad-node", "node1", "--reason", "XID 79", "--yes", "--timeout", "60")
    assert r.exit_code == 0, r.output

    (restart,) = json.loads(cli("job", "show", job_id, "-o", "json").stdout)["restarts"]
    assert (restart["placement"], restart["placement_detail"], restart["landed"]) == (
        "fleet",
        "island ib-a has 0 healthy free nodes of 1 needed: any healthy node in the fleet",
        "outside",
    )
    assert slurm_cluster.wait_for_run(job_id, 1).nodes == ("node2", "node3")


@pytest.fixture
def slurm_reset(slurm_cluster):
    """The cluster, every job cancelled and node resumed afterwards."""
    yield slurm_cluster
    slurm_cluster.reset()


def test_a_retried_requeue_names_the_island_nodes_again(slurm_reset, make_settings, sqlite_url, node4_reserved) -> None:
    """The restart's first attempt requeued the job and recorded its placement, then died
    before its node list reached Slurm: the retry, finding the job pending, names them again."""

    from temporalio.testing import ActivityEnvironment

    from fleetctl.db import jobs
    from fleetctl.workflows.activities.jobs import JobRestartActivities
    from fleetctl.workflows.activities.schedulers import SchedulerRegistry
    from fleetctl.workflows.api import RestartJob

    slurm_cluster = slurm_reset
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    engine = get_engine(sqlite_url)
    sim_fleet(engine, slurm_cluster.node_names, scheduler="slurm")
    _islands(sqlite_url, {"node1": "ib-a", "node2": "ib-a", "node3": "ib-b", "node4": "ib-a"})
    # node4 (the island's replacement) is held by an operator's reservation and node3 runs
    # another job, so the job stays pending wherever it is pointed.
    slurm_cluster.submit_sleep_job("-w", "node3")
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")
    slurm_cluster.scheduler().drain("node1", "XID 79")
    env = ActivityEnvironment()  # its workflow id, "test", keys the restart's row
    jobs.record_restart_started(
        engine,
        workflow_id="test",
        job_id=job_id,
        scheduler="slurm",
        bad_nodes=["node1"],
        cause="XID 79",
        actor="tester",
        restart_id="r",
        fault_seen_at=datetime.now(UTC),
    )
    activities = JobRestartActivities(settings, SchedulerRegistry(settings))
    requested = lambda: slurm_cluster.run("squeue", "-h", f"--jobs={job_id}", "-o", "%T|%n").strip()  # noqa: E731

    env.run(activities.restart_job, RestartJob("slurm", job_id, ["node1"]))
    assert requested() == "PENDING|node[2,4]"
    slurm_cluster.run("scontrol", "update", f"JobId={job_id}", "ReqNodeList=")  # the list that never arrived
    assert requested() == "PENDING|"

    env.run(activities.restart_job, RestartJob("slurm", job_id, ["node1"]))

    assert requested() == "PENDING|node[2,4]"
    assert jobs.restart_placement(engine, "test") == ("island", ["node2", "node4"])


def test_slurm_is_told_to_keep_a_restarted_job_off_a_node_whose_check_failed(cli, slurm_cluster, sqlite_url) -> None:
    """node3 is in production with a failed check (no island known: Slurm places the
    job itself). Left to itself Slurm would fill node2, node3; told to avoid node3 as well as
    the bad node1 (ExcNodeList), it runs the job on node2, node4."""
    import uuid

    from fleetctl.db import queries
    from fleetctl.db.models import CheckRun

    key = f"test/node3/nvidia-smi-query/{uuid.uuid4().hex[:6]}"
    queries.insert_once(
        get_engine(sqlite_url),
        CheckRun(
            node_name="node3",
            check_name="nvidia-smi-query",
            kind="nvidia-smi-query",
            status="fail",
            reason="uncorrectable ECC 2",
            idempotency_key=key,
        ),
        CheckRun.idempotency_key,
        key,
    )
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")

    r = cli("job", "restart", job_id, "--bad-node", "node1", "--reason", "XID 79", "--yes")
    assert r.exit_code == 0, r.output

    (restart,) = json.loads(cli("job", "show", job_id, "-o", "json").stdout)["restarts"]
    assert restart["placement"] == "" and sorted(restart["new_nodes"]) == ["node2", "node4"]
    assert slurm_cluster.wait_for_run(job_id, 1).nodes == ("node2", "node4")


def test_slurm_nodes_show_their_jobs_as_job_list_knows_them(cli, slurm_cluster) -> None:
    """`node list`'s JOBS and `node show` ask Slurm as `job list --node` does: no `?`."""
    job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
    assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")
    r = cli("node", "list", "-o", "json")
    assert r.exit_code == 0, r.output
    jobs = {row["name"]: row["jobs"] for row in json.loads(r.stdout)}
    assert jobs == {"node1": [job_id], "node2": [job_id], "node3": [], "node4": []}
    for node in ("node1", "node3"):
        listed = [j["job_id"] for j in json.loads(cli("job", "list", "--node", node, "-o", "json").stdout)]
        assert listed == jobs[node]
    table = cli("node", "list").stdout
    assert " ? " not in table and job_id in table
    shown = cli("node", "show", "node1")
    assert shown.exit_code == 0, shown.output
    assert f"jobs: {job_id}" in shown.stdout and f"running job {job_id}" in shown.stdout


def test_a_requeue_by_slurm_itself_is_the_jobs_latest_run_and_its_first_start_stays(
    cli, slurm_cluster, sqlite_url
) -> None:
    """`scontrol requeue` (as an operator, or Slurm after a node failure, requeues a job without
    fleetctl): Slurm moves the job's start time to its new run. The sync keeps the first start
    (the job's wall time) and the latest run's (the hang judge's clock starts again there)."""
    job_id = slurm_cluster.submit_sleep_job("-N1", "-w", "node1")
    slurm_cluster.wait_for_run(job_id, 0)
    assert cli("job", "sync").exit_code == 0
    (first,) = [j for j in jobs.list_jobs(get_engine(sqlite_url), scheduler="slurm") if j.job_id == job_id]
    assert first.started_at is not None and first.run_started_at == first.started_at
    slurm_cluster.run("scontrol", "requeue", job_id)
    slurm_cluster.wait_for_run(job_id, 1)
    assert cli("job", "sync").exit_code == 0
    (again,) = [j for j in jobs.list_jobs(get_engine(sqlite_url), scheduler="slurm") if j.job_id == job_id]
    assert (again.started_at, again.restart_count, again.state) == (first.started_at, 1, "running")
    assert again.run_started_at is not None and again.run_started_at > first.started_at
    assert jobs.job_restarts(get_engine(sqlite_url), job_id) == []  # fleetctl restarted nothing
