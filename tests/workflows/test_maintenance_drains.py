"""Maintenance is not failure: an operator's drain says what it is, and only a
fault counts in the lemon rule, MTTF and MTTR. End to end: CLI -> Temporal -> worker ->
database -> `node show` and the report, with the fleet's own runbooks loaded (the escalation
ladder is a fallback that takes any fault: a maintenance drain must start none)."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest
from sqlmodel import Session, select

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import RemediationRun, utcnow
from fleetctl.reliability.report_store import build_report
from fleetctl.workflows.client import connect
from tests.cli.test_what_operators_see import DRAINED_S
from tests.support.fleet import Cli, wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

PLANNED_REASON = "PDU maintenance"


async def _drain_to_maintenance(cli: Cli, engine, name: str, *flags: str) -> None:
    result = await asyncio.to_thread(cli, "node", "drain", name, "--reason", PLANNED_REASON, "--yes", *flags)
    assert result.exit_code == 0, result.output
    await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", DRAINED_S, f"{name} in maintenance")


async def _undrain(cli: Cli, engine, name: str) -> None:
    result = await asyncio.to_thread(cli, "node", "undrain", name)
    assert result.exit_code == 0, result.output
    assert queries.get_node(engine, name).state == "production"


async def _show(cli: Cli, name: str, what: str = "show") -> dict | list:
    result = await asyncio.to_thread(cli, "node", what, name, "-o", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


async def test_four_maintenance_drains_are_no_remediation_no_lemon_and_no_repair(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(settings.db_url)
    cli = Cli(settings)
    worker = WorkerThread(settings).start()
    try:
        planned, faulty = make_fleet(settings, 2)
        client = await connect(settings)
        for name in (planned, faulty):
            await start_in_production(client, settings, name)
        since = utcnow()

        for _ in range(4):
            await _drain_to_maintenance(cli, engine, planned)
            show = await _show(cli, planned)
            assert show["out_for"] == "maintenance"
            await _undrain(cli, engine, planned)

        show = await _show(cli, planned)
        assert show["remediated"]["times"] == 0
        assert show["out_for"] == ""
        drains = [e for e in await _show(cli, planned, "history") if e["to"] == "draining"]
        assert [(e["for"], e["failure"]) for e in drains] == [("maintenance", "maintenance")] * 4
        with Session(engine) as session:  # no runbook took a planned drain on
            assert list(session.exec(select(RemediationRun).where(RemediationRun.node_name == planned))) == []

        # The same reason said to be a fault (--failure: no code, so no runbook takes it on):
        # one remediation, one failure and its repair.
        await _drain_to_maintenance(cli, engine, faulty, "--failure")
        show = await _show(cli, faulty)
        assert show["out_for"] == "failure: operator" and show["remediated"]["times"] == 1
        await _undrain(cli, engine, faulty)

        report = build_report(
            engine, since, utcnow(), fleet=settings.fleet, lemon_threshold=3, lemon_window=timedelta(days=7)
        )
        assert report["lemons"] == []
        s = report["summary"]
        assert (s["failures"], s["repairs"], s["causes"]) == (1, 1, {"operator": 1})
    finally:
        worker.stop()


@pytest.mark.parametrize(
    "flags, message",
    [
        (("--maintenance", "--xid", "79"), "--maintenance is planned work"),
        (("--check", "nccl-allreduce", "--xid", "79"), "--check or --xid, not both"),
        (("--check", "no-such-check"), "no such check"),
    ],
)
def test_a_drain_that_says_two_things_is_a_usage_error(make_settings, sqlite_url, flags, message) -> None:
    cli = Cli(make_settings(sqlite_url))
    result = cli("node", "drain", "any-node", "--reason", "x", *flags)
    assert result.exit_code == 2 and message in result.stderr
