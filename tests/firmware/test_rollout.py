"""FirmwareRollout over 20 simulated nodes: canary, batches, halt at the failure limit, resume."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fleetctl.db import firmware as db
from fleetctl.db.firmware import record_rollout
from fleetctl.remediation.firmware import load_baseline
from fleetctl.sim.store import add_fault, clear_faults
from fleetctl.workflows.api import RolloutInput
from fleetctl.workflows.client import RolloutRefused, rollout_command, rollout_progress, start_rollout
from tests.support.running_fleet import running_fleet

pytestmark = pytest.mark.temporal
FIXTURE = Path(__file__).parents[1] / "fixtures" / "firmware" / "h100-baseline.yaml"


async def _until(check, timeout_s: float = 60):
    for _ in range(int(timeout_s * 10)):
        value = await check()
        if value:
            return value
        await asyncio.sleep(0.1)
    raise AssertionError("timed out")


async def test_rollout_halts_at_the_failure_limit_and_resumes(fleet_settings) -> None:
    async with running_fleet(fleet_settings) as fleet:
        nodes = sorted(await fleet.add(20, state="maintenance"))
        for n in nodes:
            add_fault(fleet.engine, n, "firmware-drift")
            fleet.record_check(n, "firmware-inventory")
            fleet.record_check(n, "nic-firmware")
        failing = nodes[1:3]  # right after the canary: the updates cannot reach them
        for n in failing:
            add_fault(fleet.engine, n, "unreachable")
        baseline = load_baseline(FIXTURE)

        recorded = record_rollout(fleet.engine, baseline, FIXTURE.read_text(), 1, "5%", 2, False, "tester")
        rollout_id = recorded.rollout_id
        plan = RolloutInput(rollout_id, recorded.baseline_id, recorded.batches, max_failures=2, actor="tester")
        await start_rollout(fleet.client, fleet.settings, plan)
        assert [len(b) for b in plan.batches] == [1] * 20 and plan.batches[0] == [nodes[0]]

        async def halted():
            p = await rollout_progress(fleet.client, rollout_id)
            return p if p.status == "halted" else None

        p = await _until(halted)
        assert (p.done, p.failed, p.next_batch) == (1, 2, 3) and p.failed_nodes == failing

        async def recorded(status: str):  # the record follows the workflow's own state by one activity
            row = db.get_rollout(fleet.engine, rollout_id)
            return row if row.status == status else None

        row = await _until(lambda: recorded("halted"))
        assert (row.status, row.done, row.failed) == ("halted", 1, 2) and "halted after batch 2" in row.detail
        results = {r.node_name: r for r in db.rollout_nodes(fleet.engine, rollout_id)}
        assert results[nodes[0]].status == "updated" and "VBIOS" in str(results[nodes[0]].components)
        assert all(results[n].status == "failed" and "unreachable" in results[n].detail for n in failing)
        assert set(results) == set(nodes[:3])  # nothing after the halt was touched

        with pytest.raises(RolloutRefused, match="halted"):
            await rollout_command(fleet.client, rollout_id, "resume", "tester")
            await rollout_command(fleet.client, rollout_id, "resume", "tester")
        for n in failing:
            clear_faults(fleet.engine, n, "unreachable")

        async def completed():
            p = await rollout_progress(fleet.client, rollout_id)
            return p if p.status == "completed" else None

        p = await _until(completed, 120)
        assert (p.done, p.failed) == (18, 2)
        statuses = [r.status for r in db.rollout_nodes(fleet.engine, rollout_id)]
        assert statuses.count("updated") == 18 and statuses.count("failed") == 2
        assert (await _until(lambda: recorded("completed"))).status == "completed"
