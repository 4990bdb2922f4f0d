"""What a restart's placement reads agrees with `node list` about stale evidence: a production
node whose newest check is older than its fleet's sweep interval, with no agent reporting, is
Stale in both (fleetctl.nodes.view_store node_health and node_rows); and a JobRestart on the
real Temporal dev server and the simulated scheduler takes a checked node before it, and it
only when nothing checked fits."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from fleetctl.db import jobs, queries, sweep_intervals
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun, Node, utcnow
from fleetctl.jobs.placement import unchecked_nodes
from fleetctl.nodes.view_store import freshness, node_health, node_rows
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.client import start_job_restart
from tests.jobs.test_job_restart import _islands, _restart, _with_worker
from tests.support.jobs import sim_fleet

SWEEP_EVERY_S = 3600.0
AGENT_SILENCE_S = 120.0


def _checked(engine, node: str, age: timedelta, status: str = "pass") -> None:
    at = utcnow() - age
    key = uuid.uuid4().hex
    queries.insert_once(
        engine,
        CheckRun(
            node_name=node,
            check_name="nvidia-smi-query",
            kind="nvidia-smi",
            status=status,
            reason=status,
            started_at=at,
            finished_at=at,
            idempotency_key=key,
        ),
        CheckRun.idempotency_key,
        key,
    )


def _agent_heard(engine, node: str, age: timedelta) -> None:
    with Session(engine) as session:
        row = session.exec(select(Node).where(Node.name == node)).one()
        row.agent_seen_at = utcnow() - age
        session.add(row)
        session.commit()


def _sweep(engine, fleet: str) -> None:
    sweep_intervals.record(engine, sweep_intervals.SweepSchedule(f"sweep-{fleet}", fleet, SWEEP_EVERY_S))


# (what the node has, Unchecked or Stale to node list, taken last by the placement alike)
CASES = {
    "stale": (lambda e, n: _checked(e, n, timedelta(days=2)), True),
    "fresh": (lambda e, n: _checked(e, n, timedelta(minutes=5)), False),
    "stale, its agent reports": (
        lambda e, n: (_checked(e, n, timedelta(days=2)), _agent_heard(e, n, timedelta(seconds=10))),
        False,
    ),
    "stale, its agent silent": (
        lambda e, n: (_checked(e, n, timedelta(days=2)), _agent_heard(e, n, timedelta(hours=3))),
        True,
    ),
    "never checked": (lambda e, n: None, True),
}


def test_the_placements_view_reads_unchecked_as_node_list_does(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    names = sim_fleet(engine, [f"n{i}" for i in range(len(CASES))])
    for name, (make, _) in zip(names, CASES.values(), strict=False):
        make(engine, name)
    _sweep(engine, "default")
    fresh = freshness(engine, "default", AGENT_SILENCE_S, utcnow())
    listed = {
        row["name"]: any(c["type"] in ("Unchecked", "Stale") for c in row["conditions"])
        for row in node_rows(engine, queries.list_nodes(engine), False, fresh)
    }
    placed = unchecked_nodes(node_health(engine, names, fresh).values())
    for name, (case, (_, expected)) in zip(names, CASES.items(), strict=False):
        assert listed[name] is expected and (name in placed) is expected, case
    # No sweep scheduled: nothing says how old is too old, in either (only the never-checked one).
    sweep_intervals.set_paused(engine, "sweep-default", True)
    unknown = freshness(engine, "default", AGENT_SILENCE_S, utcnow())
    assert unchecked_nodes(node_health(engine, names, unknown).values()) == {names[-1]}


async def _restart_off_n1(settings, engine, sim) -> tuple[list[str], str]:
    job = sim.submit("train", node_count=2)
    assert job.nodes == ("n1", "n2")

    async def body(client):
        return await (await start_job_restart(client, settings, _restart(job.job_id, ["n1"]))).result()

    result = await _with_worker(settings, body)
    (row,) = jobs.job_restarts(engine, job.job_id)
    return result.new_nodes, row.placement_detail


@pytest.mark.temporal
async def test_a_restart_takes_a_checked_node_before_one_nobody_has_checked_for_days(make_settings, sqlite_url) -> None:
    """n3 sorts first in the island, but its newest check is two days old (sweep every hour, no
    agent): the restart names n4, checked five minutes ago."""
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3", "n4"])
    _islands(engine, dict.fromkeys(("n1", "n2", "n3", "n4"), "ib-a"))
    for node, age in (
        ("n1", timedelta(minutes=5)),
        ("n2", timedelta(minutes=5)),
        ("n3", timedelta(days=2)),
        ("n4", timedelta(minutes=5)),
    ):
        _checked(engine, node, age)
    _sweep(engine, settings.fleet)

    assert await _restart_off_n1(settings, engine, sim) == (["n2", "n4"], "island ib-a: n4 for n1")


@pytest.mark.temporal
async def test_a_restart_still_takes_the_unchecked_node_when_nothing_checked_fits(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3"])
    _islands(engine, dict.fromkeys(("n1", "n2", "n3"), "ib-a"))
    for node, age in (("n1", timedelta(minutes=5)), ("n2", timedelta(minutes=5)), ("n3", timedelta(days=2))):
        _checked(engine, node, age)
    _sweep(engine, settings.fleet)

    assert await _restart_off_n1(settings, engine, sim) == (["n2", "n3"], "island ib-a: n3 for n1")
