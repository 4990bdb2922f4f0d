"""A correlated burst of critical events sends no node to RMA without an operator: seven nodes sent XID 48 within 5 s were all granted their drains (critical) and all
went to RMA before the breaker opened. A burst is usually a driver, firmware or checker
fault, and an RMA costs weeks: the nodes are still drained, their RMAs held as
`awaiting_confirmation` until `fleetctl rma confirm` sends one or `fleetctl rma reject` sends
the node back through burn-in."""

from __future__ import annotations

import asyncio
import json
import time
from datetime import timedelta

import pytest

from fleetctl.db import queries
from fleetctl.db import remediation as db
from fleetctl.db.models import utcnow
from fleetctl.durations import as_utc
from fleetctl.nodes.capacity import GuardPolicy
from fleetctl.remediation.rma import BurstVerdict, burst_verdict
from fleetctl.sim.store import add_fault
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import send_health_events
from fleetctl.workflows.definitions.shared import MESSAGE, QUICK
from tests.support.fleet import Cli, one_line_error, wait_for
from tests.support.running_fleet import running_fleet
from tests.support.webhook import WebhookReceiver

POLICY = GuardPolicy(storm_fraction=0.2, storm_window_s=600, storm_min_failures=3)
T = 1_000_000.0
FLEET = [f"n{i}" for i in range(20)]  # the storm limit of 20 in production: more than 4, at least 3: 5


def _at(*offsets: float, first: int = 0) -> list[tuple[str, float]]:
    """Critical events on n<first>, n<first+1>, ... at T + each offset."""
    return [(f"n{first + i}", T + dt) for i, dt in enumerate(offsets)]


@pytest.mark.parametrize(
    "critical, now, held",
    [
        # No critical event of its own (a check's verdict): held while a burst is on, never waits.
        (_at(0, 1, 2, 3, 4, first=1), T + 6, True),
        (_at(0, 1, 2, 3, first=1), T + 6, False),  # four others, the node not one of them: no burst
        (_at(-700, -650, -620, -610, -601, first=1), T, False),  # a burst over before now
    ],
)
def test_burst_verdict_for_a_node_without_a_critical_event(critical, now, held) -> None:
    verdict = burst_verdict(POLICY, critical, FLEET, "n0", None, now)
    assert (bool(verdict.hold), verdict.wait_until) == (held, None), verdict


@pytest.mark.parametrize(
    "critical, production, now, held, wait_until",
    [
        # Alone in its window: opens at once (a lemon's repeat is one node too).
        (_at(0), FLEET, T + 5, False, None),
        ([*_at(0), ("n0", T - 300)], FLEET, T + 5, False, None),  # one node again and again is one node
        # Seven nodes within 5 s: past the limit of 5, held.
        (_at(0, 1, 2, 3, 4, 5, 5), FLEET, T + 6, True, None),
        # Exactly the limit is a storm (the guard's >=), one short is not yet: wait for the window.
        (_at(0, 1, 2, 3, 4), FLEET, T + 6, True, None),
        (_at(0, 1, 2, 3), FLEET, T + 6, False, T + 600),
        # After the window has passed, four stay four: opens.
        (_at(0, 1, 2, 3), FLEET, T + 600, False, None),
        # Events after this node's count too (the burst it started), up to the window.
        (_at(0) + _at(300, 400, 500, 600, first=1), FLEET, T + 600, True, None),
        (_at(0) + _at(300, 400, 500, 601, first=1), FLEET, T + 601, False, None),
        # Events before, within the window; one outside it does not count.
        (_at(0) + _at(-600, -10, -20, -30, first=1), FLEET, T + 1, True, None),
        (_at(0) + _at(-601, -10, -20, -30, first=1), FLEET, T + 1, False, T + 600),
        # The limit counts the fleet before the burst: the drained burst nodes are no longer in
        # production, and must not shrink the limit their own count is held against.
        (_at(0, 1, 2, 3), FLEET[4:], T + 6, False, T + 600),
        # A small fleet: at least storm_min_failures (3).
        (_at(0, 1), ["n0", "n1", "n2", "n3"], T + 6, False, T + 600),
        (_at(0, 1, 2), ["n0", "n1", "n2", "n3"], T + 6, True, None),
    ],
)
def test_burst_verdict(critical, production, now, held, wait_until) -> None:
    verdict = burst_verdict(POLICY, critical, production, "n0", T, now)
    assert bool(verdict.hold) == held, verdict
    assert verdict.wait_until == wait_until


def test_the_hold_says_why_in_the_operators_words() -> None:
    verdict = burst_verdict(POLICY, _at(0, 1, 2, 3, 4, 5, 5), FLEET, "n0", T, T + 6)
    assert verdict == BurstVerdict(
        hold="correlated burst: 7 nodes with critical events within 10 min (the storm limit is 5 (more than 20% "
        "of 20 production nodes before the burst, at least 3)); usually a driver, firmware or checker fault, not "
        "7 broken parts: an operator confirms or rejects"
    )
    short = burst_verdict(GuardPolicy(storm_window_s=30), _at(0, 1, 2), FLEET[:5], "n0", T, T + 6)
    assert "within 30 s" in short.hold


# ---- end to end, on simulated nodes ------------------------------------------------------------

# The storm window of this test's fleet: a burst's first nodes wait for it to pass.
BURST_WINDOW_S = 15.0
# From the XID to a held RMA: the event recorded, the critical drain (the guard's decision, the
# node's transitions), then the runbook's steps to its RMA step, each a few activities bounded
# by QUICK or MESSAGE; then the window the first nodes of the burst wait out (all under
# pytest-timeout's 300 s for the test).
HELD_WITHIN_S = (
    BURST_WINDOW_S + (15 * QUICK["start_to_close_timeout"] + 2 * MESSAGE["start_to_close_timeout"]).total_seconds()
)
ANSWERED_WITHIN_S = (4 * MESSAGE["start_to_close_timeout"]).total_seconds()

# From the XID to production: the event recorded and the critical drain, the runbook's reset
# and recheck, then burn-in and admission (a few checks on the simulator), each step a
# handful of activities bounded by QUICK (under pytest-timeout's 300 s for the test).
RECOVERED_WITHIN_S = (20 * QUICK["start_to_close_timeout"]).total_seconds()


def _rma_posts(receiver: WebhookReceiver) -> list[int]:
    """The ids of the RMAs the webhook was sent: what reached the ticketing system."""
    bodies = [json.loads(body) for _, body in receiver.requests]
    return [b["rma_id"] for b in bodies if b.get("kind") == "rma"]


@pytest.mark.temporal
async def test_a_burst_of_xid64_on_seven_nodes_drains_them_and_sends_no_rma_until_an_operator_confirms(
    make_settings, sqlite_url
) -> None:
    settings = make_settings(sqlite_url)
    settings.guard_storm_window_s = BURST_WINDOW_S
    receiver = WebhookReceiver()
    settings.webhook_url = receiver.url
    cli = Cli(settings)
    try:
        async with running_fleet(settings) as fleet:
            names = await fleet.add(10)
            burst, calm = names[:7], names[7:]
            sent = time.time()
            await asyncio.gather(
                *(
                    send_health_events(
                        fleet.client,
                        n,
                        [
                            HealthEventInput(
                                n, "xid", 64, "Row remapping failure", "agent", f"burst-{n}", sent, severity="critical"
                            )
                        ],
                    )
                    for n in burst
                )
            )

            def held():
                return {r.node_name: r for r in db.rma_records(fleet.engine, status="awaiting_confirmation")}

            # Every node's RMA recorded, held or not: one sent fails here at once, not at the bound.
            await wait_for(
                lambda: {r.node_name for r in db.rma_records(fleet.engine)} == set(burst),
                HELD_WITHIN_S,
                "the seven RMAs recorded",
            )
            records = held()
            assert set(records) == set(burst), [(r.node_name, r.status) for r in db.rma_records(fleet.engine)]
            assert {queries.get_node(fleet.engine, n).state for n in burst} == {"maintenance"}  # drained, not in rma
            assert {queries.get_node(fleet.engine, n).state for n in calm} == {"production"}
            assert _rma_posts(receiver) == []  # nothing reached the vendor's queue
            for r in records.values():
                assert (
                    r.held_reason.startswith("correlated burst: ")
                    and "usually a driver, firmware or checker fault" in r.held_reason
                ), r.held_reason
                assert int(r.held_reason.split()[2]) >= 3  # at least the storm limit of ten nodes
            listed = cli("rma", "list", "-o", "json")
            assert listed.exit_code == 0, listed.output
            assert sorted(
                r["node"] for r in json.loads(listed.stdout) if r["status"] == "awaiting_confirmation"
            ) == sorted(burst)
            shown = await asyncio.to_thread(cli, "node", "show", burst[2], "-o", "json")
            assert [h["id"] for h in json.loads(shown.stdout)["rma_held"]] == [records[burst[2]].id], shown.output
            status = await asyncio.to_thread(cli, "fleet", "status", "-o", "json")
            assert sorted(h["node"] for h in json.loads(status.stdout)["rma_held"]) == sorted(burst), status.output

            # An operator confirms one: the node goes to rma and the RMA is sent.
            first, second = records[burst[0]], records[burst[1]]
            confirmed = await asyncio.to_thread(cli, "rma", "confirm", str(first.id))
            assert confirmed.exit_code == 0, confirmed.output
            assert f"RMA {first.id} confirmed by alice@console" in confirmed.stdout
            await wait_for(
                lambda: queries.get_node(fleet.engine, burst[0]).state == "rma",
                ANSWERED_WITHIN_S,
                "the confirmed node in rma",
            )
            assert _rma_posts(receiver) == [first.id]
            assert db.get_rma(fleet.engine, first.id).status == "open"
            # ... rejects another: nothing is sent, and the node goes back through burn-in.
            unsaid = await asyncio.to_thread(cli, "rma", "reject", str(second.id))
            assert unsaid.exit_code == 2 and "--reason must say why" in one_line_error(unsaid)
            rejected = await asyncio.to_thread(cli, "rma", "reject", str(second.id), "--reason", "driver 550.90 bug")
            assert rejected.exit_code == 0, rejected.output
            assert f"RMA {second.id} rejected by alice@console: driver 550.90 bug" in rejected.stdout
            await wait_for(
                lambda: queries.get_node(fleet.engine, burst[1]).state in ("burn_in", "admission", "production"),
                ANSWERED_WITHIN_S,
                "the rejected node back in burn-in",
            )
            assert db.get_rma(fleet.engine, second.id).status == "rejected"
            assert db.get_rma(fleet.engine, second.id).decided_reason == "driver 550.90 bug"
            shown = await asyncio.to_thread(cli, "rma", "show", str(second.id))
            assert shown.stdout.splitlines()[:3] == [
                "status: rejected",
                f"reason: {second.reason}",
                "answered by alice@console: driver 550.90 bug",
            ], shown.output

            # The same answer again is already so: said, exit 0, nothing sent twice.
            again = await asyncio.to_thread(cli, "rma", "confirm", str(first.id))
            assert again.exit_code == 0 and f"RMA {first.id} is already confirmed" in again.stdout, again.output
            # Bad answers: one line each, non-zero, nothing changed.
            otherwise = await asyncio.to_thread(cli, "rma", "confirm", str(second.id))
            assert otherwise.exit_code != 0 and "awaits no confirmation: it is rejected by alice@console" in (
                one_line_error(otherwise)
            )
            unknown = await asyncio.to_thread(cli, "rma", "reject", "999999", "--reason", "typo")
            assert unknown.exit_code != 0 and "no RMA record 999999" in one_line_error(unknown)
            closed = await asyncio.to_thread(cli, "rma", "close", str(records[burst[2]].id), "--no-fault-found")
            assert closed.exit_code != 0 and "is awaiting_confirmation, not open" in one_line_error(closed)
            assert _rma_posts(receiver) == [first.id]
            assert set(held()) == set(burst[2:])
            # What an operator reads: the held ones in fleet status and on the node, with why.
            table = await asyncio.to_thread(cli, "fleet", "status")
            assert "RMAs awaiting an operator: 5" in table.stdout, table.output
            node_table = await asyncio.to_thread(cli, "node", "show", burst[2])
            assert f"RMA {records[burst[2]].id} awaits an operator: correlated burst" in node_table.stdout, (
                node_table.output
            )
            assert {queries.get_node(fleet.engine, n).state for n in burst[2:]} == {"maintenance"}

            # Several at once, one unknown among them: the others answered, the command non-zero.
            third, fourth = records[burst[2]].id, records[burst[3]].id
            several = await asyncio.to_thread(
                cli, "rma", "reject", str(third), "999999", str(fourth), "--reason", "checker fault"
            )
            assert several.exit_code != 0 and "1 of 3 RMAs not answered" in several.output, several.output
            assert {db.get_rma(fleet.engine, i).decided_reason for i in (third, fourth)} == {"checker fault"}
            # --all-held answers what is left.
            rest = await asyncio.to_thread(cli, "rma", "reject", "--all-held", "--reason", "checker fault")
            assert rest.exit_code == 0, rest.output
            assert held() == {}
            nothing = await asyncio.to_thread(cli, "rma", "confirm", "--all-held")
            assert nothing.exit_code == 2 and "no RMA awaits an operator" in one_line_error(nothing)
    finally:
        receiver.shutdown()


@pytest.mark.temporal
async def test_two_nodes_critical_at_once_wait_for_the_window_then_go_to_rma(make_settings, sqlite_url) -> None:
    """Two of ten (under the storm limit of 3) is not a burst, but could have been the start
    of one: each RMA waits until the storm window after its node's event has passed (a
    timer), then, no more nodes having failed, is sent."""
    settings = make_settings(sqlite_url)
    settings.guard_storm_window_s = BURST_WINDOW_S
    receiver = WebhookReceiver()
    settings.webhook_url = receiver.url
    try:
        async with running_fleet(settings) as fleet:
            names = await fleet.add(10)
            pair = names[:2]
            await asyncio.gather(
                *(
                    send_health_events(
                        fleet.client,
                        n,
                        [
                            HealthEventInput(
                                n,
                                "xid",
                                64,
                                "Row remapping failure",
                                "agent",
                                f"pair-{n}",
                                time.time(),
                                severity="critical",
                            )
                        ],
                    )
                    for n in pair
                )
            )
            # The node moves to rma, then its RMA is recorded and sent: wait for the records.
            await wait_for(lambda: len(db.rma_records(fleet.engine)) == len(pair), HELD_WITHIN_S, "both RMAs")
            records = db.rma_records(fleet.engine)
            assert sorted(r.node_name for r in records) == sorted(pair) and {r.status for r in records} == {"open"}
            assert {queries.get_node(fleet.engine, n).state for n in pair} == {"rma"}
            await wait_for(
                lambda: len(_rma_posts(receiver)) == len(pair),
                MESSAGE["start_to_close_timeout"].total_seconds(),
                "both RMAs sent",
            )
            assert sorted(_rma_posts(receiver)) == sorted(r.id for r in records)
            for r in records:
                (event,) = [e for e in queries.health_events(fleet.engine, r.node_name) if e.code == 64]
                waited = (as_utc(r.opened_at) - as_utc(event.at)).total_seconds()
                assert waited >= BURST_WINDOW_S, f"{r.node_name}: sent {waited:.1f} s after its XID"
    finally:
        receiver.shutdown()


@pytest.mark.temporal
async def test_one_nodes_xid48_repeat_within_the_lemon_window_still_goes_to_rma(fleet_settings) -> None:
    """A real lemon is one node, not a burst: its XID 48 is reset and rechecked, and at the
    return the lemon rule sends it to RMA at once, held for nobody."""
    receiver = WebhookReceiver()
    fleet_settings.webhook_url = receiver.url
    try:
        async with running_fleet(fleet_settings) as fleet:
            node, *_partners = await fleet.add(3)
            for days_ago in (5, 2):  # two earlier live remediations this week
                key = f"remediation/{node}@earlier{days_ago}"
                db.start_run(
                    fleet.engine,
                    run_key=key,
                    node_name=node,
                    runbook="xid-reset-gpu",
                    event={},
                    mode="live",
                    actor="tester",
                    started_at=utcnow() - timedelta(days=days_ago),
                )
                db.finish_run(fleet.engine, key, "succeeded", "back in service", utcnow() - timedelta(days=days_ago))
            add_fault(fleet.engine, node, "row-remap-pending")
            await send_health_events(
                fleet.client,
                node,
                [
                    HealthEventInput(
                        node,
                        "xid",
                        48,
                        "Double Bit ECC Error",
                        "agent",
                        f"lemon-48-{node}",
                        time.time(),
                        severity="critical",
                    )
                ],
            )
            # Its RMA recorded, held or not: one held fails here at once, not at the bound.
            await wait_for(lambda: db.rma_records(fleet.engine, node_name=node), RECOVERED_WITHIN_S, "the lemon's RMA")
            (record,) = db.rma_records(fleet.engine, node_name=node)
            assert record.status == "open" and record.held_reason is None, record
            await wait_for(
                lambda: _rma_posts(receiver), MESSAGE["start_to_close_timeout"].total_seconds(), "the lemon's RMA sent"
            )
            assert record.reason.startswith("lemon: remediated 3 times in 7 days"), record.reason
            assert _rma_posts(receiver) == [record.id]
            run = db.get_run(fleet.engine, record.remediation_run)
            assert run.runbook == "xid-reset-gpu"
            await wait_for(
                lambda: queries.get_node(fleet.engine, node).state == "rma", ANSWERED_WITHIN_S, "the lemon in rma"
            )
    finally:
        receiver.shutdown()


@pytest.mark.temporal
async def test_one_xid48_on_an_idle_node_is_reset_rechecked_and_back_in_production(fleet_settings) -> None:
    """The whole path: the XID reaches the node's workflow, which
    drains the node (critical) and starts xid-reset-gpu; the reset remaps the row (the
    simulator's pending remap), the recheck passes, burn-in and admission take it back."""
    async with running_fleet(fleet_settings) as fleet:
        node, *_partners = await fleet.add(3)  # partners: burn-in tests the fabric with them
        add_fault(fleet.engine, node, "row-remap-pending")
        await send_health_events(
            fleet.client,
            node,
            [
                HealthEventInput(
                    node,
                    "xid",
                    48,
                    "Double Bit ECC Error",
                    "agent",
                    f"lone-48-{node}",
                    time.time(),
                    severity="critical",
                )
            ],
        )

        def finished():
            return [r for r in db.runs(fleet.engine, node) if r.runbook == "xid-reset-gpu" and r.finished_at]

        await wait_for(finished, RECOVERED_WITHIN_S, "the xid-reset-gpu run ended")
        (run,) = finished()
        assert run.status == "succeeded", run.outcome
        steps = {s.name: s.status for s in db.steps(fleet.engine, run.run_key)}
        assert {k: steps[k] for k in ("reset", "recheck", "4-set_state", "5-rma")} == {
            "reset": "passed",
            "recheck": "passed",
            "4-set_state": "passed",
            "5-rma": "skipped",
        }, steps
        await wait_for(
            lambda: queries.get_node(fleet.engine, node).state == "production",
            RECOVERED_WITHIN_S,
            "the node back in production",
        )
        moves = [(e.from_state, e.to_state) for e in queries.node_events(fleet.engine, node)]
        path = [
            ("production", "draining"),
            ("draining", "maintenance"),
            ("maintenance", "burn_in"),
            ("burn_in", "admission"),
            ("admission", "production"),
        ]
        assert moves[-len(path) :] == path, moves
        assert db.rma_records(fleet.engine, node_name=node) == []


def test_the_cli_addresses_the_update_the_run_defines() -> None:
    """`rma confirm` sends RMA_DECISION_UPDATE with an RmaDecision: the Remediation's own."""
    import temporalio.workflow

    from fleetctl.workflows.api import RMA_DECISION_UPDATE, RmaDecision
    from fleetctl.workflows.definitions.remediation import Remediation

    update = temporalio.workflow._Definition.must_from_class(Remediation).updates[RMA_DECISION_UPDATE]
    assert update.arg_types == [RmaDecision]
