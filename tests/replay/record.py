"""Record workflow histories for the replay test: `python -m tests.replay.record`.

Runs the scenarios every released version of the workflows must keep replaying (a node
admitted to production, drained and undrained; a critical XID 79 under a job; an active-check
sweep that drains through the capacity guard; a runbook) on a fresh dev server with
simulated nodes, and writes each history as JSON under tests/histories/. Re-record only when
a change is meant to break running workflows (and version it with workflow.patched instead
when they must keep running).
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from pathlib import Path

import yaml

from fleetctl.config import load_settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory import parse_inventory
from fleetctl.sim.inventory import render_inventory
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.sim.store import add_fault
from fleetctl.temporal_server import start_dev_server
from workflows.api import HealthEventInput, SweepInput, guard_id, node_workflow_id
from workflows.client import connect, ensure_node_workflows, request_phase, request_transition, send_health_events
from workflows.definitions.active_checks import ActiveCheckSweep
from workflows.worker import BackgroundWorker

HISTORIES = Path(__file__).resolve().parents[1] / "histories"


async def _wait(engine, name: str, predicate, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate([e.trigger for e in queries.node_events(engine, name)]):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: {[e.trigger for e in queries.node_events(engine, name)]}")
        await asyncio.sleep(0.2)


async def record(directory: Path = HISTORIES) -> list[Path]:
    work = Path(tempfile.mkdtemp(prefix="fleetctl-histories-"))
    server = start_dev_server(work / "temporal.db")
    unique = uuid.uuid4().hex[:6]
    settings = load_settings(flags={"db_url": f"sqlite:///{work / 'fleet.db'}", "temporal_address": server.address,
                                    "task_queue": f"record-{unique}", "fleet": f"record-{unique}"}, env={},
                             config_file="/dev/null")
    engine = get_engine(settings.db_url)
    worker = BackgroundWorker(settings).start()
    try:
        entries = render_inventory(8, 2, "h100-sxm", seed=0, name_prefix="rec")
        queries.upsert_nodes(engine, parse_inventory(yaml.safe_dump({"nodes": entries})))
        names = [e["name"] for e in entries]
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for n in names:
            await request_phase(client, n, "admit", "recorder", "quick")
        for n in names:
            await _wait(engine, n, lambda t: "enter_production" in t)

        drained, critical, checked = names[0], names[1], names[2]
        await request_transition(client, drained, "drain", "recorder", "operator: recording")
        await _wait(engine, drained, lambda t: "drain_complete" in t)
        await request_transition(client, drained, "undrain", "recorder", "operator: recording")

        add_fault(engine, checked, "row-remap-failure")
        await client.execute_workflow(ActiveCheckSweep.run, SweepInput(suite="quick", max_concurrent=4),
                                      id=f"sweep/record-{unique}", task_queue=settings.task_queue)
        await _wait(engine, checked, lambda t: "send_to_rma" in t)

        SimScheduler(engine).submit("recorded-job", 2)
        busy = next(n for n in names if any(j.state == "running" for j in SimScheduler(engine).jobs_on_node(n)))
        add_fault(engine, busy, "xid79")
        await send_health_events(client, busy, [HealthEventInput(busy, "xid", 79, "recorded", "recorder", "rec-79", time.time())])
        await _wait(engine, busy, lambda t: "drain_complete" in t)

        await asyncio.sleep(2.0)  # let the runbook and the job restart finish their last steps

        directory.mkdir(parents=True, exist_ok=True)
        written = []
        wanted = {
            "node_lifecycle_drain_undrain": node_workflow_id(drained),
            "node_lifecycle_xid79_under_a_job": node_workflow_id(busy),
            "node_lifecycle_active_check_to_rma": node_workflow_id(checked),
            "capacity_guard": guard_id(settings.fleet),
            "active_check_sweep": f"sweep/record-{unique}",
            "remediation_ecc_to_rma": f"remediation/{checked}",
            "remediation_xid79": f"remediation/{busy}",
        }
        async for wf in client.list_workflows(f"WorkflowType = 'JobRestart' AND TaskQueue = '{settings.task_queue}'"):
            wanted["job_restart_after_xid79"] = wf.id
        for name, workflow_id in wanted.items():
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            path = directory / f"{name}.json"
            path.write_text(history.to_json())
            written.append(path)
        return written
    finally:
        worker.stop()
        server.stop()


if __name__ == "__main__":
    for p in asyncio.run(record()):
        print(p)
