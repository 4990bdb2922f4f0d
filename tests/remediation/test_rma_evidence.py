"""An RMA's evidence holds the cause: every coded or rated health event of the node since it
last entered production, whatever sent it (the agent, the intake, a kernel log, the CLI),
with a minor event's repeats one entry, so that no burst pushes the cause out."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest
from temporalio.testing import ActivityEnvironment

from fleetctl.db import queries
from fleetctl.db import remediation as rma_db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import HealthEvent, utcnow
from fleetctl.inventory.parse import parse_inventory
from fleetctl.remediation.rma import health_history, render_markdown
from fleetctl.workflows.activities.remediation import RemediationActivities
from fleetctl.workflows.api import RmaRequest

T0 = datetime(2025, 3, 1, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Row:
    source: str
    code: int | None
    severity: str
    at_s: int
    message: str = ""
    action: str = ""
    id: int = 0

    @property
    def at(self) -> datetime:
        return T0 + timedelta(seconds=self.at_s)


def _shown(rows: list[Row]) -> list[tuple]:
    return [
        (e["source"], e["code"], e["severity"], e["count"], e["at"][17:19], e["last_at"][17:19])
        for e in health_history(rows)
    ]


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        # Whatever the source, a coded event is evidence.
        (
            [Row("log", 64, "critical", 1), Row("agent", 79, "critical", 2), Row("intake", 48, "critical", 3)],
            [
                ("log", 64, "critical", 1, "01", "01"),
                ("agent", 79, "critical", 1, "02", "02"),
                ("intake", 48, "critical", 1, "03", "03"),
            ],
        ),
        # A burst of a minor event after the cause is one entry; the cause stays, first.
        (
            [Row("log", 64, "critical", 1), *[Row("agent", 31, "info", 2 + k) for k in range(150)]],
            [("log", 64, "critical", 1, "01", "01"), ("agent", 31, "info", 150, "02", "31")],
        ),
        # Critical repeats are each kept: every one may be what the vendor needs.
        (
            [Row("agent", 79, "critical", 5), Row("agent", 79, "critical", 6)],
            [("agent", 79, "critical", 1, "05", "05"), ("agent", 79, "critical", 1, "06", "06")],
        ),
        # Without a code: a rated event (a signature, an operator's report) is evidence, an info note is not.
        (
            [
                Row("agent", None, "critical", 1, "nvswitch_sxid_fatal"),
                Row("operator", None, "warning", 2, "link flapping"),
                Row("operator", None, "warning", 3, "link flapping"),
                Row("operator", None, "warning", 4, "fan noisy"),
                Row("operator", None, "info", 5, "looked at it"),
            ],
            [
                ("agent", None, "critical", 1, "01", "01"),
                ("operator", None, "warning", 2, "02", "03"),
                ("operator", None, "warning", 1, "04", "04"),
            ],
        ),
        # The same minor code from two sources is two entries (who saw it is evidence too).
        (
            [Row("agent", 31, "info", 1), Row("intake", 31, "info", 2), Row("agent", 31, "info", 3)],
            [("agent", 31, "info", 2, "01", "03"), ("intake", 31, "info", 1, "02", "02")],
        ),
        # Given newest first (as the query returns them), the history is still oldest first.
        (
            [Row("agent", 31, "info", 9), Row("log", 64, "critical", 1)],
            [("log", 64, "critical", 1, "01", "01"), ("agent", 31, "info", 1, "09", "09")],
        ),
        ([], []),
    ],
)
def test_health_history(rows: list[Row], expected: list[tuple]) -> None:
    assert _shown(rows) == expected


def _event(node: str, source: str, code: int | None, severity: str, at: datetime, key: str) -> HealthEvent:
    return HealthEvent(node_name=node, source=source, code=code, severity=severity, at=at, idempotency_key=key)


def test_the_cause_survives_a_burst_and_what_came_before_production_is_left_out(make_settings, sqlite_url) -> None:
    """The bundle the RMA activity writes: the node's XID 64 from a kernel log, then 150
    minor Xids from its agent. An XID 79 from before the node last entered production is
    another episode (its own RMA's), not this one's evidence."""
    from fleetctl.nodes.lifecycle import NodeState

    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(engine, parse_inventory("nodes:\n  - {name: n1, address: sim://n1, profile: h100-sxm}\n"))
    now = utcnow()
    queries.insert_once(
        engine, _event("n1", "xid", 79, "critical", now - timedelta(hours=2), "old"), HealthEvent.idempotency_key, "old"
    )
    queries.record_transition(
        engine,
        node_name="n1",
        from_state=NodeState.NEW.value,
        to_state=NodeState.PRODUCTION.value,
        trigger="adopt",
        cause="adopted",
        actor="t",
        actor_kind="operator",
        workflow_id="node/n1",
        run_id="r",
        expected_version=0,
        idempotency_key="node/n1@0",
        at=now - timedelta(hours=1),
    )
    rows = [_event("n1", "log", 64, "critical", now - timedelta(minutes=30), "cause")]
    rows += [_event("n1", "agent", 31, "info", now - timedelta(minutes=29, seconds=-k), f"b{k}") for k in range(150)]
    for row in rows:
        queries.insert_once(engine, row, HealthEvent.idempotency_key, row.idempotency_key)

    opened = ActivityEnvironment().run(
        RemediationActivities(settings, executors=None).open_rma, RmaRequest(node="n1", reason="XID 64", actor="t")
    )
    evidence = rma_db.get_rma(engine, opened.rma_id).evidence
    assert [(e["source"], e["code"], e["count"]) for e in evidence["health_history"]] == [
        ("log", 64, 1),
        ("agent", 31, 150),
    ]
    assert "| log | 64 | critical |" in render_markdown(evidence)


def test_a_bundle_stored_before_renders_its_xid_history() -> None:
    """`rma show` renders bundles written by an older fleetctl (schema 1: `xid_history`)."""
    old = {
        "schema": "fleetctl.rma/1",
        "reason": "XID 79",
        "opened_at": "2025-03-01T12:00:00+00:00",
        "node": {"name": "n1", "rack": "r1", "profile": "h100-sxm", "address": "a", "bmc_address": None},
        "identity": {"gpus": [], "driver_version": None, "firmware": {}},
        "failing_checks": [],
        "xid_history": [{"code": 79, "severity": "critical", "action": "reboot", "message": "off the bus", "at": "t"}],
        "remediation": [],
        "transitions": [],
    }
    assert "| t | t | 1 | xid | 79 | critical | reboot | off the bus |" in render_markdown(old)


@pytest.mark.temporal
async def test_an_xid_64_from_a_kernel_log_is_in_its_rmas_evidence(fleet_settings) -> None:
    """`fleetctl node event --from-log` with a kernel log's XID 64: the node is drained, the
    ecc-uncorrectable-rma runbook opens its RMA, and the Xid the log named is in the bundle,
    its source the log (the CLI's --xid events alone were kept before)."""
    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.workflows.definitions.shared import QUICK
    from tests.support.running_fleet import running_fleet
    from tests.support.worker import DRAIN_LOOKS_OFTEN

    async with running_fleet(fleet_settings) as fleet:
        (node,) = await fleet.add(1, **DRAIN_LOOKS_OFTEN)
        log = fleet_settings.db_url.removeprefix("sqlite:///") + ".kern.log"
        with open(log, "w") as f:
            f.write("[ 8123.456789] NVRM: Xid (PCI:0000:2b:00): 64, pid=4242, Row Remapper Error: remapping failed\n")
        sent = await asyncio.to_thread(
            CliRunner().invoke,
            app,
            [
                "--db-url",
                fleet_settings.db_url,
                "--temporal-address",
                fleet_settings.temporal_address,
                "--task-queue",
                fleet_settings.task_queue,
                "--fleet",
                fleet_settings.fleet,
                "node",
                "event",
                node,
                "--from-log",
                log,
            ],
        )
        assert sent.exit_code == 0, sent.output
        # The runbook's steps are each a handful of quick activities; the drain waits for no job.
        bound_s = 40 * QUICK["start_to_close_timeout"].total_seconds()
        deadline = time.monotonic() + bound_s
        while not rma_db.rma_records(fleet.engine, node_name=node):
            assert time.monotonic() < deadline, f"no RMA for {node} within {bound_s:g} s"
            await asyncio.sleep(0.2)
        (record,) = rma_db.rma_records(fleet.engine, node_name=node)
        history = record.evidence["health_history"]
        assert [(e["source"], e["code"]) for e in history] == [("log", 64)]
        assert "Row Remapper Error" in history[0]["message"]
