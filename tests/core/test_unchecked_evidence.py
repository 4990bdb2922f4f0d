"""Stale evidence is not Ready (issue 29): a busy node whose newest check is from burn-in and
that has no agent read `Ready`. Its fleet's sweep schedule says how old is too old; `node
show` asks Temporal for it (`node list` reads the database alone, which does not hold it)."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun, Node, utcnow
from tests.lifecycle.conftest import make_fleet
from tests.reliability.support import Cli
from workflows.client import connect

pytestmark = pytest.mark.temporal


def _checked(engine, node: str, at) -> None:
    key = uuid.uuid4().hex
    queries.insert_once(engine, CheckRun(node_name=node, check_name="nvidia-smi-query", kind="x", status="pass",
                                         reason="pass", started_at=at, finished_at=at, idempotency_key=key),
                        CheckRun.idempotency_key, key)


async def _health(cli: Cli, name: str) -> dict:
    result = await asyncio.to_thread(cli, "node", "show", name, "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


async def test_evidence_older_than_the_sweep_interval_without_an_agent_is_unchecked(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(settings.db_url)
    cli = Cli(settings)
    stale, fresh = make_fleet(settings, 2)
    with Session(engine) as session:  # in production, as their workflows would have them
        for name in (stale, fresh):
            node = session.exec(select(Node).where(Node.name == name)).one()
            node.state = "production"
            session.add(node)
        session.commit()
    now = utcnow()
    _checked(engine, stale, now - timedelta(days=2))  # burn-in's, two days ago
    _checked(engine, fresh, now - timedelta(minutes=5))

    # No sweep scheduled for the fleet: nothing says how old is too old, so nothing is judged.
    assert (await _health(cli, stale))["health"] == "Ready"

    schedule = f"sweep-{uuid.uuid4().hex[:6]}"
    result = await asyncio.to_thread(cli, "schedule", "create", "active-checks", "--every", "1h", "--name", schedule)
    assert result.exit_code == 0, result.output
    try:
        row = await _health(cli, stale)
        assert row["health"] == "Unchecked"
        (unchecked,) = [c for c in row["conditions"] if c["type"] == "Unchecked"]
        assert unchecked["reason"] == "newest evidence 2d old (sweep every 1h) and no agent reports"
        assert (await _health(cli, fresh))["health"] == "Ready"
    finally:
        client = await connect(settings)
        await client.get_schedule_handle(schedule).delete()
