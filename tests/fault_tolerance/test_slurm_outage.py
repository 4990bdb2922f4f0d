"""slurmctld down, for real, on the multi-node Slurm test cluster: a drain and a job restart
that meet it are retried with backoff, the refusal shows (fleet status, the restart's record),
nothing is reported as done while it is not, and both complete once slurmctld is back.

Nothing is mocked: the worker runs Slurm's own commands against the cluster, whose
controller is stopped (SIGTERM; its slurmds and running jobs carry on) and started again on
the same state directory, so saved jobs and drains survive as they do in a real restart.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import UTC, datetime

import pytest
from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import jobs, queries
from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import REASON_PREFIX
from fleetctl.workflows.api import (
    HealthEventInput,
    JobRestartInput,
    NodeLifecycleState,
    job_restart_id,
    node_workflow_id,
)
from fleetctl.workflows.client import (
    connect,
    ensure_node_workflows,
    request_transition,
    send_health_events,
    start_job_restart,
)
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.schedulers.conftest import slurm_cluster  # noqa: F401 - a fixture, used by name
from tests.support.fleet import Cli, wait_for
from tests.support.jobs import import_slurm_nodes
from tests.support.worker import WorkerThread, terminate_node_workflows

pytestmark = [pytest.mark.slurm, pytest.mark.temporal]

# What Slurm's commands say while slurmctld is down (sinfo, squeue, scontrol update).
CONTROLLER_DOWN = "Unable to contact slurm controller"
XID79 = "GPU has fallen off the bus."


def _settings(make_settings, sqlite_url, cluster):
    settings = make_settings(sqlite_url)
    settings.slurm_conf = str(cluster.conf_path)
    # The runbook's reboot and burn-in would bring node1 back to production (and resume it in
    # Slurm) once drained; in shadow mode it only records its plan, so the drain stays to see.
    settings.remediation_shadow = True
    return settings


async def _pending(client, workflow_id: str, activity_type: str):
    """The workflow's pending activity of that type (Temporal's PendingActivityInfo), or None."""
    description = await client.get_workflow_handle(workflow_id).describe()
    return next(
        (p for p in description.raw_description.pending_activities if p.activity_type.name == activity_type), None
    )


async def test_drain_while_slurmctld_is_down_is_retried_surfaced_and_completes_when_it_returns(
    slurm_cluster, make_settings, sqlite_url
) -> None:
    settings = _settings(make_settings, sqlite_url, slurm_cluster)
    engine = get_engine(sqlite_url)
    names = import_slurm_nodes(engine, slurm_cluster.node_names)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        # Rounds of cordon attempts 1 s apart instead of a minute, so the test sees a second round begin.
        await client.start_workflow(
            NodeLifecycle.run,
            NodeLifecycleState(node="node1", scheduler_retry_s=1.0),
            id=node_workflow_id("node1"),
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for n in names:
            for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
                await request_transition(client, n, trigger, "setup", actor_kind="automation")

        async def settled() -> bool:  # in production, and done resuming in Slurm
            for n in names:
                current = await client.get_workflow_handle(node_workflow_id(n)).query(NodeLifecycle.current)
                if current.state != "production" or current.work or current.activity:
                    return False
            return True

        await wait_for(settled, 30, "the nodes in production")

        slurm_cluster.stop_controller()
        await send_health_events(
            client, "node1", [HealthEventInput("node1", "xid", 79, XID79, "dmesg", "slurm-outage-xid79", time.time())]
        )
        await wait_for(lambda: queries.get_node(engine, "node1").state != "production", 30, "the drain to start")

        states_seen: set[str] = set()

        def refusals() -> list:
            states_seen.add(queries.get_node(engine, "node1").state)
            return [
                e
                for e in queries.automation_events(engine, limit=50)
                if e.kind == "scheduler_error" and e.node_name == "node1"
            ]

        # Within a round the cordon activity is retried with growing intervals (1, 2, 4, 8 s);
        # when a round's attempts are spent, the refusal is recorded and a new round starts.
        retry_intervals: dict[tuple[str, int], float] = {}  # (activity id, failed attempt) -> seconds

        async def a_round_refused_and_the_next_retrying() -> bool:
            cordon = await _pending(client, node_workflow_id("node1"), "cordon_in_scheduler")
            if cordon is not None and cordon.HasField("next_attempt_schedule_time"):
                assert CONTROLLER_DOWN in cordon.last_failure.message, cordon.last_failure.message
                retry_intervals[(cordon.activity_id, cordon.attempt - 1)] = round(
                    cordon.current_retry_interval.ToTimedelta().total_seconds(), 1
                )
            return len(refusals()) >= 1 and len({activity for activity, _ in retry_intervals}) >= 2

        await wait_for(
            a_round_refused_and_the_next_retrying,
            80,
            "a round of refused cordons recorded and the next one retrying",
            interval_s=0.4,
        )
        by_attempt: dict[int, set[float]] = {}
        for (_, attempt), seconds in retry_intervals.items():
            by_attempt.setdefault(attempt, set()).add(seconds)
        assert {2, 3, 4} <= set(by_attempt) and all(by_attempt[a] == {2.0 ** (a - 1)} for a in by_attempt), (
            retry_intervals
        )
        assert len({activity for activity, _ in retry_intervals}) == 2, retry_intervals  # one per round
        assert states_seen == {"draining"}, states_seen  # never moved on as if the drain had worked
        assert all(CONTROLLER_DOWN in e.reason and "node1" in e.reason for e in refusals()), refusals()
        current = await client.get_workflow_handle(node_workflow_id("node1")).query(NodeLifecycle.current)
        assert current.activity.startswith("draining") and "scheduler refused the drain" in current.last_outcome
        cli = Cli(settings)
        status = await asyncio.to_thread(cli, "fleet", "status", "-o", "json")
        assert status.exit_code == 0, status.output
        shown = json.loads(status.stdout)
        assert any(
            e["kind"] == "scheduler_error" and e["node"] == "node1" and CONTROLLER_DOWN in e["reason"]
            for e in shown["recent_automation_events"]
        ), shown["recent_automation_events"]
        assert {"node": "node1", "state": "draining"}.items() <= next(
            n for n in shown["in_flight"] if n["node"] == "node1"
        ).items()
        assert [e.trigger for e in queries.node_events(engine, "node1")][-1] == "drain"

        slurm_cluster.start_controller()
        await wait_for(
            lambda: queries.get_node(engine, "node1").state == "maintenance",
            60,
            "the drain to complete once slurmctld is back",
        )
        node1 = slurm_cluster.scheduler().node_state("node1")
        assert node1.drained and node1.reason.startswith(REASON_PREFIX) and "XID 79" in node1.reason, node1
        events = queries.node_events(engine, "node1")
        assert [e.trigger for e in events][-2:] == ["drain", "drain_complete"]
    finally:
        try:
            slurm_cluster.start_controller()  # the cluster is shared with every other Slurm test
        finally:
            await terminate_node_workflows(settings, names)
            worker.stop()
            slurm_cluster.reset()


async def test_job_restart_while_slurmctld_is_down_is_retried_and_runs_the_job_again_when_it_returns(
    slurm_cluster, make_settings, sqlite_url
) -> None:
    settings = _settings(make_settings, sqlite_url, slurm_cluster)
    engine = get_engine(sqlite_url)
    worker = WorkerThread(settings).start()
    handle = None
    try:
        client = await connect(settings)
        job_id = slurm_cluster.submit_sleep_job("-N2", "-w", "node1,node2")
        assert slurm_cluster.wait_for_run(job_id, 0).nodes == ("node1", "node2")

        slurm_cluster.stop_controller()
        restart = JobRestartInput(
            job_id=job_id,
            scheduler="slurm",
            bad_nodes=["node1"],
            cause=f"XID 79: {XID79}",
            actor="tester",
            fault_seen_at=datetime.now(UTC).isoformat(),
            restart_id="slurm-outage",
        )
        handle = await start_job_restart(client, settings, restart)
        workflow_id = job_restart_id(job_id, restart.restart_id)

        async def retried() -> bool:
            drain = await _pending(client, workflow_id, "drain_nodes")
            return drain is not None and drain.attempt >= 3 and CONTROLLER_DOWN in drain.last_failure.message

        await wait_for(retried, 40, "the restart's third drain attempt after two refusals", interval_s=0.5)
        (record,) = jobs.job_restarts(engine, job_id)
        assert record.status == "in_progress" and record.drained_at is None and record.running_at is None, record
        shown = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            ["--db-url", sqlite_url, "job", "show", job_id, "-o", "json"],
            env={"SLURM_CONF": settings.slurm_conf},
        )
        assert shown.exit_code == 0, shown.output
        shown = json.loads(shown.stdout)
        assert shown["state"] != "running" and shown["restart_seconds"] is None, shown
        assert [r["status"] for r in shown["restarts"]] == ["in_progress"], shown

        slurm_cluster.start_controller()
        result = await asyncio.wait_for(handle.result(), 60)
        rerun = slurm_cluster.wait_for_run(job_id, 1)  # the job's script really runs again ...
        assert "node1" not in rerun.nodes and len(rerun.nodes) == 2  # ... on two healthy nodes
        assert sorted(result.new_nodes) == sorted(rerun.nodes)
        (record,) = jobs.job_restarts(engine, job_id)
        assert record.status == "succeeded" and record.error == "" and record.running_at is not None, record
        node1 = slurm_cluster.scheduler().node_state("node1")
        assert node1.drained and node1.reason.startswith(REASON_PREFIX) and "XID 79" in node1.reason, node1
    finally:
        try:
            slurm_cluster.start_controller()  # the cluster is shared with every other Slurm test
        finally:
            if handle is not None:
                try:
                    await handle.terminate("test finished")
                except RPCError:
                    pass  # it ended: succeeded, or failed as recorded
            worker.stop()
            slurm_cluster.reset()
