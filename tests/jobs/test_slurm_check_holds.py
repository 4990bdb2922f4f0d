"""The node's hold on the real Slurm cluster: nodes imported for burn-in are
drained with fleetctl's reason from the import on (reconcile finds no schedulable new node),
so a job submitted meanwhile waits; one node's burn-in runs on the held node and the job starts
there only once it is admitted; a sweep check holds an idle production node, and a job asked
onto that very node during the check starts only after it."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio import activity
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import BURN_IN_HOLD, check_hold_reason
from fleetctl.workflows.api import CheckOutcome, CheckRequest, SweepInput
from fleetctl.workflows.client import connect, request_phase
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from fleetctl.workflows.worker import activities_for, build_worker
from tests.support.jobs import slurm_inventory, until
from tests.support.worker import terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

# Admission of one node (quick suite, simulated checks: instant) and a sweep of one node.
ADMISSION_S = 60.0
# slurmctld looks at a new job at once (its event-driven pass) and at least every
# sched_interval (60 s by default); the job's pending reason says it has looked.
SCHEDULED_S = 75.0


def _job_state(cluster, job_id: str) -> tuple[str, str]:
    state, reason = cluster.run("squeue", "-h", f"--jobs={job_id}", "--states=all", "-o", "%T|%r").strip().split("|")
    return state, reason


def _considered(cluster, job_id: str) -> tuple[str, str]:
    """The job's state once slurmctld has considered it (a pending job has a reason then)."""
    deadline = time.monotonic() + SCHEDULED_S
    while (seen := _job_state(cluster, job_id)) == ("PENDING", "None"):
        assert time.monotonic() < deadline, f"slurmctld did not look at job {job_id} in {SCHEDULED_S:g} s"
        time.sleep(0.05)
    return seen


def _started_on(cluster, job_id: str) -> tuple[str, ...]:
    """The nodes the job's first run started on; if it never starts, what Slurm says of its
    nodes and reservations, in full."""
    try:
        return cluster.wait_for_run(job_id, 0, ADMISSION_S).nodes
    except RuntimeError as exc:
        raise AssertionError(
            f"{exc}\n{cluster.run('sinfo', '-N', '-o', '%N|%T|%E')}"
            f"{cluster.run('scontrol', 'show', 'reservation')}\n{cluster.log_tail(30)}"
        ) from None


def _cli(settings, cluster, *args: str):
    s = settings
    return CliRunner().invoke(
        app,
        [
            "--db-url",
            s.db_url,
            "--temporal-address",
            s.temporal_address,
            "--task-queue",
            s.task_queue,
            "--as",
            "alice@console",
            *args,
        ],
        env={"FLEETCTL_FLEET": s.fleet, "SLURM_CONF": str(cluster.conf_path), "COLUMNS": "200"},
    )


async def test_a_held_node_takes_no_job_from_import_through_burn_in_nor_during_a_sweep_check(
    slurm_cluster, make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(slurm_cluster.conf_path)
    engine = get_engine(sqlite_url)
    scheduler = slurm_cluster.scheduler()
    names = list(slurm_cluster.node_names)
    first, second = names[0], names[1]
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(slurm_inventory(names))

    # What Slurm says of the node while each check runs (the checks themselves are the real ones).
    seen: list[tuple[str, str, bool, str | None, tuple[str, str] | None]] = []
    pinned: dict[str, str] = {}
    waiting = {"job": ""}
    client = await connect(settings)
    activities = activities_for(settings, client)
    real_check = next(a for a in activities if getattr(a, "__name__", "") == "run_check")

    @activity.defn(name="run_check")
    def run_check_as_slurm_sees_it(req: CheckRequest) -> CheckOutcome:
        if req.node == second and "sweep" in req.run_key and second not in pinned:
            # A job asked onto this very node while its sweep check runs.
            pinned[second] = slurm_cluster.submit_sleep_job("-N1", f"--nodelist={second}")
            _considered(slurm_cluster, pinned[second])
        state = scheduler.node_state(req.node)
        job = pinned.get(req.node) or waiting["job"]
        seen.append(
            (req.node, req.run_key, state.drained, state.reason, _job_state(slurm_cluster, job) if job else None)
        )
        return real_check(req)

    activities = [run_check_as_slurm_sees_it if a is real_check else a for a in activities]
    # The cluster's node names are every Slurm test's: start their workflows afresh.
    await terminate_node_workflows(settings, names)
    try:
        imported = await asyncio.to_thread(_cli, settings, slurm_cluster, "node", "import", str(inventory))
        assert imported.exit_code == 0, imported.output
        assert {n: (scheduler.node_state(n).drained, scheduler.node_state(n).reason) for n in names} == dict.fromkeys(
            names, (True, BURN_IN_HOLD)
        )
        reconciled = await asyncio.to_thread(_cli, settings, slurm_cluster, "reconcile", "-o", "json")
        assert reconciled.exit_code == 0 and json.loads(reconciled.stdout)["differences"] == [], reconciled.output

        # A job submitted now finds no node: every one is held for its burn-in.
        waiting["job"] = slurm_cluster.submit_sleep_job("-N1")
        assert _considered(slurm_cluster, waiting["job"])[0] == "PENDING"

        with ThreadPoolExecutor(16) as pool:
            async with build_worker(client, settings, pool, activities=activities):
                await request_phase(client, first, "admit", "tester", "quick")
                await until(lambda: queries.get_node(engine, first).state == "production", ADMISSION_S, "admitted")
                # Admitted: the hold lifted, the waiting job starts there and nowhere else.
                # (Waited in a thread: the worker runs on this event loop.)
                assert await asyncio.to_thread(_started_on, slurm_cluster, waiting["job"]) == (first,)

                await request_phase(client, second, "admit", "tester", "quick")
                await until(lambda: queries.get_node(engine, second).state == "production", ADMISSION_S, "admitted")
                await until(lambda: not scheduler.node_state(second).drained, ADMISSION_S, "resumed")
                result = await client.execute_workflow(
                    ActiveCheckSweep.run,
                    SweepInput(suite="quick", max_concurrent=4, fleet=settings.fleet),
                    id=f"hold-sweep-{uuid.uuid4().hex[:8]}",
                    task_queue=settings.task_queue,
                )
                # The check over, the hold lifted: the job asked onto the node starts there.
                assert await asyncio.to_thread(_started_on, slurm_cluster, pinned[second]) == (second,)
    finally:
        await terminate_node_workflows(settings, names)
        slurm_cluster.reset()

    burn_in = [s for s in seen if s[0] == first and "sweep" not in s[1]]
    assert burn_in and all(s[2:4] == (True, BURN_IN_HOLD) and s[4][0] == "PENDING" for s in burn_in), burn_in
    # The sweep found the first node busy (its job) and checked the second, held.
    assert (result.checked, result.passed, result.skipped, result.errors) == (1, 1, [], []), result
    sweep = [s for s in seen if "sweep" in s[1]]
    assert sweep and all(
        s[0] == second and s[2:4] == (True, check_hold_reason("quick")) and s[4][0] == "PENDING" for s in sweep
    ), sweep
