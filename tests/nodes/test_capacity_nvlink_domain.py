"""The capacity guard and NVLink domains: a domain-fabric fault costs the whole domain, granted or
refused as one; an ordinary fault on a domain's node costs one node (fleetctl.nodes.capacity)."""

from __future__ import annotations

import pytest

from fleetctl.nodes.capacity import (
    GuardPolicy,
    RemovalRequest,
    decide,
    domain_removal,
    domain_witnessed,
    removals_for_fault,
    snapshot_from_states,
)

POLICY = GuardPolicy()  # fleet 10%, rack 25%, storm 20% (at least 3)
DOMAIN = [f"gb-{i:02d}" for i in range(18)]  # one NVL72 rack: 18 compute trays


def fleet(racks: dict[str, int], out: dict[str, int] | None = None):
    """`racks`: production nodes per rack; `out`: nodes in maintenance per rack."""
    pairs = [(rack, "production") for rack, count in racks.items() for _ in range(count)]
    pairs += [(rack, "maintenance") for rack, count in (out or {}).items() for _ in range(count)]
    return snapshot_from_states(pairs)


def fault(node: str = "gb-00", **kw) -> RemovalRequest:
    return RemovalRequest(node=node, rack="nvl-r01", reason="imex down", actor="sweep", **kw)


def whole_domain(states: dict[str, str] | None = None, **kw) -> RemovalRequest:
    members = [(n, (states or {}).get(n, "production")) for n in DOMAIN]
    return domain_removal(fault(**kw), "nvl72-r01", members)


# 20 NVL72 racks (360 trays): fleet limit 36; 5 racks: 90 trays, limit 9.
BIG = {f"nvl-r{i:02d}": 18 for i in range(1, 21)}
SMALL = {f"nvl-r{i:02d}": 18 for i in range(1, 6)}
# 10 racks, of which nvl-r01 has half its trays out: 180 serving, limit 18.
MEDIUM = {"nvl-r01": 9, **{f"nvl-r{i:02d}": 18 for i in range(2, 11)}}
HALF_OUT = dict.fromkeys(DOMAIN[9:], "maintenance")


@pytest.mark.parametrize(
    "snapshot,request_,pending,granted,reason,with_it",
    [
        # The domain is one request for its 18 nodes, within the fleet limit: granted whole,
        # although 18 of an 18-node rack is past the rack limit (which a domain fault does not ask).
        (fleet(BIG), whole_domain(), 0, True, "within the fleet limit (NVLink domain nvl72-r01: 18 nodes)", 17),
        # The fleet can lose 9: the domain's 18 are refused whole (nothing of it drains).
        (
            fleet(SMALL),
            whole_domain(),
            0,
            False,
            "fleet limit: 0 of 90 already unavailable (max 9, 10%) "
            "(NVLink domain nvl72-r01: 18 nodes); can go once 9 nodes",
            0,
        ),
        # Already-out capacity and pending grants count with the domain's cost.
        (fleet(BIG, {"nvl-r05": 18}), whole_domain(), 0, True, "within the fleet limit", 17),
        (
            fleet(BIG, {"nvl-r05": 18}),
            whole_domain(),
            2,
            False,
            "fleet limit: 20 of 378 already unavailable (max 37",
            0,
        ),
        # The domain's nodes already out cost nothing more: 9 of 18 out, the 9 in service go
        # (9 + 9 = the limit of 18); had they counted, 9 + 18 would be past it.
        (fleet(MEDIUM, {"nvl-r01": 9}), whole_domain(HALF_OUT), 0, True, "(NVLink domain nvl72-r01: 9 nodes)", 8),
        (fleet(MEDIUM, {"nvl-r01": 9}), whole_domain(HALF_OUT), 1, False, "fleet limit: 10 of 180", 0),
        # An ordinary GPU fault on a node of the domain asks for that node, under the rack limit too.
        (fleet(BIG), fault(), 0, True, "within limits", 0),
        (fleet(BIG, {"nvl-r01": 4}), fault(), 0, True, "within limits", 0),  # 5 of 22: the rack's limit
        (fleet(BIG, {"nvl-r01": 5}), fault(), 0, False, "rack limit: 5 of 23 in nvl-r01", 0),
        # A critical fault is that node's lost GPU: past the limits for it alone.
        (fleet(SMALL, {"nvl-r02": 9}), whole_domain(critical=True), 0, False, "fleet limit", 0),
        (fleet(SMALL, {"nvl-r02": 9}), fault(critical=True), 0, True, "critical fault", 0),
        # An operator's forced domain removal takes the domain, recorded.
        (fleet(SMALL), whole_domain(force=True), 0, True, "forced by sweep", 17),
    ],
)
def test_a_domain_fault_is_granted_or_refused_whole(snapshot, request_, pending, granted, reason, with_it) -> None:
    d = decide(POLICY, snapshot, request_, {}, now=100.0, breaker_open=False, pending_grants=pending)
    assert (d.granted, reason in d.reason, len(d.domain_nodes)) == (granted, True, with_it), d.reason
    if granted and with_it:
        assert set(d.domain_nodes) <= set(DOMAIN) - {request_.node}


def test_a_domain_request_is_never_critical() -> None:
    """Its other trays' GPUs still work (single-tray jobs): they wait for the budget."""
    assert whole_domain(critical=True).critical is False
    critical_with_domain = RemovalRequest(
        "gb-00", "nvl-r01", "xid 79", "agent", critical=True, domain="nvl72-r01", domain_nodes=DOMAIN[1:]
    )
    d = decide(POLICY, fleet(SMALL, {"nvl-r02": 9}), critical_with_domain, {}, now=100.0, breaker_open=False)
    assert d.granted and d.domain_nodes == [] and "the rest of NVLink domain nvl72-r01 is not taken" in d.reason


def test_a_domain_fault_is_one_failure_to_the_storm_breaker() -> None:
    """18 trays out through one fabric fault are one cause; two other nodes failing beside it
    are not a storm (3 of 360 is under 20%), and the domain's nodes are not counted as failing."""
    d = decide(POLICY, fleet(BIG), whole_domain(), {"x-1": 99.0, "x-2": 99.0}, now=100.0, breaker_open=False)
    assert d.granted and not d.breaker_opened


def test_an_open_breaker_holds_a_domain_fault() -> None:
    d = decide(POLICY, fleet(BIG), whole_domain(), {}, now=100.0, breaker_open=True)
    assert not d.granted and d.domain_nodes == [] and "circuit breaker is open" in d.reason


def test_a_dry_run_grants_no_domain() -> None:
    d = decide(GuardPolicy(dry_run=True), fleet(BIG), whole_domain(), {}, now=100.0, breaker_open=False)
    assert not d.granted and d.dry_run and d.domain_nodes == [] and "would grant" in d.reason


MEMBERS = [(n, "production") for n in DOMAIN[:17]] + [(DOMAIN[17], "maintenance")]


@pytest.mark.parametrize(
    "domain,check,signature,asks_for",
    [
        ("nvl72-r01", "imex", "", 17),  # IMEX down: the node and the domain's 16 other in-service nodes
        ("nvl72-r01", "", "nvswitch_sxid_fatal", 17),  # an NVSwitch tray's fatal SXid
        ("nvl72-r01", "", "fabric_manager_topology_mismatch", 17),
        ("nvl72-r01", "nvidia-smi", "", 1),  # an ordinary GPU check: that node
        ("nvl72-r01", "", "gpu_fallen_off_bus", 1),  # a GPU's own fault
        ("nvl72-r01", "", "nvswitch_sxid_nonfatal", 1),  # a warning is not a fabric outage
        ("", "imex", "", 1),  # a node in no domain (HGX) asks for itself
    ],
)
def test_which_faults_ask_for_the_whole_domain(domain, check, signature, asks_for) -> None:
    (request,) = removals_for_fault(fault(), domain, MEMBERS, check=check, signature=signature)
    assert 1 + len(request.domain_nodes) == asks_for
    assert request.node == "gb-00" and "gb-00" not in request.domain_nodes and DOMAIN[17] not in request.domain_nodes
    assert request.domain == (domain if asks_for > 1 else "")


def test_a_critical_fabric_fault_takes_its_node_past_the_limits_then_asks_for_the_rest_within_them() -> None:
    """A fatal NVSwitch SXid is critical (the node's GPUs are lost) and of the domain's fabric:
    the node goes alone, as any critical fault; the domain's 16 other in-service trays follow
    as one ordinary request, which the fleet's limit may hold."""
    node, rest = removals_for_fault(
        fault(critical=True, request_id="ev-1"), "nvl72-r01", MEMBERS, signature="nvswitch_sxid_fatal"
    )
    assert (node.node, node.critical, node.domain_nodes) == ("gb-00", True, [])
    assert (rest.node, rest.critical, rest.domain, rest.request_id) == ("gb-01", False, "nvl72-r01", "ev-1/domain")
    assert (
        rest.domain_nodes == DOMAIN[2:17] and "NVLink domain nvl72-r01 held: its fabric failed on gb-00" in rest.reason
    )
    # In a small fleet the node goes and the rest is held by the limit, refused whole.
    small = fleet(SMALL)
    assert decide(POLICY, small, node, {}, now=100.0, breaker_open=False).granted
    held = decide(POLICY, small, rest, {}, now=100.0, breaker_open=False)
    assert not held.granted and "(NVLink domain nvl72-r01: 16 nodes)" in held.reason


def test_a_critical_fabric_fault_on_a_domain_with_nothing_else_in_service_is_the_node_alone() -> None:
    members = [("gb-00", "production"), ("gb-01", "maintenance")]
    assert removals_for_fault(fault(critical=True), "nvl72-r01", members, signature="nvswitch_sxid_fatal") == [
        fault(critical=True)
    ]


def test_a_node_already_out_with_its_domain_asks_for_nothing() -> None:
    """Every tray of a domain sees its IMEX fault: one already held with the domain by another
    tray's request asks nothing more (no second cost, no second failure to the storm breaker)."""
    members = [("gb-00", "draining"), ("gb-01", "production")]
    assert removals_for_fault(fault(), "nvl72-r01", members, check="imex") == []
    # An ordinary fault is the node's own, whatever its domain: asked as ever.
    assert removals_for_fault(fault(), "nvl72-r01", members, check="nvidia-smi") == [fault()]


@pytest.mark.parametrize(
    "source,reporters,check_failed,witnessed",
    [
        ("intake", [], False, True),  # the operator token's event: the operator's word holds the domain
        ("alertmanager", [], False, True),
        ("agent", [], False, False),  # a tray's own credential, alone: its own tray only
        ("agent", ["gb-00"], False, False),  # its own report again is no second tray
        ("agent", ["gb-00", "gb-05"], False, True),  # a second tray saw it within the window
        ("agent", [], True, True),  # the domain's own IMEX state (a failed imex check)
    ],
)
def test_a_nodes_own_word_holds_its_domain_only_when_something_else_says_so(
    source, reporters, check_failed, witnessed
) -> None:
    assert domain_witnessed(source, "gb-00", reporters, check_failed) is witnessed


@pytest.mark.parametrize("critical", [False, True])
def test_an_unwitnessed_fabric_fault_takes_its_node_alone(critical: bool) -> None:
    """A fatal SXid only the tray's own agent reports: that tray (past the limits when critical,
    as any lost GPU), never its 16 in-service neighbours."""
    alone = removals_for_fault(
        fault(critical=critical), "nvl72-r01", MEMBERS, signature="nvswitch_sxid_fatal", witnessed=False
    )
    assert alone == [fault(critical=critical)] and alone[0].domain == "" and alone[0].domain_nodes == []
