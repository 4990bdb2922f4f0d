"""The automatic return of a quarantined GPU, on the simulated fleet through the real workflows:
a transient XID 48 (a DBE whose row remap is pending, which NVIDIA's catalog resets) is taken
out, then GpuReturns resets it, rechecks it alone and puts it back, and an 8-GPU job runs on the
node again; a persistent one (the remap that failed) stays out however often it is reset, and
after its failed returns its node is drained for its remediation."""

from __future__ import annotations

import asyncio
import dataclasses
import time
import uuid
from pathlib import Path

import pytest
from sqlmodel import Session, select

from fleetctl.agent.detect import detect
from fleetctl.checks.xid_policy import load_xid_policy
from fleetctl.db import gpu_quarantines, queries
from fleetctl.db.models import GpuQuarantine
from fleetctl.nodes.gpu_quarantine import gpu_key
from fleetctl.sim import store
from fleetctl.sim.faults import SimFaultSpec
from fleetctl.sim.node import build_node_state
from fleetctl.sim.profiles import sim_profile
from fleetctl.sim.render.xid import render_kernel_log
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import GpuReturnsInput, GpuReturnsResult, HealthEventInput
from fleetctl.workflows.client import connect, send_health_events
from fleetctl.workflows.definitions.gpu_returns import GpuReturns
from tests.gpu_quarantine.test_node_workflow import GPU_SCOPED, QUARANTINE_BOUND_S, _idle
from tests.support.cli import console
from tests.support.fleet import wait_for
from tests.support.sim_fleet import fleet_in_production
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal

FAULTY_GPU = 5


def _fault_events(node: str, profile: str, kind: str, policy) -> tuple[list[HealthEventInput], str]:
    """The events the agent sends for the simulated fault `kind` on GPU FAULTY_GPU (its kernel
    log read by the agent's parser), and that GPU's key."""
    now = time.time()
    state = build_node_state(node, sim_profile(profile), 0, [SimFaultSpec(kind, gpu=FAULTY_GPU)], now)
    events = [
        HealthEventInput(
            node,
            "agent",
            fault.code,
            fault.message,
            "fleetctl-agent",
            f"{node}/{kind}/{i}/{j}",
            now,
            severity=fault.severity,
            at_from_record=True,
            gpu=fault.gpu,
        )
        for i, line in enumerate(render_kernel_log(state, "dmesg").stdout.splitlines())
        for j, fault in enumerate(detect(line, policy))
    ]
    return events, gpu_key(state.gpus[FAULTY_GPU].pci_bus_id)


async def _fleet(make_settings, sqlite_url, tmp_path: Path, nodes: int = 1, **guard: float):
    """`nodes` in production under the site's GPU-scoped policy, with the guard's `guard` limits."""
    policy = tmp_path / "xid-policy.yaml"
    policy.write_text(GPU_SCOPED)
    settings = dataclasses.replace(make_settings(sqlite_url), xid_policy=str(policy), **guard)
    worker = WorkerThread(settings).start()
    return worker, await fleet_in_production(settings, nodes, racks=1)


async def _quarantined(fleet, kind: str) -> tuple[str, str]:
    """The fleet's first node with `kind` on GPU FAULTY_GPU (in the simulator's store, so its
    tools answer with it), that GPU taken out by the agent's events."""
    node = fleet.names[0]
    store.add_fault(fleet.engine, node, kind, gpu=FAULTY_GPU)
    events, gpu = _fault_events(
        node, queries.get_node(fleet.engine, node).profile, kind, load_xid_policy(fleet.settings.xid_policy)
    )
    assert events and {e.gpu for e in events} == {gpu} and events[0].code == 48
    await send_health_events(fleet.client, node, events)
    await wait_for(lambda: gpu_quarantines.gpus_out(fleet.engine, node) == [gpu], QUARANTINE_BOUND_S, "quarantined")
    await wait_for(lambda: _idle(fleet.client, node), QUARANTINE_BOUND_S, "the node's workflow idle")
    return node, gpu


async def _returns(fleet, run: str, **inp) -> GpuReturnsResult:
    return await fleet.client.execute_workflow(
        GpuReturns.run,
        GpuReturnsInput(**{"settle_s": 0, **inp}),
        id=f"gpu-returns/test/{run}",
        task_queue=fleet.settings.task_queue,
    )


async def test_a_transient_xid48_gpu_is_reset_rechecked_and_returned(make_settings, sqlite_url, tmp_path) -> None:
    worker, fleet = await _fleet(make_settings, sqlite_url, tmp_path)
    try:
        node, gpu = await _quarantined(fleet, "xid48-remapped")
        scheduler = SimScheduler(fleet.engine)
        assert scheduler.gpus_out(node) == [gpu]
        # Not settled yet: nothing is reset.
        early = await _returns(fleet, "early", settle_s=3600)
        assert (early.returned, early.kept_out) == ([], [])
        assert [f.kind for f in store.faults_for(fleet.engine, node)] == ["xid48-remapped"]

        done = await _returns(fleet, "settled")
        assert done.returned == [f"{node} GPU {gpu}"] and done.kept_out == []
        assert store.faults_for(fleet.engine, node) == []  # the reset activated the remap
        assert gpu_quarantines.gpus_out(fleet.engine, node) == [] and scheduler.gpus_out(node) == []
        with Session(fleet.engine) as session:
            (row,) = session.exec(select(GpuQuarantine).where(GpuQuarantine.node_name == node)).all()
        assert row.release_reason.startswith("gpu-returns: XID 48: the catalog's action is a GPU reset")
        assert "nvidia-smi -r: reset" in row.release_reason and "dcgm-r1: 9 of 9" in row.release_reason
        eight = scheduler.submit("eight-gpus", 1, gpus_per_node=8)
        assert scheduler.job(eight.job_id).nodes == (node,)
        assert fleet.state(node) == "production"
    finally:
        worker.stop()


async def test_a_persistent_fault_stays_out_then_its_node_drains(make_settings, sqlite_url, tmp_path) -> None:
    # Limits that let the node go: the guard counts its GPU out (1/8) and then the whole node,
    # 1.125 nodes, more than one of two (the default 10% would hold it).
    worker, fleet = await _fleet(
        make_settings, sqlite_url, tmp_path, 2, guard_max_unavailable_fleet=1.0, guard_max_unavailable_rack=1.0
    )
    try:
        node, gpu = await _quarantined(fleet, "xid48")
        first = await _returns(fleet, "first", max_failed=2)
        assert first.returned == [] and first.drained == []
        (why,) = first.kept_out
        assert f"{node} GPU {gpu}: return 1 of 2 failed: nvidia-smi-memory: GPU {FAULTY_GPU}: " in why, why
        # The reset ran and cured nothing: the failed remap is the hardware's.
        assert [f.kind for f in store.faults_for(fleet.engine, node)] == ["xid48"]
        assert gpu_quarantines.gpus_out(fleet.engine, node) == [gpu]
        failed = [a for a in queries.automation_events(fleet.engine, node=node) if a.kind == "gpu_return_failed"]
        assert len(failed) == 1 and failed[0].reason.startswith(f"GPU {gpu}: return 1 of 2 failed")
        assert fleet.state(node) == "production"

        second = await _returns(fleet, "second", max_failed=2)
        assert second.returned == [] and second.drained == [node], second
        await fleet.wait_event(node, "drain", QUARANTINE_BOUND_S)
        (drain,) = [e for e in queries.node_events(fleet.engine, node) if e.trigger == "drain"]
        assert "return 2 of 2 failed" in drain.cause
        assert gpu_quarantines.gpus_out(fleet.engine, node) == [gpu]  # out still: the node's remediation's
    finally:
        worker.stop()


def test_schedule_create_gpu_returns_starts_them_on_its_interval(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    name = f"gpu-returns-{uuid.uuid4().hex[:6]}"
    with console(settings) as cli:
        made = cli("schedule", "create", "gpu-returns", "--every", "30m", "--name", name)
        assert made.exit_code == 0, made.output
        assert made.stdout.strip() == f"schedule {name}: quarantined GPUs reset, rechecked and returned every 30m"

        async def action():
            client = await connect(settings)
            return (await client.get_schedule_handle(name).describe()).schedule

        schedule = asyncio.run(action())
        assert (schedule.action.workflow, schedule.action.id) == ("GpuReturns", f"gpu-returns/{name}")
        assert [i.every.total_seconds() for i in schedule.spec.intervals] == [1800.0]
        bad = cli("schedule", "create", "gpu-returns", "--every", "soon", "--name", name)
        assert bad.exit_code == 2 and bad.stderr.strip().count("\n") == 0, bad.output
        assert cli("schedule", "delete", name, "--yes").exit_code == 0
