"""`fleetctl node import --adopt`: a fleet already running jobs is brought in as
production as it runs, with no burn-in and no drain; each node is recorded as adopted and
unchecked, and the next sweep checks the idle ones, through the guard."""

from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlmodel import Session, select
from temporalio.client import Client

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Job, JobRestart, SimSchedulerNode
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.sim.store import add_fault
from fleetctl.workflows.api import SweepInput, node_workflow_id
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.worker import build_worker
from tests.support.fleet import Cli

pytestmark = pytest.mark.temporal


def _inventory(tmp_path, names) -> str:
    path = tmp_path / "running-fleet.yaml"
    path.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, bmc: sim://{n}-bmc, rack: r1, profile: h100-sxm, scheduler: sim}}\n"
            for n in names
        )
    )
    return str(path)


def _no_drain_anywhere(engine, names) -> None:
    """The simulated scheduler's own record: no node drained, by fleetctl or anyone."""
    sim = SimScheduler(engine)
    assert [n for n in names if sim.node_state(n).drained] == []
    with Session(engine) as session:
        rows = list(session.exec(select(SimSchedulerNode).where(SimSchedulerNode.node_name.in_(names))))  # type: ignore[attr-defined]
    assert [(r.node_name, r.reason) for r in rows if r.drained] == []


async def test_adopt_imports_a_fleet_running_jobs_without_a_single_drain(make_settings, sqlite_url, tmp_path) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    names = [f"ad-{uuid.uuid4().hex[:6]}-{i}" for i in range(4)]
    # The fleet trains already: a job on its first two nodes, as its scheduler runs it.
    job_id = f"sim-{uuid.uuid4().hex[:6]}"
    with Session(engine) as session:
        session.add(Job(job_id=job_id, name="train", scheduler="sim", state="running", nodes=names[:2], node_count=2))
        session.commit()
    busy, idle = names[:2], names[2:]
    add_fault(engine, idle[1], "row-remap-pending", gpu=2)  # found by the first sweep

    client = await Client.connect(settings.temporal_address)
    with ThreadPoolExecutor(16) as pool:
        async with build_worker(client, settings, pool):
            cli = Cli(settings)
            r = await asyncio.to_thread(cli, "node", "import", "--adopt", _inventory(tmp_path, names))
            assert r.exit_code == 0, r.output
            assert "4 created" in r.stdout and "4 adopted in production" in r.stdout

            for n in names:
                # the node's workflow runs, in production past its adoption
                current = await client.get_workflow_handle(node_workflow_id(n)).query(NodeLifecycle.current)
                assert (current.state, current.state_version, current.work) == ("production", 1, [])
                (event,) = queries.node_events(engine, n)  # adopted: no burn-in, no admission
                assert (event.from_state, event.to_state, event.trigger, event.actor, event.actor_kind) == (
                    "new",
                    "production",
                    "adopt",
                    "alice@console",
                    "operator",
                )
                assert event.cause.startswith("adopted")
            rows = {
                row["name"]: row
                for row in json.loads((await asyncio.to_thread(cli, "node", "list", "-o", "json")).stdout)
            }
            assert {n: rows[n]["health"] for n in names} == dict.fromkeys(names, "Unchecked")
            _no_drain_anywhere(engine, names)
            running = SimScheduler(engine).job(job_id)
            assert (running.state, running.nodes) == ("running", tuple(busy))
            # Imported again with --adopt: nodes fleetctl knows keep their state and history.
            again = await asyncio.to_thread(cli, "node", "import", "--adopt", _inventory(tmp_path, names))
            assert again.exit_code == 0 and "4 unchanged; 0 adopted" in again.stdout, again.output
            assert [len(queries.node_events(engine, n)) for n in names] == [1, 1, 1, 1]

            # The next sweep checks the idle adopted nodes only; the one whose check fails
            # is drained through the guard (one of four: within the fleet's limit).
            result = await client.execute_workflow(
                ActiveCheckSweep.run,
                SweepInput(suite="quick", max_concurrent=4, fleet=settings.fleet),
                id=f"adopt-sweep-{names[0]}",
                task_queue=settings.task_queue,
            )

    assert result.checked == 2 and result.failed == [idle[1]] and result.drained == [idle[1]], result
    for n in busy:
        assert queries.latest_checks(engine, n) == []
    assert queries.latest_checks(engine, idle[0]) and queries.get_node(engine, idle[0]).state == "production"
    assert queries.get_node(engine, idle[1]).state in ("draining", "maintenance")
    (grant,) = [e for e in queries.automation_events(engine, limit=50) if e.node_name == idle[1]]
    assert grant.kind == "grant"
    _no_drain_anywhere(engine, [*busy, idle[0]])
    running = SimScheduler(engine).job(job_id)
    assert (running.state, running.nodes) == ("running", tuple(busy))
    with Session(engine) as session:
        assert session.exec(select(Job.restart_count).where(Job.job_id == job_id)).one() == 0  # never requeued
        assert list(session.exec(select(JobRestart))) == []
