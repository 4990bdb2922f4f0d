"""JobRestart on the real Temporal dev server, with the simulated scheduler."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.client import Client, WorkflowFailureError

from fleetctl.db import jobs
from fleetctl.db.engine import get_engine
from fleetctl.jobs.placement import replacements
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import JobRestartInput, JobRestartResult
from fleetctl.workflows.client import start_job_restart
from fleetctl.workflows.worker import build_worker
from tests.support.jobs import sim_fleet

pytestmark = pytest.mark.temporal


async def _with_worker(settings, body):
    client = await Client.connect(settings.temporal_address)
    with ThreadPoolExecutor(8) as pool:
        async with build_worker(client, settings, pool):
            return await body(client)


def _restart(job_id: str, bad: list[str], restart_id: str | None = None, **extra) -> JobRestartInput:
    return JobRestartInput(
        job_id=job_id,
        scheduler="sim",
        bad_nodes=bad,
        cause="XID 79: GPU has fallen off the bus",
        actor="tester@ci",
        fault_seen_at=(datetime.now(UTC) - timedelta(seconds=1)).isoformat(),
        restart_id=restart_id or uuid.uuid4().hex,
        **extra,
    )


async def test_restart_drains_moves_the_job_and_records_each_step(make_settings, db_url) -> None:
    settings = make_settings(db_url)
    engine = get_engine(db_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4"])
    job = sim.submit("train", node_count=2)
    inp = _restart(job.job_id, ["n1"])

    async def body(client):
        handle = await start_job_restart(client, settings, inp)
        return await handle.result()

    result: JobRestartResult = await _with_worker(settings, body)

    assert "n1" not in result.new_nodes and len(result.new_nodes) == 2
    assert sim.job(job.job_id).nodes == tuple(result.new_nodes)
    assert sim.node_state("n1").drained and sim.node_state("n1").owned_by_fleetctl
    times = [
        datetime.fromisoformat(t)
        for t in (result.fault_seen_at, result.drained_at, result.requeued_at, result.running_at)
    ]
    assert times == sorted(times)
    assert result.restart_seconds == pytest.approx((times[3] - times[0]).total_seconds())
    assert result.restart_seconds >= 1.0

    (row,) = jobs.job_restarts(engine, job.job_id)
    assert (row.status, row.bad_nodes, row.new_nodes, row.actor) == ("succeeded", ["n1"], result.new_nodes, "tester@ci")
    stored = [row.fault_seen_at, row.drained_at, row.requeued_at, row.running_at]
    assert [t.replace(tzinfo=None) for t in stored] == [t.astimezone(UTC).replace(tzinfo=None) for t in times]
    assert row.workflow_id == f"job-restart/{job.job_id}/{inp.restart_id}"


async def test_the_same_fault_restarts_a_job_once(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4", "n5"])
    job = sim.submit("train", node_count=2)
    inp = _restart(job.job_id, ["n1"])

    async def body(client):
        # Twice at once (the lifecycle and an operator), then once more after it finished.
        first, second = await asyncio.gather(
            start_job_restart(client, settings, inp), start_job_restart(client, settings, inp)
        )
        done = await first.result()
        third = await start_job_restart(client, settings, inp)
        return first, second, third, done, await third.result()

    first, second, _third, done, again = await _with_worker(settings, body)

    assert first.result_run_id == second.result_run_id
    assert again == done
    assert len(jobs.job_restarts(engine, job.job_id)) == 1
    assert sim.job(job.job_id).nodes == tuple(done.new_nodes)


async def test_a_job_that_cannot_run_again_fails_the_restart_with_the_reason(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2"])
    job = sim.submit("train", node_count=2)

    async def body(client):
        handle = await start_job_restart(client, settings, _restart(job.job_id, ["n1"], running_timeout_s=1.0))
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        return failed.value

    failure = await _with_worker(settings, body)

    assert "not running again after 1s (last seen pending)" in str(failure.cause)
    (row,) = jobs.job_restarts(engine, job.job_id)
    assert row.status == "failed" and "not running again" in row.error
    assert row.requeued_at is not None and row.running_at is None
    assert sim.job(job.job_id).state == "pending"


def _n3_in_another_island(engine) -> None:
    """Every node in island ib-a but n3, in ib-b."""
    from sqlmodel import Session, select

    from fleetctl.db.models import Node

    with Session(engine) as session:
        for node in session.exec(select(Node)):
            node.island = {"n3": "ib-b"}.get(node.name, "ib-a")
            session.add(node)
        session.commit()


async def test_a_restart_keeps_the_job_in_its_island(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4"])
    _n3_in_another_island(engine)  # first fit would take n3
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")

    async def body(client):
        return await (await start_job_restart(client, settings, _restart(job.job_id, ["n1"]))).result()

    result: JobRestartResult = await _with_worker(settings, body)

    assert result.new_nodes == ["n2", "n4"]
    (row,) = jobs.job_restarts(engine, job.job_id)
    assert (row.island, row.placement, row.placement_detail, row.landed) == (
        "ib-a",
        "island",
        "island ib-a: n4 for n1",
        "island",
    )
    # What `job show` lists as new: the node that took n1's place, not every node of the job.
    assert row.nodes_before == ["n1", "n2"] and replacements(row.nodes_before, row.new_nodes) == ["n4"]


async def test_a_restart_never_names_a_node_its_scheduler_has_drained(make_settings, sqlite_url) -> None:
    """n4 is in production for fleetctl but drained in the scheduler (an earlier restart's bad
    node, drained there only): the restart names n5, not the node the job could never start on."""
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4", "n5"])
    _n3_in_another_island(engine)
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")
    sim.drain("n4", "fleetctl: job 7 restarted off it")

    async def body(client):
        return await (await start_job_restart(client, settings, _restart(job.job_id, ["n1"]))).result()

    result: JobRestartResult = await _with_worker(settings, body)

    assert result.new_nodes == ["n2", "n5"]
    (row,) = jobs.job_restarts(engine, job.job_id)
    assert (row.placement, row.placement_detail) == ("island", "island ib-a: n5 for n1")


async def test_a_restart_takes_the_islands_spare_and_the_pool_is_refilled(make_settings, sqlite_url) -> None:
    """The simulated scheduler holds spares as Slurm's reservation does: no job lands on one
    until a restart takes it; then the pool takes the next idle production node."""
    from sqlmodel import Session, select

    from fleetctl.db import spares as spare_store
    from fleetctl.db.models import Node
    from fleetctl.jobs import spares_sync

    settings = make_settings(sqlite_url)
    settings.spares_per_island = 1
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4", "n5"])
    with Session(engine) as session:
        for node in session.exec(select(Node)):
            node.island = "ib-a"
            session.add(node)
        session.commit()
    assert spares_sync.fill(engine, 1, lambda kind: sim).pools == {"ib-a": ("n1",)}
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n2", "n3")  # first fit passes over the spare

    async def body(client):
        return await (await start_job_restart(client, settings, _restart(job.job_id, ["n2"]))).result()

    result: JobRestartResult = await _with_worker(settings, body)

    assert sorted(result.new_nodes) == ["n1", "n3"]
    (row,) = jobs.job_restarts(engine, job.job_id)
    assert (row.spares_taken, row.placement_detail) == (["n1"], "island ib-a: n1 for n2 (spare n1)")
    assert spare_store.held(engine) == {"n4": "ib-a"}  # refilled once the job ran
    assert sim.submit("other", node_count=2).state == "pending"  # n5 alone is free: n4 is held


async def _held_after_a_failed_check(client, settings, engine, node: str) -> None:
    """`node` as a held drain leaves it: a sweep's check failed on it and the capacity guard (the
    real one, with the fleet at its limit) refused its drain: `CheckFailed(1),DrainHeld`."""
    from fleetctl.db import queries
    from fleetctl.db.models import CheckRun
    from fleetctl.nodes.capacity import RemovalDecision, RemovalRequest
    from fleetctl.nodes.view_store import node_rows
    from fleetctl.workflows.api import REQUEST_REMOVAL_UPDATE
    from fleetctl.workflows.client import ensure_capacity_guard

    key = f"test/{node}/nvidia-smi-query/{uuid.uuid4().hex[:6]}"
    queries.insert_once(
        engine,
        CheckRun(
            node_name=node,
            check_name="nvidia-smi-query",
            kind="nvidia-smi-query",
            status="fail",
            reason="uncorrectable ECC 2",
            idempotency_key=key,
        ),
        CheckRun.idempotency_key,
        key,
    )
    guard = await ensure_capacity_guard(client, settings)
    decision = await guard.execute_update(
        REQUEST_REMOVAL_UPDATE,
        RemovalRequest(
            node=node,
            rack="",
            reason="sweep: nvidia-smi-query: uncorrectable ECC 2",
            actor="sweep",
            request_id=f"held/{node}",
        ),
        result_type=RemovalDecision,
    )
    assert not decision.granted and "fleet limit" in decision.reason, decision
    (row,) = list(node_rows(engine, [queries.get_node(engine, node)], wide=False))
    assert row["health"] == "CheckFailed(1),DrainHeld"


def _islands(engine, islands: dict[str, str]) -> None:
    from sqlmodel import Session, select

    from fleetctl.db.models import Node

    with Session(engine) as session:
        for node in session.exec(select(Node)):
            node.island = islands.get(node.name, "")
            session.add(node)
        session.commit()


async def test_a_held_node_is_never_a_restarts_replacement_in_the_island(make_settings, sqlite_url) -> None:
    """n3 failed a check and the guard holds its drain. First fit in the island would
    take it (n3 sorts first); the restart names n4."""
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4", "n5"])
    sim_fleet(engine, ["n9"], state="maintenance")  # the fleet at its limit: the guard holds n3's drain
    _islands(engine, dict.fromkeys(("n1", "n2", "n3", "n4", "n5"), "ib-a"))
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")

    async def body(client):
        await _held_after_a_failed_check(client, settings, engine, "n3")
        return await (await start_job_restart(client, settings, _restart(job.job_id, ["n1"]))).result()

    result: JobRestartResult = await _with_worker(settings, body)

    assert result.new_nodes == ["n2", "n4"]
    (row,) = jobs.job_restarts(engine, job.job_id)
    assert (row.placement, row.placement_detail) == ("island", "island ib-a: n4 for n1")


async def test_a_held_node_is_never_a_restarts_replacement_in_the_fleet(make_settings, sqlite_url) -> None:
    """The island has no healthy free node but the held n3: the restart falls back to the
    fleet, and the scheduler is told to avoid n3 as well as the bad node; the job runs on n4
    of the other island."""
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4"])
    sim_fleet(engine, ["n9"], state="maintenance")
    _islands(engine, {"n1": "ib-a", "n2": "ib-a", "n3": "ib-a", "n4": "ib-b"})
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")

    async def body(client):
        await _held_after_a_failed_check(client, settings, engine, "n3")
        return await (await start_job_restart(client, settings, _restart(job.job_id, ["n1"]))).result()

    result: JobRestartResult = await _with_worker(settings, body)

    assert result.new_nodes == ["n2", "n4"]
    (row,) = jobs.job_restarts(engine, job.job_id)
    assert row.placement == "fleet" and row.placement_detail.startswith("island ib-a has 0 healthy free nodes")


def _suspect_and_unreachable(engine, node: str) -> None:
    """`node` as the reachability judge leaves one whose checks time out: `Suspect,Unreachable`."""
    from fleetctl.db import queries
    from fleetctl.db.models import AutomationEvent, CheckRun

    key = f"test/{node}/nvidia-smi-query/{uuid.uuid4().hex[:6]}"
    queries.insert_once(
        engine,
        CheckRun(
            node_name=node,
            check_name="nvidia-smi-query",
            kind="nvidia-smi-query",
            status="error",
            error_kind="timeout",
            reason="ssh: timed out after 30s",
            idempotency_key=key,
        ),
        CheckRun.idempotency_key,
        key,
    )
    key = f"test/{node}/suspect/{uuid.uuid4().hex[:6]}"
    queries.insert_once(
        engine,
        AutomationEvent(
            kind="suspect", node_name=node, actor="active-checks", reason="3 checks timed out", idempotency_key=key
        ),
        AutomationEvent.idempotency_key,
        key,
    )


async def test_with_every_free_node_unfit_a_restart_lands_on_none_of_them(make_settings, sqlite_url) -> None:
    """n3 is Suspect and Unreachable, n4 failed a check and the guard holds its drain: the only
    free nodes once the job leaves n1. The scheduler is told to keep the job off both, and keeps
    it off them pass after pass: the job waits, and the restart fails saying so."""
    from fleetctl.db import queries
    from fleetctl.nodes.view_store import node_rows

    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4"])
    sim_fleet(engine, ["n9"], state="maintenance")  # the fleet at its limit: the guard holds n4's drain
    sim.drain("n9", "maintenance")  # as its own drain left it
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")
    _suspect_and_unreachable(engine, "n3")

    async def body(client):
        await _held_after_a_failed_check(client, settings, engine, "n4")
        handle = await start_job_restart(client, settings, _restart(job.job_id, ["n1"], running_timeout_s=2.0))
        with pytest.raises(WorkflowFailureError) as failed:
            await handle.result()
        return failed.value

    (row,) = node_rows(engine, [queries.get_node(engine, "n3")], wide=False)
    assert row["health"] == "Suspect,Unreachable"
    failure = await _with_worker(settings, body)

    assert "not running again after 2s (last seen pending)" in str(failure.cause)
    assert sim.job(job.job_id).state == "pending"  # a pass of its own, after the restart gave up
    assert not {"n3", "n4"} & sim.busy_nodes()
