"""Rule precision: each automated removal's outcome (fleetctl.reliability.metrics.removal_outcome) on
hand-written time lines, the per-rule counts, and the report's views of them on the
hand-worked history of tests/reliability/history.py (plus remediation runs this file adds)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from fleetctl.reliability import metrics
from fleetctl.reliability.metrics import NodeHistory, NodeRecord, Transition

T0 = datetime(2025, 3, 1, tzinfo=UTC)
NOW = 100.0  # hours after T0, the window [0 h, NOW]; every node is in production from -50 h


def h(hours: float) -> datetime:
    return T0 + timedelta(hours=hours)


def move(
    at: float, from_state: str, to_state: str, trigger: str = "", actor_kind: str = "automation", failure: str = ""
) -> Transition:
    return Transition("n1", from_state, to_state, h(at), trigger, "", actor_kind, failure)


def node(
    *transitions: Transition,
    repairs: tuple[float, ...] = (),
    name: str = "n1",
    rmas: tuple[tuple[float, str], ...] = (),
) -> NodeHistory:
    admitted = move(-50, "admission", "production", "enter_production")
    return NodeHistory(
        NodeRecord(name, "r1", "h100-sxm", h(-51)),
        (admitted, *transitions),
        repairs=tuple(h(at) for at in repairs),
        rmas=tuple(metrics.RmaOutcome(h(at), outcome) for at, outcome in rmas),
    )


def to_rma(at: float) -> Transition:
    return move(at, "maintenance", "rma", "send_to_rma")


def drain(at: float, failure: str = "xid 79", actor_kind: str = "automation") -> list[Transition]:
    return [
        move(at, "production", "draining", "drain", actor_kind, failure),
        move(at + 1, "draining", "maintenance", "drain_complete"),
    ]


def back_through_burn_in(at: float) -> list[Transition]:
    return [
        move(at, "maintenance", "burn_in", "begin_burn_in"),
        move(at + 1, "burn_in", "admission", "begin_admission"),
        move(at + 2, "admission", "production", "enter_production"),
    ]


@pytest.mark.parametrize(
    "history, expected",
    [
        pytest.param(
            node(*drain(10), *back_through_burn_in(14)),
            [("xid 79", 10, "unchanged")],
            id="a recheck passed on the node as it was",
        ),
        pytest.param(
            node(*drain(10), move(12, "maintenance", "production", "undrain", "operator")),
            [("xid 79", 10, "unchanged")],
            id="an operator put it back",
        ),
        pytest.param(
            node(*drain(10), to_rma(13), rmas=((13, "replaced"),)),
            [("xid 79", 10, "confirmed")],
            id="sent to RMA, a part replaced",
        ),
        pytest.param(
            node(*drain(10), to_rma(13), rmas=((13, "no_fault_found"),)),
            [("xid 79", 10, "unchanged")],
            id="sent to RMA, no fault found: a false alarm",
        ),
        pytest.param(
            node(*drain(10), to_rma(13), rmas=((13, "open"),)),
            [("xid 79", 10, "open")],
            id="sent to RMA, not yet closed",
        ),
        pytest.param(node(*drain(10), to_rma(13)), [("xid 79", 10, "open")], id="sent to RMA, no record of it"),
        pytest.param(
            node(*drain(10), to_rma(13), rmas=((5, "replaced"), (13, "no_fault_found"))),
            [("xid 79", 10, "unchanged")],
            id="an RMA before the drain is another outage's",
        ),
        pytest.param(
            node(*drain(10), move(13, "maintenance", "retired", "retire", "operator")),
            [("xid 79", 10, "confirmed")],
            id="retired",
        ),
        pytest.param(
            node(*drain(10), *back_through_burn_in(14), repairs=(12,)),
            [("xid 79", 10, "confirmed")],
            id="a GPU reset or reboot passed, then the checks",
        ),
        pytest.param(
            node(*drain(10), *back_through_burn_in(14), repairs=(10,)),
            [("xid 79", 10, "confirmed")],
            id="a repair at the drain's moment counts",
        ),
        pytest.param(
            node(*drain(10), *back_through_burn_in(14), repairs=(16,)),
            [("xid 79", 10, "confirmed")],
            id="a repair at the return's moment counts",
        ),
        pytest.param(
            node(*drain(10), *back_through_burn_in(14), repairs=(9, 17)),
            [("xid 79", 10, "unchanged")],
            id="repairs before the drain or after the return are another outage's",
        ),
        pytest.param(
            node(
                *drain(10),
                move(12, "maintenance", "firmware", "begin_firmware"),
                move(13, "firmware", "burn_in", "begin_burn_in"),
                move(14, "burn_in", "admission", "begin_admission"),
                move(15, "admission", "production", "enter_production"),
            ),
            [("xid 79", 10, "confirmed")],
            id="a firmware update",
        ),
        pytest.param(
            node(
                *drain(10),
                move(12, "maintenance", "burn_in", "begin_burn_in"),
                move(13, "burn_in", "maintenance", "phase_failed"),
                to_rma(14),
                rmas=((14, "replaced"),),
            ),
            [("xid 79", 10, "confirmed")],
            id="burn-in failed, then RMA",
        ),
        pytest.param(
            node(*drain(10), move(12, "maintenance", "burn_in", "begin_burn_in")),
            [("xid 79", 10, "open")],
            id="still in burn-in",
        ),
        pytest.param(
            node(move(10, "production", "draining", "drain", failure="check nccl-allreduce")),
            [("check nccl-allreduce", 10, "open")],
            id="still draining",
        ),
        pytest.param(
            node(*drain(10, failure="")),
            [("automation", 10, "open")],
            id="a drain recording no failure is the automation's",
        ),
        pytest.param(
            node(*drain(10, failure="", actor_kind="operator"), *back_through_burn_in(14)),
            [],
            id="an operator's drain is no rule's",
        ),
        pytest.param(node(*drain(-10), *back_through_burn_in(-5)), [], id="before the window"),
        pytest.param(
            node(
                *drain(10),
                *back_through_burn_in(14),
                *drain(20, "xid 48"),
                to_rma(22),
                repairs=(15,),
                rmas=((22, "replaced"),),
            ),
            [("xid 79", 10, "confirmed"), ("xid 48", 20, "confirmed")],
            id="two removals, each its own outcome",
        ),
        pytest.param(
            node(*drain(10), *back_through_burn_in(14), *drain(20), *back_through_burn_in(24), repairs=(22,)),
            [("xid 79", 10, "unchanged"), ("xid 79", 20, "confirmed")],
            id="a repair belongs to its own outage",
        ),
    ],
)
def test_each_automated_removal_is_classified_by_what_followed(history, expected) -> None:
    got = metrics.removals(history, h(0), h(NOW))
    assert [(r.rule, r.at, r.outcome) for r in got] == [(rule, h(at), outcome) for rule, at, outcome in expected]


def test_precision_per_rule_and_which_rule_is_usually_wrong() -> None:
    def fleet(outcomes: dict[str, list[str]]) -> list[NodeHistory]:
        """One node per removal, of the rule and outcome named."""
        how = {"confirmed": lambda: [to_rma(13)], "unchanged": lambda: back_through_burn_in(14), "open": list}
        return [
            node(*drain(10, rule), *how[outcome](), name=f"{rule}-{k}", rmas=((13, "replaced"),))
            for rule, listed in outcomes.items()
            for k, outcome in enumerate(listed)
        ]

    rows = metrics.rule_precision(
        fleet(
            {
                "xid 48": ["confirmed", "unchanged", "unchanged"],  # 1/3 over 3 resolved: usually wrong
                "check hpl": ["unchanged", "unchanged", "open"],  # 0 but only 2 resolved: not yet judged
                "health": ["open"],  # none resolved: no precision
                "xid 79": ["confirmed", "confirmed", "unchanged", "unchanged"],  # exactly 50%: not under it
                "check nccl-allreduce": ["confirmed", "unchanged", "unchanged", "unchanged"],  # 25% over 4
            }
        ),
        h(0),
        h(NOW),
    )
    assert [(r.rule, r.removals, r.confirmed, r.unchanged, r.open, r.precision, r.usually_wrong) for r in rows] == [
        ("check nccl-allreduce", 4, 1, 3, 0, 0.25, True),
        ("xid 79", 4, 2, 2, 0, 0.5, False),
        ("check hpl", 3, 0, 2, 1, 0.0, False),
        ("xid 48", 3, 1, 2, 0, pytest.approx(1 / 3), True),
        ("health", 1, 0, 0, 1, None, False),
    ]


# -- the report, on the hand-worked history ----------------------------------------------------

# tests/reliability/history.py by hand: n07's three XID 48 drains, two back through a recheck (no
# repair), the third to RMA; n03's XID 79 drain back through a recheck; n05's nccl-allreduce
# drain still in maintenance; n08's operator drain is no rule's. n07's RMA is open: its third
# removal is neither confirmed nor a false alarm yet.
PLAIN = [
    {
        "rule": "xid 48",
        "removals": 3,
        "confirmed": 0,
        "unchanged": 2,
        "open": 1,
        "precision": 0.0,
        "usually_wrong": False,
    },
    {
        "rule": "check nccl-allreduce",
        "removals": 1,
        "confirmed": 0,
        "unchanged": 0,
        "open": 1,
        "precision": None,
        "usually_wrong": False,
    },
    {
        "rule": "xid 79",
        "removals": 1,
        "confirmed": 0,
        "unchanged": 1,
        "open": 0,
        "precision": 0.0,
        "usually_wrong": False,
    },
]


def _seed_runs(engine, now: datetime) -> None:
    """n03's XID 79 runbook rebooted it (passed) at +26 h: its removal is confirmed. A failed
    GPU reset on n07 (+11 h) and a dry run's reboot (+41 h) repaired nothing."""
    from fleetctl.db import remediation as db
    from tests.reliability import history

    def at(hours: float) -> datetime:
        return now - history.WINDOW + timedelta(hours=hours)

    for key, node_name, mode, action, status, hours in (
        ("r-n03", "n03", "live", "reboot", "passed", 26),
        ("r-n07a", "n07", "live", "gpu_reset", "failed", 11),
        ("r-n07b", "n07", "dry_run", "reboot", "passed", 41),
    ):
        db.start_run(
            engine,
            run_key=key,
            node_name=node_name,
            runbook="escalation-ladder",
            event={},
            mode=mode,
            actor="t",
            started_at=at(hours - 0.5),
        )
        db.record_step(
            engine,
            run_key=key,
            node_name=node_name,
            step_index=2,
            name=action,
            action=action,
            status=status,
            params={},
            detail="",
            started_at=at(hours - 0.25),
            finished_at=at(hours),
        )


def test_report_rule_precision_counts_only_live_repairs_that_passed(db_url) -> None:
    from fleetctl.db.engine import get_engine
    from fleetctl.reliability.report_store import build_report
    from tests.reliability import history

    now = datetime(2025, 3, 1, 12, tzinfo=UTC)
    engine = get_engine(db_url)
    history.seed(engine, now)
    assert build_report(engine, now - history.WINDOW, now)["rule_precision"] == PLAIN
    _seed_runs(engine, now)
    report = build_report(engine, now - history.WINDOW, now)
    assert report["rule_precision"][2] == {
        "rule": "xid 79",
        "removals": 1,
        "confirmed": 1,
        "unchanged": 0,
        "open": 0,
        "precision": 1.0,
        "usually_wrong": False,
    }
    assert report["rule_precision"][:2] == PLAIN[:2]
    # The other figures do not move (the lemon table counts n03's one run, still no lemon).
    assert [lemon["node"] for lemon in report["lemons"]] == ["n07"]


@pytest.mark.parametrize(
    "closed_as, xid_48",
    [
        # The vendor replaced a part: the third removal was right, 1 of 3.
        ("GPU5", {"confirmed": 1, "unchanged": 2, "open": 0, "precision": pytest.approx(1 / 3), "usually_wrong": True}),
        # No fault found: the third was a false alarm too, 0 of 3 (it scored 100% when an RMA
        # counted as confirmed whatever came back).
        (None, {"confirmed": 0, "unchanged": 3, "open": 0, "precision": 0.0, "usually_wrong": True}),
    ],
)
def test_an_rma_confirms_its_removal_only_when_a_part_was_replaced(db_url, closed_as, xid_48) -> None:
    from fleetctl.db import remediation as db
    from fleetctl.db.engine import get_engine
    from fleetctl.reliability.report_store import build_report
    from tests.reliability import history

    now = datetime(2025, 3, 1, 12, tzinfo=UTC)
    engine = get_engine(db_url)
    history.seed(engine, now)
    (rma,) = db.rma_records(engine, node_name="n07")
    db.close_rma(engine, rma.id, closed_as, "vendor@desk")
    rows = build_report(engine, now - history.WINDOW, now)["rule_precision"]
    assert rows[0] == {"rule": "xid 48", "removals": 3, **xid_48}
    assert rows[1:] == PLAIN[1:]


def test_fleetctl_report_shows_rule_precision_in_json_text_and_html(sqlite_url, tmp_path) -> None:
    from fleetctl.cli.main import app
    from fleetctl.db import remediation as db
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import utcnow
    from tests.reliability import history

    engine = get_engine(sqlite_url)
    history.seed(engine, utcnow())
    (rma,) = db.rma_records(engine, node_name="n07")
    db.close_rma(engine, rma.id, None, "vendor@desk")  # no fault found: xid 48 is 0 of 3
    runner = CliRunner()
    page = tmp_path / "fleet.html"
    r = runner.invoke(
        app, ["--db-url", sqlite_url, "report", "--no-sync", "--since", "7d", "-o", "json", "--html", str(page)]
    )
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["rule_precision"] == [
        {**PLAIN[0], "unchanged": 3, "open": 0, "precision": 0.0, "usually_wrong": True},
        *PLAIN[1:],
    ]

    html = page.read_text()
    table = html[html.index('id="rule-precision"') : html.index('id="breaker"')]
    assert table.count('<tr class="wrong">') == 1
    wrong_row = table[table.index('<tr class="wrong">') :]
    assert (
        wrong_row.index("xid 48") < wrong_row.index("0%") < wrong_row.index("usually wrong") < wrong_row.index("</tr>")
    )
    assert "Rule precision" in html[html.index("<dl") :]  # the definition is on the page

    r = runner.invoke(app, ["--db-url", sqlite_url, "report", "--no-sync", "--since", "7d"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    lines = r.stdout[r.stdout.index("rule precision") :].splitlines()
    xid_48 = next(line for line in lines if "xid 48" in line)
    assert "0.00%" in xid_48 and "usually wrong" in xid_48
    xid_79 = next(line for line in lines if "xid 79" in line)
    assert "0.00%" in xid_79 and "usually wrong" not in xid_79
