"""A fault of an NVLink domain's fabric holds the whole domain, NodeLifecycle's
side on fakes: a recheck's failed `imex` check on a node of a GB200 NVL72 domain asks the
guard once for the whole domain (patch nvlink-domain-hold) and, granted, drains the domain's
other nodes with their own grants before the node's own drain waits for its jobs. A fatal
NVSwitch SXid (critical, of the fabric) drains its node at once, past the limits, then asks for
the rest of the domain within them. An ordinary failed check, or an imex failure on a node in
no domain, asks for the node alone. The same on
the real guard and the simulated fleet: tests/lifecycle/test_nvlink_domain_hold.py."""

from __future__ import annotations

import pytest

from fleetctl.workflows.api import HealthEventInput, HealthEventVerdict, PhaseRequest
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.workflows.fakes import World

pytestmark = pytest.mark.temporal

DOMAIN = "nvl72-r07"
TRAYS = ["tray-02", "tray-03", "tray-04"]
SXID_FATAL = HealthEventVerdict(
    "",
    "critical",
    "reboot",
    drain_now=True,
    critical=True,
    reason="NVSwitch fatal SXid: NVLink traffic through the switch stalls",
)


async def recheck(node) -> None:
    await node.handle.execute_update(NodeLifecycle.recheck, PhaseRequest(actor="tester", suite="gb200"))


async def test_a_failed_imex_recheck_asks_for_the_whole_domain_and_drains_its_other_nodes(lifecycle) -> None:
    node = await lifecycle(
        world=World(suite=["imex"], check_status={"imex": "fail"}, nvlink_domain=DOMAIN, domain_nodes=TRAYS)
    )
    await recheck(node)
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    (asked,) = node.fakes.asked("ask_capacity_guard")
    assert (asked.node, asked.domain, asked.domain_nodes, asked.critical) == (node.node, DOMAIN, TRAYS, False)
    assert asked.reason.startswith("recheck gb200: imex: ")
    held = node.fakes.asked("command_node")
    assert sorted(r.node for r in held) == TRAYS
    assert all(
        r.trigger == "drain"
        and r.actor_kind == "automation"
        and r.grant == f"fake-guard:{r.node}@1"
        and r.event is None
        and f"NVLink domain {DOMAIN} held: its fabric failed on {node.node}" in r.cause
        for r in held
    )
    # The others are held before this node's drain, which then waits for its own jobs.
    names = [name for name, _ in node.fakes.calls]
    assert names.index("command_node") < names.index("record_transition")


async def test_an_ordinary_failed_check_on_a_domain_node_asks_for_that_node_alone(lifecycle) -> None:
    node = await lifecycle(
        world=World(
            suite=["nvidia-smi-q"], check_status={"nvidia-smi-q": "fail"}, nvlink_domain=DOMAIN, domain_nodes=TRAYS
        )
    )
    await recheck(node)
    s = await node.settled()
    assert s.state == "maintenance"
    (asked,) = node.fakes.asked("ask_capacity_guard")
    assert (asked.domain, asked.domain_nodes) == ("", [])
    # Not a fabric fault: the domain is not even looked up, and no other node is touched.
    assert node.fakes.asked("removals_for_fault") == [] and node.fakes.asked("command_node") == []


async def test_an_imex_failure_on_a_node_in_no_domain_drains_the_node_alone(lifecycle) -> None:
    node = await lifecycle(world=World(suite=["imex"], check_status={"imex": "fail"}))
    await recheck(node)
    s = await node.settled()
    assert s.state == "maintenance"
    (asked,) = node.fakes.asked("ask_capacity_guard")
    assert asked.domain_nodes == [] and node.fakes.asked("command_node") == []


async def test_a_domain_request_the_guard_refuses_drains_no_node(lifecycle) -> None:
    node = await lifecycle(
        world=World(
            suite=["imex"],
            check_status={"imex": "fail"},
            nvlink_domain=DOMAIN,
            domain_nodes=TRAYS,
            guard_grants=False,
            guard_reason="fleet limit",
        )
    )
    await recheck(node)
    s = await node.settled()
    assert s.state == "production" and node.fakes.triggers() == []
    assert node.fakes.asked("command_node") == []
    assert s.last_outcome == "drain held by the capacity guard: fleet limit"


async def sxid(node, signature: str) -> None:
    """What the agent sends for a kernel line it read as `signature` (fleetctl.agent.detect)."""
    await node.handle.signal(
        NodeLifecycle.health_event,
        HealthEventInput(
            node.node,
            "agent",
            None,
            "nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 24007, Fatal, Link 44 sourcetrack timeout",
            "agent",
            "sxid-1",
            0.0,
            severity="critical",
            signature=signature,
        ),
    )


async def test_a_fatal_nvswitch_sxid_drains_its_node_at_once_and_asks_for_the_rest_of_the_domain(lifecycle) -> None:
    node = await lifecycle(world=World(verdict=SXID_FATAL, nvlink_domain=DOMAIN, domain_nodes=TRAYS))
    await sxid(node, "nvswitch_sxid_fatal")
    s = await node.settled()
    assert s.state == "maintenance"
    own, rest = node.fakes.asked("ask_capacity_guard")
    assert (own.node, own.critical, own.domain_nodes) == (node.node, True, [])  # past the limits, alone
    assert (rest.node, rest.critical, rest.domain, rest.domain_nodes) == (TRAYS[0], False, DOMAIN, TRAYS[1:])
    held = node.fakes.asked("command_node")
    assert sorted(r.node for r in held) == TRAYS and all(r.grant == f"fake-guard:{r.node}@1" for r in held)


async def test_a_critical_event_of_no_fabric_signature_drains_the_node_alone(lifecycle) -> None:
    node = await lifecycle(world=World(verdict=SXID_FATAL, nvlink_domain=DOMAIN, domain_nodes=TRAYS))
    await sxid(node, "gpu_fallen_off_bus")
    s = await node.settled()
    assert s.state == "maintenance"
    (own,) = node.fakes.asked("ask_capacity_guard")
    assert own.critical and own.domain_nodes == [] and node.fakes.asked("command_node") == []
