"""Which faults pass a full capacity budget (the decision in fleetctl/nodes/capacity.py's
docstring): the kernel's critical XIDs do; a check's verdict waits, from real nvidia-smi
outputs (tests/fixtures/checks/nvidia_smi, each citing its source)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetctl.checks import judge
from fleetctl.checks.xid_policy import CATALOG
from fleetctl.nodes.capacity import FleetSnapshot, GuardPolicy, RackCounts, RemovalRequest, decide
from fleetctl.nodes.health import judge_health_event

NVSMI = Path(__file__).resolve().parent.parent / "fixtures" / "checks" / "nvidia_smi"
SPENT = FleetSnapshot({"r1": RackCounts(serving=10, unavailable=1, production=9)})  # 10 % of 10 is out


def _decide(critical: bool, breaker_open: bool = False):
    return decide(
        GuardPolicy(), SPENT, RemovalRequest("n1", "r1", "fault", "sweep", critical=critical), {}, 0.0, breaker_open
    )


@pytest.mark.parametrize("xid", [48, 64, 79, 95])
def test_critical_xids_pass_a_spent_budget_and_an_open_breaker(xid) -> None:
    verdict = judge_health_event(xid, [], 0.0, policy=CATALOG)
    assert verdict.drain_now and verdict.severity == "critical"
    assert _decide(critical=True).granted and _decide(critical=True, breaker_open=True).granted


@pytest.mark.parametrize(
    "fixture",
    ["csv_8xh100_uncorrectable_ecc_fail.txt", "csv_8xh100_remap_failure_fail.txt", "q_8xh100_dbe_volatile_fail.txt"],
)
def test_a_checks_ecc_verdict_waits_for_the_budget(fixture) -> None:
    result = judge("nvidia-smi", (NVSMI / fixture).read_text(), "h100-sxm")
    assert result.status.value == "fail", result.reason
    # an active-check sweep asks without `critical` (workflows/definitions/active_checks.py)
    decision = _decide(critical=False)
    assert not decision.granted and decision.reason.startswith("fleet limit: 1 of 10")
