"""The lifecycle on simulated nodes, on the real Temporal dev server and a real database."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from fleetctl.checks import judge
from fleetctl.checks.catalog import CHECKS
from fleetctl.db import queries
from fleetctl.executors.base import NodeTarget
from fleetctl.sim.executor import SimExecutor
from fleetctl.sim.faults import SimFaultSpec
from fleetctl.workflows.api import HealthEventInput, SweepInput, bulk_queue
from fleetctl.workflows.client import guard_status, send_health_events
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from tests.support.checks import record_check, recorded_checks

pytestmark = pytest.mark.temporal


async def test_healthy_nodes_go_from_new_to_production(sim_fleet) -> None:
    fleet = await sim_fleet(3)
    await fleet.admit(fleet.names, suite="burn-in")
    assert set((await fleet.wait_states(fleet.names, {"production", "maintenance"})).values()) == {"production"}
    for name in fleet.names:
        events = queries.node_events(fleet.engine, name)
        assert [(e.from_state, e.to_state) for e in events] == [
            ("new", "burn_in"),
            ("burn_in", "admission"),
            ("admission", "production"),
        ]
        runs = {r.check_name: r for r in queries.latest_checks(fleet.engine, name, limit=50)}
        assert set(runs) == set(recorded_checks("burn-in", "h100-sxm")) and {r.status for r in runs.values()} <= {
            "pass",
            "warn",
        }
        assert runs["nccl-allreduce"].metrics["busbw_gbps"] > 400
        # Over the fabric: all-reduce with both other nodes (and theirs together) ...
        pairs = runs["nccl-pairs"]
        assert (
            sorted(pairs.metrics["partners"]) == sorted(set(fleet.names) - {name}) and len(pairs.metrics["pairs"]) == 3
        )
        assert pairs.metrics["min_busbw_gbps"] > 330 and pairs.status == "pass"
        # ... and every rail, not only mlx5_0, with its error counters read around the run
        rails = runs["ib-rails"]
        assert sorted(rails.metrics["bw_avg_gbps"]) == sorted(f"mlx5_{i} port 1" for i in range(8))
        assert rails.metrics["min_bw_avg_gbps"] > 375 and rails.metrics["counter_increases"] == {}


@pytest.mark.parametrize(
    ("fault", "check", "cause"),
    [
        # ibstat sees these rails Active at 400. The slow one's PCIe link trained to x8: lspci,
        # among the host checks burn-in runs first, sees that before any stress; a flapping link
        # only the node's own rail test sees
        ("ib-rail-slow", "pcie-link", r"device link trained to x8 of x16 \(Mellanox Technologies MT2910 Family"),
        ("ib-link-flap", "ib-rails", r"mlx5_5 port 1: LinkDownedCounter rose by \d+ during the check"),
        # beyond the node's ports: only its pairs see it, and they name it
        ("fabric-slow", "nccl-pairs", r"slow with all 2 partners, each of them fast with another node: the straggler"),
    ],
)
async def test_a_node_bad_over_the_fabric_fails_burn_in(sim_fleet, fault, check, cause) -> None:
    fleet = await sim_fleet(3)
    bad, *good = fleet.names
    fleet.inject(bad, fault, gpu=5)
    await fleet.admit(fleet.names, suite="burn-in")
    failed = await fleet.wait_event(bad, "phase_failed")
    assert failed.cause.startswith(f"burn-in: {check}: ") and re.search(cause, failed.cause), failed.cause
    # Its partners were slow with it only (their own pair was fast): they go on.
    assert set((await fleet.wait_states(good, {"production", "maintenance"})).values()) == {"production"}


async def test_burn_in_failure_sends_the_node_to_maintenance_with_the_check_as_cause(sim_fleet) -> None:
    fleet = await sim_fleet(1)
    (name,) = fleet.names
    fleet.inject(name, "row-remap-failure")
    await fleet.admit([name], suite="burn-in")
    failed = await fleet.wait_event(name, "phase_failed")
    assert failed.to_state == "maintenance" and failed.cause.startswith("burn-in: ")
    assert "enter_production" not in [e.trigger for e in queries.node_events(fleet.engine, name)]


def _straggler_seed(name: str, profile: str) -> int:
    """The fault seed whose NVLink-degraded node clears the profile's absolute floor by the
    most: each run of the check draws its own noise, so the first seed over the floor could sit
    on it, and a later run (the sweep's) fail the check outright (1 in 120 did)."""

    def cleared_by(seed: int) -> float:
        sim = SimExecutor(lambda _n: [SimFaultSpec("nvlink-degraded", seed=seed)], seed=0)
        out = sim.run(NodeTarget(name, f"sim://{name}", profile=profile), CHECKS["nccl-allreduce"].argv, 60)
        result = judge("nccl", out.stdout, profile)
        return result.metrics["busbw_gbps"] if result.status.value in ("pass", "warn") else 0.0

    best = max(range(50), key=cleared_by)
    assert cleared_by(best) > 0, "no straggler-band seed found"
    return best


async def test_nvlink_degraded_node_is_caught_at_admission_as_a_straggler(sim_fleet) -> None:
    fleet = await sim_fleet(7, profile="h200-sxm")
    peers, suspect = fleet.names[:6], fleet.names[6]
    await fleet.admit(peers, suite="standard")
    assert set((await fleet.wait_states(peers, {"production", "maintenance"})).values()) == {"production"}
    fleet.inject(suspect, "nvlink-degraded", seed=_straggler_seed(suspect, "h200-sxm"))
    await fleet.admit([suspect], suite="standard")
    failed = await fleet.wait_event(suspect, "phase_failed")
    nccl = next(
        r for r in reversed(queries.latest_checks(fleet.engine, suspect, limit=50)) if r.check_name == "nccl-allreduce"
    )
    assert nccl.status in ("pass", "warn")  # it cleared the absolute floor ...
    assert failed.from_state == "admission"
    assert failed.cause.startswith("admission: straggler: nccl-allreduce busbw_gbps")  # ... but not its peers


async def test_a_sweep_drains_a_production_node_that_degraded_below_its_peers(sim_fleet) -> None:
    """Within the profile's floor, so the check passes, but well below the same profile's
    nodes: the sweep drains it through the guard, as its own rule."""
    fleet = await sim_fleet(8, profile="h200-sxm")
    await fleet.admit(fleet.names, suite="standard")
    assert set((await fleet.wait_states(fleet.names, {"production", "maintenance"})).values()) == {"production"}
    suspect = fleet.names[5]
    fleet.inject(suspect, "nvlink-degraded", seed=_straggler_seed(suspect, "h200-sxm"))
    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="standard", max_concurrent=8, fleet=fleet.settings.fleet),
        id=f"sweep-{suspect}",
        task_queue=fleet.settings.task_queue,
    )
    nccl = next(
        r for r in reversed(queries.latest_checks(fleet.engine, suspect, limit=50)) if r.check_name == "nccl-allreduce"
    )
    assert nccl.status in ("pass", "warn")  # the absolute floor passes it ...
    assert result.failed == [suspect] and result.drained == [suspect] and result.passed == 7  # ... its peers do not
    drain = await fleet.wait_event(suspect, "drain")
    assert drain.failure == "straggler nccl-allreduce" and drain.actor_kind == "automation"
    assert re.search(r"nccl-allreduce: straggler: nccl-allreduce busbw_gbps: .* below the fleet median", drain.cause)
    assert {n for n in fleet.names if fleet.state(n) != "production"} == {suspect}


async def test_xid79_on_a_production_node_drains_it_at_once(sim_fleet) -> None:
    fleet = await sim_fleet(4)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"})
    victim = fleet.names[0]
    await send_health_events(
        fleet.client, victim, [HealthEventInput(victim, "xid", 79, "fell off the bus", "dmesg", "e-1", 0.0)]
    )
    drain = await fleet.wait_event(victim, "drain")
    assert "XID 79" in drain.cause and drain.actor_kind == "automation"
    assert (await fleet.wait_event(victim, "drain_complete")).to_state == "maintenance"
    assert [h.code for h in queries.health_events(fleet.engine, victim)] == [79]
    # a critical drain is granted even though it is past the fleet's 10% on a 4-node fleet
    assert all(fleet.state(n) == "production" for n in fleet.names[1:])


async def test_an_event_with_a_code_too_large_is_refused_once_and_the_next_event_still_drains(sim_fleet) -> None:
    """Bad data fails its activity once (non-retryable), is recorded as refused, and the
    node's queue moves on: the XID 79 behind it drains the node."""
    fleet = await sim_fleet(4)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"})
    victim = fleet.names[0]
    await send_health_events(
        fleet.client,
        victim,
        [
            HealthEventInput(victim, "xid", 99999999999999999999, "garbled", "dmesg", "bad-1", 0.0),
            HealthEventInput(victim, "xid", 79, "fell off the bus", "dmesg", "e-1", 0.0),
        ],
    )
    drain = await fleet.wait_event(victim, "drain")
    assert "XID 79" in drain.cause
    assert [h.code for h in queries.health_events(fleet.engine, victim)] == [79]
    (refused,) = [
        e for e in queries.automation_events(fleet.engine, limit=50) if e.kind == "rejected" and e.node_name == victim
    ]
    assert "99999999999999999999 is outside" in refused.reason, refused.reason


async def test_repeated_warning_xid_escalates_only_on_the_third(sim_fleet) -> None:
    fleet = await sim_fleet(4)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"})
    node = fleet.names[1]
    for i in range(2):
        await send_health_events(
            fleet.client, node, [HealthEventInput(node, "xid", 94, "contained ECC", "dmesg", f"w{i}", 0.0)]
        )
    await asyncio.sleep(1.0)
    assert (await fleet.wait_states([node], {"production"}))[node] == "production"
    await send_health_events(
        fleet.client, node, [HealthEventInput(node, "xid", 94, "contained ECC", "dmesg", "w2", 0.0)]
    )
    assert "seen 3 times" in (await fleet.wait_event(node, "drain")).cause


async def test_a_folded_repeat_counts_toward_escalation_as_often_as_it_was_seen(sim_fleet) -> None:
    """Two warnings folded into one event (as the agent, the intake or a busy node's queue
    folds them) and then a third: the node drains on the third, as it would had each come
    alone. Recorded as one row, the pair once counted once and the third found one before it."""
    fleet = await sim_fleet(2)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"})
    node = fleet.names[1]
    folded = HealthEventInput(node, "xid", 94, "contained ECC", "dmesg", "f0", 0.0, repeat_count=2)
    await send_health_events(fleet.client, node, [folded])
    assert (await fleet.wait_health_event(node, "f0")).repeat_count == 2
    assert fleet.state(node) == "production"
    await send_health_events(
        fleet.client, node, [HealthEventInput(node, "xid", 94, "contained ECC", "dmesg", "f1", 0.0)]
    )
    assert "seen 3 times" in (await fleet.wait_event(node, "drain")).cause


async def test_checker_storm_trips_the_breaker_and_drains_no_more_than_the_limit(sim_fleet) -> None:
    fleet = await sim_fleet(20)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"}, timeout_s=120)
    for name in fleet.names[:8]:  # 40% fail at once: a checker gone wrong looks just like this
        fleet.inject(name, "row-remap-failure")
    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=20),
        id=f"sweep-{fleet.names[0]}",
        task_queue=fleet.settings.task_queue,
    )
    assert sorted(result.failed) == sorted(fleet.names[:8])
    assert len(result.drained) <= 2 and len(result.drained) + len(result.held) == 8
    # the drained go on to remediation (row-remap failure: RMA); nobody else leaves production
    for name in result.drained:
        await fleet.wait_event(name, "drain_complete")
    assert {n for n in fleet.names if fleet.state(n) != "production"} == set(result.drained)
    guard = await guard_status(fleet.client, fleet.settings)
    assert guard.breaker_open and "storm" in guard.breaker_reason


async def test_a_failed_active_check_is_remediated_to_rma_with_evidence(sim_fleet) -> None:
    """Sweep finds a row-remap failure -> guarded drain -> maintenance -> the ECC runbook -> RMA."""
    from fleetctl.db.remediation import rma_records, runs

    fleet = await sim_fleet(10)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"})
    bad = fleet.names[3]
    fleet.inject(bad, "row-remap-failure")
    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=5),
        id=f"sweep-{bad}",
        task_queue=fleet.settings.task_queue,
    )
    assert result.drained == [bad] and result.passed == 9
    await fleet.wait_event(bad, "send_to_rma")
    (run,) = runs(fleet.engine, node_name=bad)
    assert run.runbook == "ecc-uncorrectable-rma" and run.event["kind"] == "check"
    for _ in range(100):  # the record is written by the step right after the transition
        records = rma_records(fleet.engine, node_name=bad)
        if records:
            break
        await asyncio.sleep(0.1)
    (record,) = records
    assert record.evidence["node"]["name"] == bad and record.evidence["identity"]["gpus"]
    assert any(c["check"] == "nvidia-smi-query" and c["status"] == "fail" for c in record.evidence["failing_checks"])


async def test_an_operator_rma_opens_a_record_with_evidence(sim_fleet) -> None:
    from fleetctl.db.remediation import rma_records
    from fleetctl.workflows.client import request_transition

    fleet = await sim_fleet(2)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"})
    node = fleet.names[0]
    await request_transition(fleet.client, node, "drain", "alice@console", "operator: fans")
    await fleet.wait_event(node, "drain_complete")
    await request_transition(fleet.client, node, "send_to_rma", "alice@console", "operator: fan tray dead")
    for _ in range(100):
        records = rma_records(fleet.engine, node_name=node)
        if records:
            break
        await asyncio.sleep(0.1)
    (record,) = records
    assert record.opened_by == "alice@console" and "fan tray dead" in record.reason
    assert record.evidence["transitions"][-1]["to"] == "rma"


BASELINE = Path(__file__).parents[1] / "fixtures" / "firmware" / "h100-baseline.yaml"


def _set_baseline(fleet) -> None:
    from fleetctl.db.firmware import set_baseline
    from fleetctl.remediation.firmware import load_baseline

    baseline = load_baseline(BASELINE)
    set_baseline(fleet.engine, baseline.name, baseline.to_dict(), BASELINE.read_text(), "tester")


async def test_a_node_at_the_baseline_skips_the_firmware_phase(sim_fleet) -> None:
    fleet = await sim_fleet(1)
    (name,) = fleet.names
    _set_baseline(fleet)
    await fleet.admit([name])
    await fleet.wait_event(name, "enter_production")
    assert "begin_firmware" not in [e.trigger for e in queries.node_events(fleet.engine, name)]


async def test_a_drifted_node_is_updated_in_the_firmware_phase_then_burned_in(sim_fleet) -> None:
    fleet = await sim_fleet(1)
    (name,) = fleet.names
    _set_baseline(fleet)
    fleet.inject(name, "firmware-drift")
    await fleet.admit([name])
    await fleet.wait_event(name, "enter_production")
    events = queries.node_events(fleet.engine, name)
    assert [(e.from_state, e.to_state) for e in events][:2] == [("new", "firmware"), ("firmware", "burn_in")]
    assert "off the baseline" in events[0].cause


async def test_a_failed_firmware_update_sends_the_node_to_maintenance(sim_fleet) -> None:
    fleet = await sim_fleet(1)
    (name,) = fleet.names
    _set_baseline(fleet)
    fleet.inject(name, "firmware-drift")
    for check in ("firmware-inventory", "nic-firmware"):  # its inventory, read before it went dark
        record_check(fleet.settings, name, check)
    fleet.inject(name, "unreachable")  # the update cannot reach it
    await fleet.admit([name])
    failed = await fleet.wait_event(name, "phase_failed")
    assert failed.from_state == "firmware" and failed.cause.startswith("firmware: ")


async def test_a_sweep_checks_the_fleet_in_batches_each_with_its_own_history(sim_fleet) -> None:
    fleet = await sim_fleet(12)
    await fleet.admit(fleet.names)
    await fleet.wait_states(fleet.names, {"production"})
    sweep_id = f"sweep-batches-{fleet.names[0]}"
    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=4, batch_nodes=5),
        id=sweep_id,
        task_queue=fleet.settings.task_queue,
    )
    assert result.checked == 12 and result.passed == 12
    # The batches run in the bulk lane: a sweep's work never takes the critical lane's slots.
    batches = [
        wf.id
        async for wf in fleet.client.list_workflows(
            f"WorkflowType = 'ActiveCheckBatch' AND TaskQueue = '{bulk_queue(fleet.settings.task_queue)}'"
        )
    ]
    assert sorted(batches) == [f"{sweep_id}/batch-{i}" for i in range(3)]
