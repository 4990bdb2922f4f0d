"""Acting at the size of the fault, on the simulated fleet through the real workflows: an XID 48
on one GPU of an 8-GPU node (the simulator's own kernel log, read by the agent's parser) takes
that GPU out of the scheduler and leaves the node in production, running a 7-GPU job and
refusing an 8-GPU one; without the site's `scope: gpu` the same log drains the node, as before."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fleetctl.agent.detect import detect
from fleetctl.checks.xid_policy import load_xid_policy
from fleetctl.cli.main import app
from fleetctl.db import gpu_quarantines, queries
from fleetctl.nodes.gpu_quarantine import gpu_key
from fleetctl.sim.faults import SimFaultSpec
from fleetctl.sim.node import build_node_state
from fleetctl.sim.profiles import sim_profile
from fleetctl.sim.render.xid import render_kernel_log
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.api import HealthEventInput, node_workflow_id
from fleetctl.workflows.client import send_health_events
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import MESSAGE, QUICK, SCHEDULER
from tests.support.fleet import wait_for
from tests.support.sim_fleet import finish_job, fleet_in_production
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal

# One attempt of each step of the path: the events recorded, the scope planned, the guard
# asked, the GPU taken out (the activities' start-to-close timeouts), and as much again for
# the worker to take each task on a loaded machine.
QUARANTINE_BOUND_S = 2 * sum(o["start_to_close_timeout"].total_seconds() for o in (QUICK, QUICK, MESSAGE, SCHEDULER))
# The site's policy: NVIDIA's XID 48 (DBE) and XID 64 (the row remap that failed after it) are
# confined to the GPU that logged them.
GPU_SCOPED = "xid:\n  48: {scope: gpu}\n  64: {scope: gpu}\n"
FAULTY_GPU = 3


def _xid48_events(node: str, profile: str, policy) -> tuple[list[HealthEventInput], str]:
    """The events the agent sends for an XID 48 on GPU FAULTY_GPU of the simulated node: its
    kernel log as dmesg prints it, each line read by the agent's parser. And that GPU's key."""
    now = time.time()
    state = build_node_state(node, sim_profile(profile), 0, [SimFaultSpec("xid48", gpu=FAULTY_GPU)], now)
    log = render_kernel_log(state, "dmesg").stdout
    events = []
    for i, line in enumerate(log.splitlines()):
        for j, fault in enumerate(detect(line, policy)):
            events.append(
                HealthEventInput(
                    node,
                    "agent",
                    fault.code,
                    fault.message,
                    "fleetctl-agent",
                    f"{node}/xid48/{i}/{j}",
                    now,
                    severity=fault.severity,
                    at_from_record=True,
                    gpu=fault.gpu,
                )
            )
    return events, gpu_key(state.gpus[FAULTY_GPU].pci_bus_id)


def _cli(settings, *args: str):
    base = ["--db-url", settings.db_url, "--temporal-address", settings.temporal_address]
    # Wide enough for `node list -o wide`'s every column unshortened.
    return CliRunner().invoke(
        app, [*base, "--task-queue", settings.task_queue, "--fleet", settings.fleet, *args], env={"COLUMNS": "300"}
    )


async def _shown_to_the_operator(settings, node: str, gpu: str) -> None:
    """`node show`, `node list` and `fleet status` name the GPU out, on a node in production."""
    shown = await asyncio.to_thread(_cli, settings, "node", "show", node)
    assert shown.exit_code == 0, shown.output
    assert f"GPU out: {gpu} since" in shown.stdout and "XID 48" in shown.stdout
    listed = await asyncio.to_thread(_cli, settings, "node", "list", "-o", "json")
    assert listed.exit_code == 0, listed.output
    (row,) = json.loads(listed.stdout)
    assert (row["state"], [g["gpu"] for g in row["gpus_out"]]) == ("production", [gpu])
    wide = await asyncio.to_thread(_cli, settings, "node", "list", "-o", "wide")
    assert "GPUS-OUT" in wide.stdout and gpu in wide.stdout
    status = await asyncio.to_thread(_cli, settings, "fleet", "status")
    assert status.exit_code == 0, status.output
    assert "GPUs out of their schedulers: 1" in status.stdout and gpu in status.stdout
    assert "0.875" in status.stdout  # the fleet budget's headroom: the GPU costs 1/8 of its node
    as_json = await asyncio.to_thread(_cli, settings, "fleet", "status", "-o", "json")
    fleet = json.loads(as_json.stdout)["budget"][0]
    assert (fleet["scope"], fleet["unavailable"], fleet["serving"]) == ("fleet", 0.125, 1)


async def _released_by_the_operator(fleet, node: str, gpu: str, eight: str, seven: str) -> None:
    """`node release-gpu` puts the GPU back in the scheduler's GRES: once the 7-GPU job ends, the
    8-GPU one runs there. A GPU not out, or not an address, is refused in one line."""
    scheduler = SimScheduler(fleet.engine)
    finish_job(fleet.engine, seven)
    assert scheduler.job(eight).state == "pending"
    bad = await asyncio.to_thread(_cli, fleet.settings, "node", "release-gpu", node, "gpu3", "--reason", "x")
    assert bad.exit_code == 2 and bad.stderr.strip().count("\n") == 0
    assert "'gpu3' is not a GPU's PCI address" in bad.stderr
    done = await asyncio.to_thread(
        _cli, fleet.settings, "node", "release-gpu", node, gpu.upper(), "--reason", "reset; dcgm diag r3 passed"
    )
    assert done.exit_code == 0, done.output
    assert done.stdout.strip() == f"{node}: GPU {gpu} back in the scheduler"
    assert gpu_quarantines.gpus_out(fleet.engine, node) == [] and scheduler.gpus_out(node) == []
    assert scheduler.job(eight).nodes == (node,)
    again = await asyncio.to_thread(_cli, fleet.settings, "node", "release-gpu", node, gpu, "--reason", "x")
    assert again.exit_code == 1 and f"GPU {gpu} is not out (out: none)" in again.stderr


async def _idle(client, node: str) -> bool:
    now = await client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)
    return not now.work and not now.activity


async def _fleet(make_settings, sqlite_url, tmp_path: Path, policy_text: str | None):
    settings = make_settings(sqlite_url)
    if policy_text is not None:
        path = tmp_path / "xid-policy.yaml"
        path.write_text(policy_text)
        settings = dataclasses.replace(settings, xid_policy=str(path))
    worker = WorkerThread(settings).start()
    return worker, await fleet_in_production(settings, 1, racks=1)


async def test_an_xid48_on_one_gpu_takes_that_gpu_out_and_the_node_runs_a_7_gpu_job(
    make_settings, sqlite_url, tmp_path
) -> None:
    worker, fleet = await _fleet(make_settings, sqlite_url, tmp_path, GPU_SCOPED)
    try:
        (node,) = fleet.names
        events, gpu = _xid48_events(
            node, queries.get_node(fleet.engine, node).profile, load_xid_policy(fleet.settings.xid_policy)
        )
        assert [(e.code, e.gpu) for e in events] == [(48, gpu), (64, gpu)]  # the parser named the GPU
        await send_health_events(fleet.client, node, events)
        await wait_for(
            lambda: gpu_quarantines.gpus_out(fleet.engine, node) == [gpu],
            QUARANTINE_BOUND_S,
            "the GPU's quarantine recorded",
        )
        await wait_for(lambda: _idle(fleet.client, node), QUARANTINE_BOUND_S, "the node's workflow idle")

        assert fleet.state(node) == "production"
        assert [e.trigger for e in queries.node_events(fleet.engine, node) if e.trigger == "drain"] == []
        scheduler = SimScheduler(fleet.engine)
        assert scheduler.gpus_out(node) == [gpu]  # the far side: the scheduler's own GRES
        assert scheduler.node_state(node).drained is False
        eight = scheduler.submit("eight-gpus", 1, gpus_per_node=8)
        seven = scheduler.submit("seven-gpus", 1, gpus_per_node=7)
        assert scheduler.job(eight.job_id).state == "pending"
        assert scheduler.job(seven.job_id).nodes == (node,)
        # The guard was asked and counted 1/8 of the node; the XID 64 after it found the GPU out.
        grants = [a.reason for a in queries.automation_events(fleet.engine, node=node) if a.kind == "grant"]
        assert len(grants) == 1 and f"GPU {gpu}: 1/8 of {node}" in grants[0], grants
        now = await fleet.client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)
        assert "out of the scheduler already" in now.last_outcome
        await _shown_to_the_operator(fleet.settings, node, gpu)
        await _released_by_the_operator(fleet, node, gpu, eight.job_id, seven.job_id)
    finally:
        worker.stop()


async def test_without_the_site_s_gpu_scope_the_same_fault_drains_the_node(make_settings, sqlite_url, tmp_path) -> None:
    worker, fleet = await _fleet(make_settings, sqlite_url, tmp_path, None)
    try:
        (node,) = fleet.names
        events, _ = _xid48_events(node, queries.get_node(fleet.engine, node).profile, load_xid_policy(None))
        await send_health_events(fleet.client, node, events)
        await fleet.wait_event(node, "drain", QUARANTINE_BOUND_S)
        assert gpu_quarantines.gpus_out(fleet.engine, node) == []
        assert SimScheduler(fleet.engine).gpus_out(node) == []
    finally:
        worker.stop()
