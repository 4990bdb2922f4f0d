"""Hung jobs, end to end: a simulated fleet runs a job on four nodes that checkpoints every
CADENCE_S, then stops. Three of its nodes report PyTorch's NCCL watchdog timeout (`fleetctl
node event --message`, as a launcher or log shipper would); the fourth, the one the others
waited on, says nothing. The HungJobs judge, ticking, flags the job once it is late by more
than hang_cadence_factor cadences, within twice its cadence, and under restart-off-node
drains the silent node through the capacity guard and restarts the job off it onto the free
node, as that drain's fault (fault_restart_id): one restart, never a second. Each verdict is
recorded (`job show`, the exporter's gauge), and a requeue by the scheduler itself is
progress."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleetctl.db import jobs as jobs_db
from fleetctl.db import queries
from fleetctl.jobs.hang import GPU_UTIL, HANG_CHECK, HangPolicy
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import DEFAULT_RUNNING_TIMEOUT_S, HungJobsInput, HungJobsResult, fault_restart_id
from fleetctl.workflows.definitions.hung_jobs import HungJobs
from tests.support.cli import console
from tests.support.dcgm import DcgmExporters
from tests.support.fleet import wait_for
from tests.support.prometheus import SCRAPE_INTERVAL_S, needs_prometheus, running_prometheus, wait_for_result  # noqa: F401
from tests.support.sim_fleet import fleet_in_production
from tests.support.worker import DRAIN_LOOKS_OFTEN

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

NODES = 4  # the job's; the fleet has one more, free, for the job's restart
CADENCE_S = 20.0
# The schedule ticks every few minutes; the test many times a cadence, each tick a workflow run
# (back to back they were half the test's CPU).
TICK_PAUSE_S = CADENCE_S / 40
# Real PyTorch output (the fixture cites its issue): rank 0's timeout on collective 1580.
WATCHDOG = next(
    line
    for line in (Path(__file__).resolve().parents[1] / "fixtures" / "nccl_watchdog" / "llamafactory_7396_allreduce.log")
    .read_text()
    .splitlines()
    if "Watchdog caught collective operation timeout" in line
)


async def _tick(fleet) -> HungJobsResult:
    """One tick of the schedule. Its bound: the Prometheus query's timeout, and the drain's own."""
    s = fleet.settings
    return await asyncio.wait_for(
        fleet.client.execute_workflow(
            HungJobs.run,
            HungJobsInput(fleet=s.fleet, actor="schedule/hung-jobs"),
            id=f"hung-jobs/test-{uuid.uuid4().hex[:6]}",
            task_queue=s.task_queue,
        ),
        timeout=s.prometheus_timeout_s + 60,
    )


async def test_a_hung_job_is_flagged_within_twice_its_cadence_and_restarted_off_the_node_it_hung_on(
    make_settings, sqlite_url
) -> None:
    settings = make_settings(sqlite_url)
    settings.hang_policy = HangPolicy.RESTART.value
    fleet = await fleet_in_production(settings, NODES + 1, **DRAIN_LOOKS_OFTEN)
    job = SimScheduler(fleet.engine).submit("llm-pretrain", NODES)
    assert job.state == "running" and sorted(job.nodes) == sorted(fleet.names[:NODES])
    hung_on = job.nodes[2]
    spare = fleet.names[NODES]
    with console(settings) as invoke:
        # Its cadence: a checkpoint every CADENCE_S, the last one now. Then it stops.
        last = datetime.now(UTC).replace(microsecond=0)
        for back in (2, 1, 0):
            at = (last - timedelta(seconds=back * CADENCE_S)).isoformat()
            done = invoke("job", "checkpoint", job.job_id, "--at", at)
            assert done.exit_code == 0, done.output
        for node in job.nodes:
            if node != hung_on:
                sent = await asyncio.to_thread(
                    invoke, "node", "event", node, "--message", WATCHDOG, "--severity", "warning"
                )
                assert sent.exit_code == 0, sent.output
        await wait_for(
            lambda: len({e.node_name for e in queries.health_events_since(fleet.engine, job.nodes, last)}) == NODES - 1,
            60,
            "the watchdog lines recorded",
        )

        # Tick until flagged: never before hang_cadence_factor cadences, always within two.
        flagged_by = last + timedelta(seconds=2 * CADENCE_S)
        ticks: list[tuple[float, HungJobsResult]] = []
        while not (ticks and ticks[-1][1].flagged):
            assert datetime.now(UTC) < flagged_by, f"not flagged within two cadences: {ticks[-1:]}"
            result = await _tick(fleet)
            ticks.append(((datetime.now(UTC) - last).total_seconds(), result))
            await asyncio.sleep(TICK_PAUSE_S)
        for ended_after_s, result in ticks[:-1]:
            assert not result.flagged and result.restarted == [], (ended_after_s, result)
        assert all(
            r.errors and r.errors[0].startswith("gpu_util: ") for _, r in ticks if r.flagged
        )  # no Prometheus here
        hung = ticks[-1][1]
        (evidence,) = hung.flagged
        assert (
            evidence.startswith(f"job {job.job_id}: no checkpoint for ")
            and f"its cadence {CADENCE_S:.0f} s" in evidence
        )
        assert f"{hung_on}: behind the other ranks" in evidence, evidence
        assert hung.restarted == [f"{job.job_id} off {hung_on}"] and hung.held == [], hung

        drain = await fleet.wait_event(hung_on, "drain")
        assert (drain.actor_kind, drain.failure) == ("automation", f"check {HANG_CHECK}")
        assert drain.cause.startswith(f"hung job {job.job_id} on {hung_on}: ")
        # Restarted off it onto the free node, as that drain's fault: one restart.
        await wait_for(
            lambda: [r.status for r in jobs_db.job_restarts(fleet.engine, job.job_id)] in (["succeeded"], ["failed"]),
            DEFAULT_RUNNING_TIMEOUT_S + 60,
            "the job's restart off the node it hung on",
        )
        (restart,) = jobs_db.job_restarts(fleet.engine, job.job_id)
        assert restart.status == "succeeded" and restart.bad_nodes == [hung_on], restart
        assert spare in restart.new_nodes and hung_on not in restart.new_nodes
        assert restart.restart_id == fault_restart_id(hung_on, drain.state_version)
        assert restart.failure == f"check {HANG_CHECK}"
        # The node's own drain goes on to maintenance: its job left it, nothing restarts twice.
        await fleet.wait_event(hung_on, "drain_complete")

        # Running again, from its restart: not hung, and nothing more is done.
        after = await _tick(fleet)
        assert after.flagged == [] and after.restarted == [], after
        assert len(jobs_db.job_restarts(fleet.engine, job.job_id)) == 1


async def test_flag_only_flags_and_restarts_nothing(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)  # hang_policy: flag-only, the default
    fleet = await fleet_in_production(settings, NODES + 1, **DRAIN_LOOKS_OFTEN)
    job = SimScheduler(fleet.engine).submit("llm-pretrain", NODES)
    # Checkpoints long past: late by far more than 1.5 cadences.
    last = datetime.now(UTC) - timedelta(seconds=10 * CADENCE_S)
    for back in (2, 1, 0):
        jobs_db.record_checkpoint(fleet.engine, job.job_id, last - timedelta(seconds=back * CADENCE_S))
    _backdate_start(fleet.engine, job.job_id, last - timedelta(hours=1))
    with console(settings) as invoke:
        for node in job.nodes[:-1]:
            sent = await asyncio.to_thread(
                invoke, "node", "event", node, "--message", WATCHDOG, "--severity", "warning"
            )
            assert sent.exit_code == 0, sent.output
        await wait_for(
            lambda: len(queries.health_events_since(fleet.engine, job.nodes, last)) == NODES - 1,
            60,
            "the watchdog lines recorded",
        )
        result = await _tick(fleet)
        assert result.policy == "flag-only" and len(result.flagged) == 1 and result.restarted == [], result
        assert all(fleet.state(n) == "production" for n in job.nodes)
        assert jobs_db.job_restarts(fleet.engine, job.job_id) == []

        # Recorded: `job show`, its JSON, and the exporter's gauge.
        (found,) = json.loads(invoke("job", "show", job.job_id, "-o", "json").stdout)["hangs"]
        assert (found["state"], found["suspects"], found["localised"], found["resolved_at"]) == (
            "hung",
            [job.nodes[-1]],  # the node whose ranks logged no timeout
            "watchdog",
            None,
        )
        assert found["evidence"] == result.flagged[0]
        assert "hung-job judge" in invoke("job", "show", job.job_id).stdout
        assert _jobs_hung(fleet.engine) == 1
        # The next tick sees the same hang: the same finding, seen later.
        await _tick(fleet)
        (again,) = json.loads(invoke("job", "show", job.job_id, "-o", "json").stdout)["hangs"]
        assert again["id"] == found["id"] and again["last_seen_at"] > found["last_seen_at"]

        # Slurm requeues it on its own (a requeue fleetctl did not ask for): a new run is
        # progress, as fleetctl's own restart is. Not hung, and the finding is resolved.
        SimScheduler(fleet.engine).restart_job(job.job_id, [])
        after = await _tick(fleet)
        assert after.flagged == [] and after.no_evidence == [], after
        (resolved,) = json.loads(invoke("job", "show", job.job_id, "-o", "json").stdout)["hangs"]
        assert resolved["id"] == found["id"] and resolved["resolved_at"] is not None
        assert _jobs_hung(fleet.engine) == 0
        assert jobs_db.job_restarts(fleet.engine, job.job_id) == []


def _jobs_hung(engine) -> float:
    from fleetctl.reliability.exporter_server import FleetCollector

    family = next(f for f in FleetCollector(engine).collect() if f.name == "fleetctl_jobs_hung")
    return sum(s.value for s in family.samples)


def _backdate_start(engine, job_id: str, at: datetime) -> None:
    """The job started long before its checkpoints (the simulated scheduler starts it now)."""
    from sqlmodel import Session, select

    from fleetctl.db.models import Job

    with Session(engine) as session:
        row = session.exec(select(Job).where(Job.job_id == job_id)).one()
        row.started_at = row.run_started_at = at
        session.add(row)
        session.commit()


WINDOW_S = 4  # each node's busiest GPU averaged over the last four scrapes
SETTLE_S = WINDOW_S + 20 * SCRAPE_INTERVAL_S  # a window all after a change, and a few scrapes more


@pytest.mark.usefixtures("needs_prometheus")
async def test_a_job_whose_gpus_stopped_is_restarted_off_the_node_whose_gpus_did_not(
    make_settings, sqlite_url, tmp_path
) -> None:
    """From a real Prometheus scraping each node's exporter (a real dcgm-exporter's output):
    three nodes' GPUs idle, the fourth's still at 100% (a kernel that never returns while the
    others wait): hung, and blamed on the fourth."""
    settings = make_settings(sqlite_url)
    settings.hang_policy, settings.hang_window_s = HangPolicy.RESTART.value, WINDOW_S
    fleet = await fleet_in_production(settings, NODES + 1, **DRAIN_LOOKS_OFTEN)
    job = SimScheduler(fleet.engine).submit("llm-pretrain", NODES)
    spinning = job.nodes[3]
    last = datetime.now(UTC) - timedelta(seconds=3 * CADENCE_S)
    for back in (2, 1, 0):
        jobs_db.record_checkpoint(fleet.engine, job.job_id, last - timedelta(seconds=back * CADENCE_S))
    _backdate_start(fleet.engine, job.job_id, last - timedelta(hours=1))
    exporters = DcgmExporters(fleet.names)
    try:
        for node in job.nodes:
            if node != spinning:
                exporters.every_gpu[node] = {"DCGM_FI_DEV_GPU_UTIL": 0.0}
        with running_prometheus(tmp_path, exporters.targets, job="dcgm-exporter") as prometheus:
            settings.prometheus_url = prometheus
            # The judge's own query, with the window's busiest sample: every idle node's window
            # holds only idle samples, and the spinning node's is scraped.
            expr = GPU_UTIL.promql(job.nodes, settings.prometheus_node_label, WINDOW_S).replace(
                "avg_over_time", "max_over_time"
            )
            wait_for_result(
                prometheus,
                expr,
                lambda r: (
                    sorted((s["metric"]["Hostname"], float(s["value"][1])) for s in r)
                    == sorted((n, 100.0 if n == spinning else 0.0) for n in job.nodes)
                ),
                timeout_s=SETTLE_S,
            )
            with console(settings):
                hung = await _tick(fleet)
                assert hung.errors == [] and len(hung.flagged) == 1, hung
                assert f"3 of {NODES} nodes' GPUs idle" in hung.flagged[0]
                assert f"{spinning}: GPUs unlike the job's other nodes" in hung.flagged[0]
                assert hung.restarted == [f"{job.job_id} off {spinning}"], hung
                drain = await fleet.wait_event(spinning, "drain")
                assert drain.failure == f"check {HANG_CHECK}"
                await wait_for(
                    lambda: [r.status for r in jobs_db.job_restarts(fleet.engine, job.job_id)] == ["succeeded"],
                    DEFAULT_RUNNING_TIMEOUT_S + 60,
                    "the job's restart off the spinning node",
                )
                (restart,) = jobs_db.job_restarts(fleet.engine, job.job_id)
                assert restart.bad_nodes == [spinning] and fleet.names[NODES] in restart.new_nodes
    finally:
        exporters.close()
