"""Every automated way out of production goes through the capacity guard, which judges on
facts of its own: its fleet's configuration, and a recorded health event for a critical claim
(each once broken: three runbook runs took 4 of 10 nodes out under a fleet limit of 1; an operator who
typed `--xid 79` was granted a critical drain; the first caller set everyone's limits)."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from sqlmodel import Session, select

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import AutomationEvent, HealthEvent
from fleetctl.inventory.parse import parse_inventory
from fleetctl.nodes.capacity import GuardPolicy, RemovalDecision, RemovalRequest
from fleetctl.remediation.events import Event
from fleetctl.remediation.runbooks import parse_runbook
from fleetctl.workflows.activities.guard import GuardActivities
from fleetctl.workflows.api import (
    REQUEST_REMOVAL_UPDATE,
    CapacityGuardState,
    HealthEventInput,
    RemovalFactsInput,
    guard_id,
)
from fleetctl.workflows.client import guard_status, request_transition, run_remediation, send_health_events
from fleetctl.workflows.definitions.capacity_guard import CapacityGuard
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import QUICK, SCHEDULER
from tests.support.fleet import Cli, wait_for
from tests.support.history import activity_steps
from tests.support.running_fleet import running_fleet

pytestmark = pytest.mark.temporal
# A decision is a handful of activities, each bounded by QUICK's start-to-close.
DECISION_S = 5 * QUICK["start_to_close_timeout"].total_seconds()

SET_STATE_DRAINING = parse_runbook("""
name: drain-by-state
description: takes the node out by naming the state
match: {xid: [13]}
steps:
  - action: set_state
    with: {state: draining, cause: "runbook says so"}
""")
DRAIN_THEN_NOTHING = parse_runbook("""
name: drain-only
description: the drain step alone
match: {xid: [79]}
steps:
  - action: drain
""")


def _decisions(engine, kind: str | None = None) -> list[AutomationEvent]:
    with Session(engine) as session:
        rows = list(session.exec(select(AutomationEvent).order_by(AutomationEvent.id)))
    return [r for r in rows if kind is None or r.kind == kind]


async def _until(predicate) -> None:
    """Wait for predicate (a plain or an async callable) to hold, within DECISION_S."""
    deadline = time.monotonic() + DECISION_S
    while not ((await result) if asyncio.iscoroutine(result := predicate()) else result):
        assert time.monotonic() < deadline, "no decision within the bound"
        await asyncio.sleep(0.1)


def _out_of_service(engine, names) -> list[str]:
    return [n for n in names if queries.get_node(engine, n).state in ("draining", "maintenance")]


async def test_set_state_draining_in_three_runbooks_takes_no_more_than_the_fleet_limit(fleet_settings) -> None:
    async with running_fleet(fleet_settings) as fleet:
        names = await fleet.add(10)  # one rack, limit max(1, 10%) = 1 node
        for node in names[:3]:
            result = await run_remediation(
                fleet.client, fleet.settings, node, SET_STATE_DRAINING, Event("xid", code=13), "tester"
            )
            assert result.steps[0].action == "set_state"
        assert len(_out_of_service(fleet.engine, names)) == 1
        # each run asked the guard (none was refused by the node for want of a grant): one
        # grant, then the limit, then the third failure in the window opens the breaker
        asked = _decisions(fleet.engine)
        assert [(d.node_name, d.kind) for d in asked] == [
            (names[0], "grant"),
            (names[1], "deny"),
            (names[2], "breaker_open"),
        ]
        assert all(d.actor == "runbook:drain-by-state" for d in asked)


async def test_an_operator_typed_xid_is_not_a_critical_fault_a_recorded_one_is(fleet_settings) -> None:
    async with running_fleet(fleet_settings) as fleet:
        names = await fleet.add(9)
        await fleet.add(1, state="maintenance")  # the fleet is at its limit of one node out of ten
        typed, recorded = names[0], names[1]

        # `fleetctl runbook run drain-only --node N --xid 79`: the guard sees a claim, no event
        result = await run_remediation(
            fleet.client,
            fleet.settings,
            typed,
            DRAIN_THEN_NOTHING,
            Event("xid", code=79, message="operator says"),
            "tester",
        )
        assert result.status == "failed" and "capacity guard refused" in result.steps[0].detail
        (denied,) = _decisions(fleet.engine, "deny")
        assert (
            denied.node_name == typed and "said to be critical; no critical health event is recorded" in denied.reason
        )
        assert queries.get_node(fleet.engine, typed).state == "production"

        # the same run after the node's XID 79 was recorded: critical, past the limit
        fleet.record_xid(recorded, 79, "GPU has fallen off the bus")
        result = await run_remediation(
            fleet.client, fleet.settings, recorded, DRAIN_THEN_NOTHING, Event("xid", code=79), "tester"
        )
        assert result.status == "succeeded", result
        assert queries.get_node(fleet.engine, recorded).state in ("draining", "maintenance")
        (grant,) = [d for d in _decisions(fleet.engine, "grant") if d.node_name == recorded]
        assert "critical fault" in grant.reason and "XID 79 recorded" in grant.reason


async def test_each_guard_reads_its_fleets_limits_from_the_worker_not_from_who_started_it(
    make_settings, sqlite_url
) -> None:
    settings = make_settings(sqlite_url)
    own, other = settings.fleet, f"{settings.fleet}-other"
    # The worker's configuration: 30% for its own fleet (one rack: the rack limit lifted), the
    # global 10% for any other.
    settings.guard_fleets = {own: {"guard_max_unavailable_fleet": 0.3, "guard_max_unavailable_rack": 1.0}}
    settings.guard_max_unavailable_rack = 1.0
    async with running_fleet(settings) as fleet:
        names = await fleet.add(8)
        await fleet.add(2, state="maintenance")  # 2 of 10 out

        async def ask(fleet_name: str, started_with: float) -> RemovalDecision:
            handle = await fleet.client.start_workflow(
                CapacityGuard.run,
                CapacityGuardState(fleet=fleet_name, policy=GuardPolicy(started_with, 1.0)),
                id=guard_id(fleet_name),
                task_queue=settings.task_queue,
            )
            return await handle.execute_update(
                REQUEST_REMOVAL_UPDATE,
                RemovalRequest(node=names[0], rack="r1", reason="test", actor="tester", request_id=f"{fleet_name}/1"),
                result_type=RemovalDecision,
            )

        # started by a command that said 10%: the worker's 30% for this fleet holds
        assert (await ask(own, 0.1)).granted
        # started by a command that said 100%: the worker's 10% for that fleet holds
        refused = await ask(other, 1.0)
        assert not refused.granted and "fleet limit" in refused.reason and "10%" in refused.reason
        status = await fleet.client.get_workflow_handle(guard_id(other)).query(CapacityGuard.status)
        assert status.policy.max_unavailable_fleet == 0.1


async def test_automation_dry_run_records_what_it_would_do_and_drains_nothing(fleet_settings) -> None:
    fleet_settings.automation_dry_run = True
    async with running_fleet(fleet_settings) as fleet:
        (node,) = await fleet.add(1)
        await send_health_events(
            fleet.client,
            node,
            [HealthEventInput(node, "xid", 79, "GPU has fallen off the bus", "tester", "dry-79", time.time())],
        )
        handle = fleet.client.get_workflow_handle(f"node/{node}")
        await _until(lambda: _decisions(fleet.engine, "dry_run"))
        (dry,) = _decisions(fleet.engine, "dry_run")
        assert dry.node_name == node and "would grant" in dry.reason and "critical fault" in dry.reason

        # the guard records its decision before the node workflow hears it back
        async def outcome_says_dry_run() -> bool:
            return "dry run: would grant" in (await handle.query(NodeLifecycle.current)).last_outcome

        await _until(outcome_says_dry_run)
        assert queries.get_node(fleet.engine, node).state == "production"
        assert not _decisions(fleet.engine, "grant")

        # a runbook an operator runs is a shadow run while automation is dry
        result = await run_remediation(
            fleet.client, fleet.settings, node, DRAIN_THEN_NOTHING, Event("xid", code=79), "tester"
        )
        assert (result.mode, result.status) == ("shadow", "dry_run")
        assert queries.get_node(fleet.engine, node).state == "production"


async def _guard_activities(fleet) -> list[str]:
    """The activities the guard ran, in order, local (its short steps) or not."""
    history = await fleet.client.get_workflow_handle(guard_id(fleet.settings.fleet)).fetch_history()
    return [name for name, _ in activity_steps(history)]


class ReadsInOrder(GuardActivities):
    """The guard's activities, noting the reads removal_facts makes, in order."""

    def __init__(self, settings) -> None:
        super().__init__(settings, ask=None)
        self.reads: list[str] = []

    def _read(self, name: str, *args):
        self.reads.append(name)
        return getattr(super(), name)(*args)

    def fleet_policy(self, fleet):
        return self._read("fleet_policy", fleet)

    def critical_evidence(self, node):
        return self._read("critical_evidence", node)

    def state_versions(self, names):
        return self._read("state_versions", names)

    def in_service_nodes(self, names):
        return self._read("in_service_nodes", names)

    def fleet_snapshot(self, fleet):
        return self._read("fleet_snapshot", fleet)


async def test_the_guard_reads_a_removals_facts_in_one_activity(fleet_settings) -> None:
    """One step before the decision, critical or not (each was a round trip of its own)."""
    async with running_fleet(fleet_settings) as fleet:
        typed, recorded = await fleet.add(2)
        # A claim without a recorded event: judged not critical, so the counts decide.
        result = await run_remediation(
            fleet.client,
            fleet.settings,
            typed,
            DRAIN_THEN_NOTHING,
            Event("xid", code=79, message="operator says"),
            "tester",
        )
        assert result.status == "succeeded", result
        claim = await _guard_activities(fleet)
        assert claim == ["removal_facts", "record_automation_event"]
        (granted,) = _decisions(fleet.engine, "grant")
        assert "no critical health event is recorded" in granted.reason

        fleet.record_xid(recorded, 79, "GPU has fallen off the bus")
        result = await run_remediation(
            fleet.client, fleet.settings, recorded, DRAIN_THEN_NOTHING, Event("xid", code=79), "tester"
        )
        assert result.status == "succeeded", result
        assert (await _guard_activities(fleet))[len(claim) :] == ["removal_facts", "record_automation_event"]
        assert "(XID 79 recorded at" in _decisions(fleet.engine, "grant")[-1].reason


@pytest.mark.parametrize(
    ("critical", "force", "domain", "reads"),
    [
        # A critical removal does not wait for counts it would not read; one said to be
        # critical without a recorded event is judged on them.
        (True, False, False, ["fleet_policy", "critical_evidence", "state_versions"]),
        (False, False, False, ["fleet_policy", "state_versions", "fleet_snapshot"]),
        (False, True, False, ["fleet_policy", "state_versions"]),
        # A grant's versions are read before the fleet's counts: a granted node that moves
        # between the two reads is counted twice, never missed (read the other way round, a
        # storm drained 3 nodes under a limit of 2); a domain's nodes in service just before them.
        (False, False, True, ["fleet_policy", "state_versions", "in_service_nodes", "fleet_snapshot"]),
    ],
)
def test_removal_facts_reads_in_the_order_the_decision_needs(
    make_settings, sqlite_url, critical, force, domain, reads
) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(settings.db_url)
    names = [f"rf-{uuid.uuid4().hex[:6]}" for _ in range(3)]
    queries.upsert_nodes(
        engine,
        parse_inventory(
            "nodes:\n" + "".join(f"  - {{name: {n}, address: sim://{n}, rack: r1, profile: h100-sxm}}\n" for n in names)
        ),
    )
    node, *others = names
    if critical:
        queries.insert_once(
            engine,
            HealthEvent(node_name=node, source="xid", code=79, severity="critical", idempotency_key=f"rf/{node}"),
            HealthEvent.idempotency_key,
            f"rf/{node}",
        )
    request = RemovalRequest(
        node, "r1", "test", "tester", critical=critical, force=force, domain_nodes=others if domain else []
    )
    activities = ReadsInOrder(settings)
    facts = activities.removal_facts(RemovalFactsInput(settings.fleet, request, pending=["elsewhere"]))
    assert activities.reads == reads
    assert facts.request.critical == critical
    assert set(facts.versions) == {node, *(others if domain else [])}  # a pending grant's node gone: no version
    assert facts.policy == activities.fleet_policy(settings.fleet)


# An operator's drain of an idle simulated node: the cordon (one scheduler call), the look at
# its jobs (another) and the transitions (a quick activity each).
DRAIN_S = 2 * SCHEDULER["start_to_close_timeout"].total_seconds() + 3 * QUICK["start_to_close_timeout"].total_seconds()


async def test_a_critical_claim_reads_no_evidence_from_the_nodes_earlier_time_in_service(fleet_settings) -> None:
    """An XID 79 recorded before the node was drained, repaired and put back is no
    evidence for a claim now. The fleet is at its limit, so only a critical claim would pass."""
    async with running_fleet(fleet_settings) as fleet:
        names = await fleet.add(9)
        await fleet.add(1, state="maintenance")  # one of ten out: the fleet's limit
        node = names[0]
        fleet.record_xid(node, 79, "GPU has fallen off the bus")
        # out and back in by an operator (the guard is not asked): a new time in service
        await request_transition(fleet.client, node, "drain", "alice@console", "operator: swap the GPU")
        await wait_for(lambda: queries.get_node(fleet.engine, node).state == "maintenance", DRAIN_S, "drain complete")
        await request_transition(fleet.client, node, "undrain", "alice@console", "operator: GPU swapped")
        assert queries.get_node(fleet.engine, node).state == "production"

        result = await run_remediation(
            fleet.client, fleet.settings, node, DRAIN_THEN_NOTHING, Event("xid", code=79), "tester"
        )

        assert result.status == "failed" and "capacity guard refused" in result.steps[0].detail, result
        (denied,) = _decisions(fleet.engine, "deny")
        assert denied.node_name == node and "said to be critical; no critical health event is recorded" in denied.reason
        assert queries.get_node(fleet.engine, node).state == "production"


async def test_resume_automation_closes_the_breaker_and_automation_drains_again(make_settings, sqlite_url) -> None:
    """Three failures open the breaker; `fleetctl fleet resume-automation` closes it
    and forgets the storm, so the next automated drain is granted (the limits lifted: only the
    breaker decides here)."""
    settings = make_settings(sqlite_url)
    settings.guard_max_unavailable_fleet = settings.guard_max_unavailable_rack = 1.0
    async with running_fleet(settings) as fleet:
        names = await fleet.add(10)
        for node in names[:4]:
            await run_remediation(
                fleet.client, fleet.settings, node, SET_STATE_DRAINING, Event("xid", code=13), "tester"
            )
        assert [(d.node_name, d.kind) for d in _decisions(fleet.engine)] == [
            (names[0], "grant"),
            (names[1], "grant"),
            (names[2], "breaker_open"),
            (names[3], "deny"),
        ]
        assert "circuit breaker is open" in _decisions(fleet.engine)[3].reason
        assert (await guard_status(fleet.client, fleet.settings)).breaker_open

        resumed = await asyncio.to_thread(Cli(fleet.settings), "fleet", "resume-automation")
        assert resumed.exit_code == 0, resumed.output
        assert "breaker closed" in resumed.stdout
        assert not (await guard_status(fleet.client, fleet.settings)).breaker_open

        result = await run_remediation(
            fleet.client, fleet.settings, names[4], SET_STATE_DRAINING, Event("xid", code=13), "tester"
        )

        assert result.steps[0].action == "set_state" and result.status == "succeeded", result
        assert queries.get_node(fleet.engine, names[4]).state in ("draining", "maintenance")
        kinds = [(d.node_name, d.kind, d.actor) for d in _decisions(fleet.engine)][4:]
        assert kinds == [(None, "breaker_closed", "alice@console"), (names[4], "grant", "runbook:drain-by-state")]
