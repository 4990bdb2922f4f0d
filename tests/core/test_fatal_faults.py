"""Which faults pass a full capacity budget (fleetctl.health.passes_full_budget), judged from
real nvidia-smi outputs (tests/fixtures/checks/nvidia_smi, each citing its source) in the
cause an active-check sweep gives the guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from checks import judge
from fleetctl.capacity import FleetSnapshot, GuardPolicy, RackCounts, RemovalRequest, decide
from fleetctl.health import passes_full_budget

NVSMI = Path(__file__).resolve().parent.parent / "fixtures" / "checks" / "nvidia_smi"


@pytest.mark.parametrize("fixture, fatal", [
    ("csv_8xh100_uncorrectable_ecc_fail.txt", True),
    ("q_8xh100_dbe_volatile_fail.txt", True),
    ("csv_8xh100_remap_failure_fail.txt", True),
    ("q_8xh100_remap_pending_fail.txt", False),  # a reset fixes it: it waits for the budget
    ("q_8xh100_hw_slowdown_fail.txt", False),
    ("csv_7xh100_missing_gpu_fail.txt", False),
])
def test_which_check_failures_pass_a_full_budget(fixture, fatal) -> None:
    result = judge("nvidia-smi", (NVSMI / fixture).read_text(), "h100-sxm")
    assert result.status.value == "fail", result.reason
    cause = f"active check quick: nvidia-smi-query: {result.reason}"  # as workflows/definitions/active_checks.py
    assert (passes_full_budget(cause) is not None) == fatal, result.reason


def test_a_fatal_fault_is_granted_on_a_spent_budget() -> None:
    spent = FleetSnapshot({"r1": RackCounts(serving=10, unavailable=3, production=7)})
    held = decide(GuardPolicy(), spent, RemovalRequest("n1", "r1", "ecc", "sweep"), {}, 0.0, False)
    fatal = decide(GuardPolicy(), spent, RemovalRequest("n1", "r1", "ecc", "sweep", critical=True), {}, 0.0, False)
    assert (held.granted, fatal.granted) == (False, True)


@pytest.mark.temporal
async def test_the_guard_grants_an_ecc_drain_on_a_spent_budget_and_holds_a_remap_pending_one(make_settings, sqlite_url) -> None:
    """Through the real guard workflow: the activity every workflow asks it through marks a
    fatal fault critical; the same spent budget holds a fault a reset fixes."""
    import asyncio

    from sqlmodel import Session
    from temporalio.testing import ActivityEnvironment

    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import Node
    from workflows.activities.guard import GuardActivities
    from workflows.client import connect, ensure_capacity_guard
    from workflows.worker import BackgroundWorker

    settings = make_settings(sqlite_url)
    with Session(get_engine(sqlite_url)) as session:  # ten nodes, one out: the 10 % budget is spent
        for i in range(10):
            session.add(Node(name=f"n{i}", address=f"sim://n{i}", profile="h100-sxm", rack="r1",
                             state="maintenance" if i == 0 else "production"))
        session.commit()
    worker = BackgroundWorker(settings).start()
    try:
        client = await connect(settings)
        activities = GuardActivities(settings, guard=lambda: ensure_capacity_guard(client, settings))

        def ask(fixture: str, node: str):
            reason = judge("nvidia-smi", (NVSMI / fixture).read_text(), "h100-sxm").reason
            return ActivityEnvironment().run(activities.ask_capacity_guard,
                                             RemovalRequest(node, "r1", f"active check quick: nvidia-smi-query: {reason}",
                                                            "sweep", request_id=node))

        ecc = await asyncio.to_thread(lambda: asyncio.run(ask("csv_8xh100_uncorrectable_ecc_fail.txt", "n1")))
        pending = await asyncio.to_thread(lambda: asyncio.run(ask("q_8xh100_remap_pending_fail.txt", "n2")))
    finally:
        worker.stop()
    assert ecc.granted and "critical fault" in ecc.reason
    assert not pending.granted and "fleet limit" in pending.reason
