"""Every shipped runbook end to end on simulated nodes, dry runs, and the lemon node."""

from __future__ import annotations

import asyncio
import dataclasses
import json
from datetime import timedelta

import pytest

from fleetctl.db import queries
from fleetctl.db import remediation as db
from fleetctl.db.models import utcnow
from fleetctl.remediation.events import Event
from fleetctl.remediation.runbooks import load_runbooks
from fleetctl.sim.store import add_fault, faults_for
from fleetctl.workflows.client import run_remediation
from tests.support.running_fleet import running_fleet
from tests.support.worker import DRAIN_LOOKS_OFTEN

pytestmark = pytest.mark.temporal
BOOKS = load_runbooks()


async def _until_state(fleet, node: str, states: set[str], timeout_s: float = 60) -> str:
    for _ in range(int(timeout_s * 5)):
        state = queries.get_node(fleet.engine, node).state
        if state in states:
            return state
        await asyncio.sleep(0.2)
    raise AssertionError(f"{node} stuck in {state}, wanted {states}")


def _steps(result) -> dict[str, str]:
    return {s.name: s.status for s in result.steps}


def _quick_wait(book):
    """The thermal runbook cools down for 10 minutes; the test cannot."""
    steps = tuple(dataclasses.replace(s, params={"duration": "1s"}) if s.action == "wait" else s for s in book.steps)
    return dataclasses.replace(book, steps=steps)


CASES = [
    # runbook, fault, event, run status, step statuses that must hold, node state after
    (
        "xid-79-fallen-off-bus",
        "xid79",
        Event("xid", code=79, message="GPU has fallen off the bus"),
        "succeeded",
        {"reboot": "passed", "burn-in": "passed", "4-set_state": "passed", "5-rma": "skipped"},
        {"production"},
    ),
    (
        "ecc-uncorrectable-rma",
        "row-remap-failure",
        Event("xid", code=64),
        "escalated",
        {"2-rma": "passed", "3-notify": "passed"},
        {"rma"},
    ),
    # One XID 48 whose row remap takes at the reset: reset, rechecked, back in production.
    (
        "xid-reset-gpu",
        "row-remap-pending",
        Event("xid", code=48, message="Double Bit ECC Error"),
        "succeeded",
        {"reset": "passed", "recheck": "passed", "4-set_state": "passed", "5-rma": "skipped"},
        {"production"},
    ),
    # An XID 48 whose remap fails (the simulator's xid48): the recheck fails, then RMA.
    (
        "xid-reset-gpu",
        "xid48",
        Event("xid", code=48, message="Double Bit ECC Error"),
        "escalated",
        {"reset": "passed", "recheck": "failed", "4-set_state": "skipped", "5-rma": "passed"},
        {"rma"},
    ),
    # An XID 48 on a node whose GPU is also throttled hot (HW Thermal Slowdown, a fail of the
    # nvidia-smi query): its memory is clean after the reset, so no RMA; burn-in judges the
    # rest and finds the heat (maintenance).
    (
        "xid-reset-gpu",
        "thermal-throttle",
        Event("xid", code=48, message="Double Bit ECC Error"),
        "succeeded",
        {"reset": "passed", "recheck": "passed", "4-set_state": "passed", "5-rma": "skipped"},
        {"maintenance"},
    ),
    (
        "row-remap-pending",
        "row-remap-pending",
        Event("check", check="nvidia-smi-query", status="warn", message="row remap pending"),
        "succeeded",
        {"reset": "passed", "recheck": "passed", "4-rma": "skipped"},
        {"production"},
    ),
    (
        "nvlink-straggler",
        "nvlink-degraded",
        Event("xid", code=74),
        "succeeded",
        {"reset": "passed", "nccl": "passed", "reboot": "skipped", "7-rma": "skipped"},
        {"production"},
    ),
    (
        "thermal-throttling",
        "thermal-throttle",
        Event("check", check="nvidia-smi-query", status="warn", message="clocks limited by HW Thermal Slowdown"),
        "failed",
        {"3-wait": "passed", "recheck": "failed"},
        {"maintenance"},
    ),
    (
        "ib-port-down",
        "ib-port-down",
        Event("check", check="ib-ports", status="fail", message="Down / Polling"),
        "succeeded",
        {"2-reboot": "passed", "recheck": "failed", "4-set_state": "skipped", "5-notify": "passed"},
        {"maintenance"},
    ),
    (
        "escalation-ladder",
        "row-remap-failure",
        Event("xid", code=119),
        "escalated",
        {"reset": "passed", "after-reset": "failed", "reboot": "passed", "after-reboot": "failed", "8-rma": "passed"},
        {"rma"},
    ),
]


@pytest.mark.parametrize("name, fault, event, status, steps, final", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
async def test_shipped_runbook_end_to_end(fleet_settings, name, fault, event, status, steps, final) -> None:
    async with running_fleet(fleet_settings) as sim_fleet:
        # two more in production: a runbook's burn-in tests the node's fabric with partners
        node, *_partners = await sim_fleet.add(3)
        add_fault(sim_fleet.engine, node, fault)
        book = _quick_wait(BOOKS[name])
        result = await run_remediation(sim_fleet.client, sim_fleet.settings, node, book, event, "tester")
        assert result.status == status, result
        assert {k: v for k, v in _steps(result).items() if k in steps} == steps
        await _until_state(sim_fleet, node, final)
        recorded = db.steps(sim_fleet.engine, result.run_key)
        assert [s.name for s in recorded] == [s.name for s in result.steps]
        assert db.get_run(sim_fleet.engine, result.run_key).status == status
        if "rma" in final:
            (record,) = db.rma_records(sim_fleet.engine, node_name=node)
            assert record.remediation_run == result.run_key


async def test_dry_run_records_and_changes_nothing(fleet_settings) -> None:
    async with running_fleet(fleet_settings) as sim_fleet:
        (node,) = await sim_fleet.add()
        add_fault(sim_fleet.engine, node, "xid79")
        before = len(queries.node_events(sim_fleet.engine, node))
        result = await run_remediation(
            sim_fleet.client,
            sim_fleet.settings,
            node,
            BOOKS["xid-79-fallen-off-bus"],
            Event("xid", code=79),
            "tester",
            dry_run=True,
        )
        assert result.status == "dry_run" and result.mode == "dry_run"
        assert _steps(result) == {
            "0-drain": "would_run",
            "1-restart_jobs": "would_run",
            "reboot": "would_run",
            "burn-in": "would_run",
            "4-set_state": "would_run",
            "5-rma": "skipped",
        }
        assert "would drain" in result.steps[0].detail
        assert len(queries.node_events(sim_fleet.engine, node)) == before
        assert queries.get_node(sim_fleet.engine, node).state == "production"
        assert [f.kind for f in faults_for(sim_fleet.engine, node)] == ["xid79"]
        assert db.get_run(sim_fleet.engine, result.run_key).mode == "dry_run"


async def test_shadow_mode_makes_every_run_a_dry_run(fleet_settings) -> None:
    async with running_fleet(fleet_settings) as sim_fleet:
        (node,) = await sim_fleet.add()
        sim_fleet.settings.remediation_shadow = True
        result = await run_remediation(
            sim_fleet.client, sim_fleet.settings, node, BOOKS["row-remap-pending"], Event("xid", code=63), "tester"
        )
        assert (result.mode, result.status) == ("shadow", "dry_run")
        assert queries.get_node(sim_fleet.engine, node).state == "production"


async def test_lemon_node_goes_to_rma_with_a_complete_evidence_bundle(fleet_settings) -> None:
    async with running_fleet(fleet_settings) as sim_fleet:
        (node,) = await sim_fleet.add()
        for check in ("nvidia-smi-query", "firmware-inventory", "nic-firmware"):
            sim_fleet.record_check(node, check)
        add_fault(sim_fleet.engine, node, "xid79")
        failing = sim_fleet.record_check(node, "nvidia-smi-query")
        assert failing.status == "fail"
        sim_fleet.record_xid(node, 79, "GPU has fallen off the bus.")
        for days_ago in (5, 2):  # two earlier live remediations this week
            key = f"remediation/{node}@earlier{days_ago}"
            db.start_run(
                sim_fleet.engine,
                run_key=key,
                node_name=node,
                runbook="xid-79-fallen-off-bus",
                event={},
                mode="live",
                actor="tester",
                started_at=utcnow() - timedelta(days=days_ago),
            )
            db.record_step(
                sim_fleet.engine,
                run_key=key,
                node_name=node,
                step_index=0,
                name="reboot",
                action="reboot",
                status="passed",
                params={},
                detail="rebooted",
                started_at=utcnow(),
                finished_at=utcnow(),
            )
            db.finish_run(sim_fleet.engine, key, "succeeded", "back in service", utcnow())

        result = await run_remediation(
            sim_fleet.client, sim_fleet.settings, node, BOOKS["xid-79-fallen-off-bus"], Event("xid", code=79), "tester"
        )
        assert result.status == "escalated"
        assert _steps(result)["burn-in"] == "passed"  # the node recovered, but it is a lemon
        set_state = next(s for s in result.steps if s.action == "set_state")
        assert "lemon: remediated 3 times in 7 days (limit 3)" in set_state.detail
        assert queries.get_node(sim_fleet.engine, node).state == "rma"

        (record,) = db.rma_records(sim_fleet.engine, node_name=node)
        e = record.evidence
        assert e["reason"].startswith("lemon") and e["node"]["name"] == node
        assert len(e["identity"]["gpus"]) == 8 and all(g["uuid"] and g["serial"] for g in e["identity"]["gpus"])
        assert any("VBIOS" in c for c in e["identity"]["firmware"])
        assert any(c["check"] == "nvidia-smi-query" and c["status"] == "fail" for c in e["failing_checks"])
        assert [x["code"] for x in e["health_history"]] == [79]
        assert len(e["remediation"]) == 3 and any(s["action"] == "reboot" for r in e["remediation"] for s in r["steps"])
        assert any(t["to"] == "rma" for t in e["transitions"])
        md = record.evidence_markdown
        for text in (
            f"# RMA: {node}",
            e["identity"]["gpus"][0]["uuid"],
            "## Health events since it last entered production",
            "| 79 |",
            "xid-79-fallen-off-bus",
        ):
            assert text in md

        # `rma show` gives this run as it ended, though the bundle was written while it ran.
        from typer.testing import CliRunner

        from fleetctl.cli.main import app

        assert [r["status"] for r in e["remediation"] if r["run"] == result.run_key] == ["running"]
        shown = CliRunner().invoke(
            app, ["--db-url", sim_fleet.settings.db_url, "rma", "show", str(record.id), "-o", "json"]
        )
        assert shown.exit_code == 0, shown.output
        runs = {r["run"]: r for r in json.loads(shown.stdout)["evidence"]["remediation"]}
        assert runs[result.run_key]["status"] == "escalated" == db.get_run(sim_fleet.engine, result.run_key).status
        assert [s["name"] for s in runs[result.run_key]["steps"]] == [s.name for s in result.steps]


async def test_restart_jobs_step_moves_a_running_job_off_the_node_so_the_drain_completes(fleet_settings) -> None:
    """A non-critical drain waits for the node's jobs; the runbook's restart_jobs step is what
    moves them now (a JobRestart each), so the hardware steps after it can run."""
    from fleetctl.db import jobs as job_store
    from fleetctl.sim.scheduler import SimScheduler

    async with running_fleet(fleet_settings) as sim_fleet:
        nodes = await sim_fleet.add(3, **DRAIN_LOOKS_OFTEN)  # the drain completes as soon as the job moves
        scheduler = SimScheduler(sim_fleet.engine)
        job = scheduler.submit("train", 1)
        assert job.state == "running" and len(job.nodes) == 1 and job.nodes[0] in nodes
        (node,) = job.nodes
        add_fault(sim_fleet.engine, node, "thermal-throttle")
        result = await run_remediation(
            sim_fleet.client,
            sim_fleet.settings,
            node,
            _quick_wait(BOOKS["thermal-throttling"]),
            Event("check", check="nvidia-smi-query", status="warn", message="thermal"),
            "tester",
        )
        assert _steps(result)["1-restart_jobs"] == "passed", result
        assert "3-wait" in _steps(result) and _steps(result)["3-wait"] == "passed"  # the node did leave service
        for _ in range(150):
            moved = scheduler.job(job.job_id)
            if moved.state == "running" and node not in moved.nodes:
                break
            await asyncio.sleep(0.2)
        assert moved.state == "running" and node not in moved.nodes, moved
        (restart,) = job_store.job_restarts(sim_fleet.engine, job.job_id)
        assert restart.actor == "runbook:thermal-throttling"
