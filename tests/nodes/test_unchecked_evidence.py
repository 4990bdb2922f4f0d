"""Stale evidence is not Ready: a busy node whose newest check is from burn-in and
that has no agent read `Ready`; it reads `Stale(age)`, never `Unchecked` (a node no check
has judged), with when it was last checked and, where its jobs are known, why not since. Its fleet's sweep schedule says how old is too old: `fleetctl
schedule` records each sweep's interval in the database (fleetctl.db.sweep_intervals), so
`node list` and `node show` judge alike without asking Temporal, in a query or two however
many nodes there are."""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from datetime import timedelta

import pytest
from sqlalchemy import event
from sqlmodel import Session, select

from fleetctl.db import queries, sweep_intervals
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun, Job, Node, utcnow
from fleetctl.nodes.view_store import freshness, node_rows
from fleetctl.workflows.api import SweepInput
from fleetctl.workflows.client import connect, sweep_schedule
from tests.support.fleet import Cli
from tests.support.sim_fleet import make_fleet

STALE_REASON = re.compile(r"last checked 2d ago, at \d{4}-\d\d-\d\dT\d\d:\d\dZ \(sweep every 1h, no agent reports\)")


def _checked(engine, node: str, at) -> None:
    key = uuid.uuid4().hex
    queries.insert_once(
        engine,
        CheckRun(
            node_name=node,
            check_name="nvidia-smi-query",
            kind="x",
            status="pass",
            reason="pass",
            started_at=at,
            finished_at=at,
            idempotency_key=key,
        ),
        CheckRun.idempotency_key,
        key,
    )


def _in_production(engine, names) -> None:
    with Session(engine) as session:  # as their workflows would have them
        for node in session.exec(select(Node).where(Node.name.in_(names))):  # type: ignore[attr-defined]
            node.state = "production"
            session.add(node)
        session.commit()


async def _run(cli: Cli, *args: str):
    result = await asyncio.to_thread(cli, *args)
    assert result.exit_code == 0, result.output
    return result


async def _shown(cli: Cli, name: str) -> dict:
    return json.loads((await _run(cli, "node", "show", name, "-o", "json")).stdout)


async def _listed(cli: Cli) -> dict[str, dict]:
    return {row["name"]: row for row in json.loads((await _run(cli, "node", "list", "-o", "json")).stdout)}


async def _table(cli: Cli) -> dict[str, str]:
    lines = (await _run(cli, "node", "list")).stdout.splitlines()
    return {line.split()[0]: line for line in lines[1:]}


def _stale(row: dict) -> dict:
    (found,) = [c for c in row["conditions"] if c["type"] == "Stale"]
    return found


@pytest.mark.temporal
async def test_evidence_older_than_the_sweep_interval_without_an_agent_is_stale(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(settings.db_url)
    cli = Cli(settings)
    stale, fresh, heard = make_fleet(settings, 3)
    _in_production(engine, [stale, fresh, heard])
    now = utcnow()
    _checked(engine, stale, now - timedelta(days=2))  # burn-in's, two days ago
    _checked(engine, fresh, now - timedelta(minutes=5))
    _checked(engine, heard, now - timedelta(days=2))  # as old, but its agent reports
    with Session(engine) as session:
        node = session.exec(select(Node).where(Node.name == heard)).one()
        node.agent_seen_at = now
        session.add(node)
        session.commit()

    # No sweep scheduled for the fleet: nothing says how old is too old, so nothing is judged.
    assert (await _shown(cli, stale))["health"] == "Ready"
    assert (await _listed(cli))[stale]["health"] == "Ready"

    schedule = f"sweep-{uuid.uuid4().hex[:6]}"
    await _run(cli, "schedule", "create", "active-checks", "--every", "1h", "--name", schedule)
    client = await connect(settings)
    try:
        shown, listed, table = await _shown(cli, stale), await _listed(cli), await _table(cli)
        # node list and node show: the same judgement, the evidence's age in the HEALTH cell.
        assert shown["health"] == listed[stale]["health"] == "Stale(2d)"
        assert _stale(shown)["reason"] == _stale(listed[stale])["reason"]
        assert STALE_REASON.fullmatch(_stale(shown)["reason"])
        assert table[stale].split()[2] == "Stale(2d)"
        for name in (fresh, heard):  # a fresh check, or an agent that reports
            assert listed[name]["health"] == "Ready" and table[name].split()[2] == "Ready"
            assert (await _shown(cli, name))["health"] == "Ready"

        # Paused, the sweep refreshes nothing: how old is too old is not known.
        await _run(cli, "schedule", "pause", schedule)
        assert (await _listed(cli))[stale]["health"] == "Ready"
        await _run(cli, "schedule", "unpause", schedule)
        assert (await _listed(cli))[stale]["health"] == "Stale(2d)"

        # A schedule made outside fleetctl (the temporal CLI, an older fleetctl) counts from the
        # next `schedule list`, which records what Temporal holds.
        await _run(cli, "schedule", "delete", schedule, "--yes")
        assert (await _listed(cli))[stale]["health"] == "Ready"
        await client.create_schedule(
            schedule,
            sweep_schedule(settings, schedule, timedelta(hours=1), SweepInput(fleet=settings.fleet, actor="t")),
        )
        assert (await _listed(cli))[stale]["health"] == "Ready"  # not recorded yet
        await _run(cli, "schedule", "list")
        assert (await _listed(cli))[stale]["health"] == "Stale(2d)"
    finally:
        await client.get_schedule_handle(schedule).delete()


def test_node_list_reads_the_sweep_interval_in_one_query(sqlite_url) -> None:
    """The sweep interval costs node list one query, the same for 10 nodes or 200; another
    fleet's schedule, or a paused one, is not this fleet's interval."""
    engine = get_engine(sqlite_url)
    old = utcnow() - timedelta(days=2)
    sweep_intervals.record(engine, sweep_intervals.SweepSchedule("hourly", "default", 3600.0))
    sweep_intervals.record(engine, sweep_intervals.SweepSchedule("fast", "default", 600.0, paused=True))
    sweep_intervals.record(engine, sweep_intervals.SweepSchedule("blue", "blue", 60.0))
    statements: list[str] = []
    event.listen(engine, "before_cursor_execute", lambda *args: statements.append(args[2]))

    def listed(count: int) -> tuple[int, list[dict]]:
        from fleetctl.inventory.parse import NodeSpec

        queries.upsert_nodes(
            engine,
            [NodeSpec(f"n{i:03d}", f"sim://n{i:03d}", "h100-sxm", rack="r1", scheduler="sim") for i in range(count)],
        )
        _in_production(engine, [f"n{i:03d}" for i in range(count)])
        for i in range(count):
            _checked(engine, f"n{i:03d}", old)
        statements.clear()
        rows = node_rows(engine, queries.list_nodes(engine), False, freshness(engine, "default", 300.0, utcnow()))
        return len(statements), rows

    few, rows = listed(10)
    queries.insert_once(
        engine, Job(job_id="sim-busy", scheduler="sim", state="running", nodes=["n000"]), Job.job_id, "sim-busy"
    )
    many, rows = listed(200)
    assert few == many, (few, many)
    assert {r["health"] for r in rows} == {"Stale(2d)"}
    why = {r["name"]: _stale(r)["reason"] for r in rows}
    assert all(STALE_REASON.fullmatch(reason) for name, reason in why.items() if name != "n000")
    # Why it was not checked since: the sweep checks only idle nodes, and this one runs a job.
    assert STALE_REASON.fullmatch(why["n000"].removesuffix("; not since: busy with job sim-busy"))
    assert why["n000"].endswith("; not since: busy with job sim-busy")
    statements.clear()
    assert freshness(engine, "default", 300.0, utcnow()).sweep_every_s == 3600.0 and len(statements) == 1
    assert freshness(engine, "green", 300.0, utcnow()).sweep_every_s is None
