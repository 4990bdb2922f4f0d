"""The shadow run: in automation's dry run an XID 79 leaves its node in production, and
`fleetctl report --automation -o json` names the drain automation would have made, beside an
operator's drain of another node; the agreement counted per node and act
(fleetctl.reliability.automation_shadow)."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.db import queries
from fleetctl.reliability.automation_shadow import AGREE_WITHIN, Act, Did, Doer, Would, shadow_report
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import request_transition, send_health_events
from fleetctl.workflows.definitions.shared import QUICK
from tests.support.fleet import Cli, wait_for
from tests.support.running_fleet import running_fleet

T0 = datetime(2026, 1, 5, 12, tzinfo=UTC)
# A decision is a handful of activities, each bounded by QUICK's start-to-close.
DECISION_S = 5 * QUICK["start_to_close_timeout"].total_seconds()


def would(node: str, hours: float, act: Act = Act.DRAIN) -> Would:
    return Would(node, act, T0 + timedelta(hours=hours), "XID 79")


def did(node: str, hours: float, act: Act = Act.DRAIN, by: Doer = Doer.OPERATOR) -> Did:
    return Did(node, act, T0 + timedelta(hours=hours), by, "reseat")


@pytest.mark.parametrize(
    "automation,happened,agreed,automation_only,happened_only",
    [
        ([would("a", 0)], [did("a", 2)], 1, 0, 0),  # both drained it, two hours apart
        ([would("a", 0)], [did("a", 2, by=Doer.OUTSIDE)], 1, 0, 0),  # NHC drained it outside fleetctl
        ([would("a", 0)], [did("a", 30)], 0, 1, 1),  # more than a day apart: two judgements
        ([would("a", 0)], [did("b", 1)], 0, 1, 1),  # another node
        ([would("a", 0)], [did("a", 1, Act.RMA)], 0, 1, 1),  # an RMA is no drain
        ([would("a", 0), would("a", 1)], [did("a", 1)], 1, 1, 0),  # each act that happened agrees once
        ([would("a", 0, Act.RUNBOOK)], [], 0, 0, 0),  # a runbook is listed, never counted
        ([would("a", 0, Act.RMA)], [did("a", 3, Act.RMA)], 1, 0, 0),
    ],
)
def test_agreement_is_counted_per_node_and_act_within_a_day(
    automation, happened, agreed, automation_only, happened_only
) -> None:
    shadow = shadow_report(automation, happened, T0, T0 + timedelta(days=7), dry_run=True)
    assert (shadow["agreed"], shadow["automation_only"], shadow["happened_only"]) == (
        agreed,
        automation_only,
        happened_only,
    )
    acts = agreed + automation_only + happened_only
    assert shadow["agreement"] == (agreed / acts if acts else None)
    assert timedelta(hours=24) == AGREE_WITHIN


@pytest.fixture
def fleet_settings(make_settings, sqlite_url):
    settings = make_settings(sqlite_url)
    settings.automation_dry_run = True
    return settings


@pytest.mark.temporal
async def test_in_dry_run_an_xid_79_stays_in_production_and_the_report_names_the_drain(fleet_settings) -> None:
    async with running_fleet(fleet_settings) as fleet:
        faulty, reseated = await fleet.add(2)
        await send_health_events(
            fleet.client,
            faulty,
            [HealthEventInput(faulty, "xid", 79, "GPU has fallen off the bus", "tester", "shadow-79", time.time())],
        )
        await wait_for(
            lambda: any(e.kind == "dry_run" for e in queries.automation_events(fleet.engine, limit=20)),
            DECISION_S,
            "the guard's dry-run decision",
        )
        await request_transition(fleet.client, reseated, "drain", "alice", "reseat the cable", actor_kind="operator")
        assert queries.get_node(fleet.engine, faulty).state == "production"

        shown = Cli(fleet.settings)("report", "--automation", "-o", "json")
        assert shown.exit_code == 0, shown.output
        shadow = json.loads(shown.stdout)
        rows = {n["node"]: n for n in shadow["nodes"]}
        (drain,) = rows[faulty]["would"]
        assert drain["act"] == "drain" and "XID 79" in drain["evidence"] and "would grant" in drain["evidence"]
        assert rows[faulty]["happened"] == [] and rows[faulty]["automation_only"] == 1
        (operator,) = rows[reseated]["happened"]
        assert (operator["act"], operator["by"]) == ("drain", "operator") and "reseat the cable" in operator["detail"]
        assert (shadow["agreed"], shadow["automation_only"], shadow["happened_only"]) == (0, 1, 1)
        table = Cli(fleet.settings)("report", "--automation")
        assert table.exit_code == 0 and faulty in table.stdout and "agreement 0.00%" in table.stdout, table.output
