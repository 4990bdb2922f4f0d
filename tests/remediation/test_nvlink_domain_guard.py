"""The capacity guard counts an NVLink domain on the real guard workflow and
database: a fault of a GB200 NVL72 domain's fabric is one request for every in-service node of
the domain (GuardActivities.removals_for_fault), granted whole with a grant per node (each
node's workflow takes its drain with it), or refused whole when the domain does not fit the
fleet's limit; a granted domain's nodes count as pending until they move."""

from __future__ import annotations

import uuid

import pytest

from fleetctl.db import queries
from fleetctl.inventory.parse import parse_inventory
from fleetctl.nodes.capacity import RemovalDecision, RemovalRequest
from fleetctl.workflows.activities.guard import GuardActivities
from fleetctl.workflows.api import REQUEST_REMOVAL_UPDATE, FaultRemoval
from fleetctl.workflows.client import (
    CommandRejected,
    ensure_capacity_guard,
    ensure_node_workflows,
    guard_status,
    request_transition,
)
from tests.support.running_fleet import running_fleet

pytestmark = pytest.mark.temporal


@pytest.fixture
def half_out_settings(make_settings, sqlite_url):
    settings = make_settings(sqlite_url)
    settings.guard_max_unavailable_fleet = 0.5  # 10 nodes: 5 may be out
    settings.guard_storm_fraction = 0.5  # three faults in a row are not a storm here: the limit is what is tested
    return settings


async def _domain_fleet(fleet, trays: int = 4, others: int = 6) -> tuple[str, list[str], list[str]]:
    """`trays` gb200 trays in one domain (rack r1), `others` HGX nodes (rack r2), all in production."""
    tag = uuid.uuid4().hex[:6]
    domain = f"nvl72-{tag}"
    in_domain = [f"gb-{tag}-{i}" for i in range(trays)]
    hgx = [f"hgx-{tag}-{i}" for i in range(others)]
    text = (
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, rack: r1, profile: gb200, scheduler: sim, nvlink_domain: {domain}}}\n"
            for n in in_domain
        )
        + "".join(f"  - {{name: {n}, address: sim://{n}, rack: r2, profile: h100-sxm, scheduler: sim}}\n" for n in hgx)
    )
    queries.upsert_nodes(fleet.engine, parse_inventory(text))
    names = in_domain + hgx
    await ensure_node_workflows(fleet.client, fleet.settings, [(n, "new", 0) for n in names])
    for n in names:
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(fleet.client, n, trigger, "setup", actor_kind="automation")
    return domain, in_domain, hgx


async def _ask(fleet, req: RemovalRequest, check: str = "") -> RemovalDecision:
    """What a sweep asks when `check` failed on req.node: the request the fault makes, to the guard."""
    (widened,) = GuardActivities(fleet.settings, None).removals_for_fault(FaultRemoval(req, check)).requests
    guard = await ensure_capacity_guard(fleet.client, fleet.settings)
    return await guard.execute_update(REQUEST_REMOVAL_UPDATE, widened, result_type=RemovalDecision)


def _request(node: str, rack: str, reason: str = "active check gb200: imex: IMEX domain DEGRADED") -> RemovalRequest:
    return RemovalRequest(node=node, rack=rack, reason=reason, actor="sweep", request_id=uuid.uuid4().hex)


async def test_a_domain_fabric_fault_is_granted_whole_with_a_grant_for_every_node(half_out_settings) -> None:
    async with running_fleet(half_out_settings) as fleet:
        domain, trays, _hgx = await _domain_fleet(fleet)
        finder, rest = trays[0], trays[1:]
        decision = await _ask(fleet, _request(finder, "r1"), check="imex")
        assert decision.granted, decision.reason
        assert decision.domain_nodes == rest and sorted(decision.domain_grants) == rest
        assert f"NVLink domain {domain}: 4 nodes" in decision.reason
        # Each grant drains its own node, as the sweep's hold of the domain sends it.
        for node in rest:
            result = await request_transition(
                fleet.client,
                node,
                "drain",
                "sweep",
                "domain held",
                actor_kind="automation",
                grant=decision.domain_grants[node],
            )
            assert result.to_state == "draining", result
        # A grant names one node: another domain node's grant drains nothing.
        with pytest.raises(CommandRejected, match="capacity guard's grant"):
            await request_transition(
                fleet.client,
                finder,
                "drain",
                "sweep",
                "wrong grant",
                actor_kind="automation",
                grant=decision.domain_grants[rest[0]],
            )
        assert queries.get_node(fleet.engine, finder).state == "production"


async def test_a_granted_domain_counts_against_the_next_request_until_its_nodes_move(half_out_settings) -> None:
    async with running_fleet(half_out_settings) as fleet:
        _, trays, hgx = await _domain_fleet(fleet)
        assert (await _ask(fleet, _request(trays[0], "r1"), check="imex")).granted  # 4 of the 5 allowed
        # Not one node of the domain has moved yet: all four are pending.
        assert (await _ask(fleet, _request(hgx[0], "r2", "XID 13"), check="nvidia-smi-q")).granted  # 5 of 5
        refused = await _ask(fleet, _request(hgx[1], "r2", "XID 13"), check="nvidia-smi-q")
        assert not refused.granted and refused.reason.startswith("fleet limit: 5 of 10 already unavailable")


async def test_a_domain_that_does_not_fit_the_limit_is_refused_whole(half_out_settings) -> None:
    async with running_fleet(half_out_settings) as fleet:
        domain, trays, hgx = await _domain_fleet(fleet)
        for node in hgx[:2]:  # two out already: 2 + the domain's 4 > 5
            await request_transition(fleet.client, node, "drain", "operator", "maintenance")
        refused = await _ask(fleet, _request(trays[0], "r1"), check="imex")
        assert not refused.granted and refused.domain_grants == {} and refused.grant == ""
        assert f"(NVLink domain {domain}: 4 nodes)" in refused.reason
        assert refused.reason.startswith("fleet limit: 2 of 10 already unavailable")
        # An ordinary fault of one tray still fits: the node alone.
        alone = await _ask(fleet, _request(trays[1], "r1", "XID 48"), check="nvidia-smi-q")
        assert alone.granted and alone.domain_nodes == []


async def test_another_tray_reporting_the_same_fabric_fault_gets_the_grant_it_already_has(
    make_settings, sqlite_url
) -> None:
    """Every tray of a domain fails its imex check for one IMEX fault, each asking: the first
    request takes the domain; the others are answered with the grant each already has, not
    counted as more failures (three trays of one fault under the default storm limit of 3
    would open the breaker) nor as more cost."""
    settings = make_settings(sqlite_url)
    settings.guard_max_unavailable_fleet = 0.5  # the default storm limit: 3 failures of 10
    async with running_fleet(settings) as fleet:
        domain, trays, _ = await _domain_fleet(fleet)
        first = await _ask(fleet, _request(trays[0], "r1"), check="imex")
        assert first.granted
        for tray in trays[1:]:
            again = await _ask(fleet, _request(tray, "r1"), check="imex")
            assert again.granted and again.grant == first.domain_grants[tray] and again.domain_nodes == []
            assert "already granted with NVLink domain" in again.reason
        state = await guard_status(fleet.client, fleet.settings)
        assert not state.breaker_open and list(state.recent_failures) == [domain]  # one failure: the domain's


async def test_a_domain_node_that_left_since_the_request_was_made_costs_nothing_more(half_out_settings) -> None:
    """The request names the domain's nodes in service when the fault was found; two leave
    before the guard decides (an operator's drain, their own faults). The guard reads them
    again before the fleet's counts: counted out there, they are not the domain's cost too
    (2 out + 4 would be past the limit of 5; 2 out + the 2 still in service is not)."""
    async with running_fleet(half_out_settings) as fleet:
        _, trays, _ = await _domain_fleet(fleet)
        (stale,) = (
            GuardActivities(fleet.settings, None)
            .removals_for_fault(FaultRemoval(_request(trays[0], "r1"), "imex"))
            .requests
        )
        assert stale.domain_nodes == trays[1:]
        for node in trays[2:]:
            await request_transition(fleet.client, node, "drain", "operator", "left before the guard decided")
        guard = await ensure_capacity_guard(fleet.client, fleet.settings)
        decision = await guard.execute_update(REQUEST_REMOVAL_UPDATE, stale, result_type=RemovalDecision)
        assert decision.granted, decision.reason
        assert decision.domain_nodes == [trays[1]] and list(decision.domain_grants) == [trays[1]]
