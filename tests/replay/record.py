"""Record workflow histories for the replay test: `python -m tests.replay.record`.

Sets, each recorded on a fresh dev server with simulated nodes and written as JSON. The set
recorded before any `workflow.patched` id existed (v1) was retired with the patches whose old
branches it took (docs/decisions/0023-retiring-patches.md); git history keeps it.

- v2 (tests/histories/v2/*.json), recorded at a HEAD with patches: scenarios that take every
  patched branch (a firmware baseline in force during admission, a node entering production
  and resumed in its scheduler, a health event whose code does not fit its column, a runbook
  whose `restart_jobs` step finds a running job, a drain whose job outlasts its wait, a sweep
  in batches whose checks end in error, whose fleet has a silent agent and whose passed
  all-reduce is judged against its peers, a node's search attributes carried across
  continue-as-new, a critical XID 79 drain granted without the fleet's counts, a burst of logged health events with a critical one behind minor
  ones). Replaying it proves the new branches are
  deterministic; tests/replay/test_replay.py checks every patch id in the code is in one.
- v3 (tests/histories/v3/*.json), the branches patched after v2, each on its own: critical
  events pre-empt the node's long work (critical-events-preempt): a drain waiting for its
  job turned critical by an XID 79, a recheck's HPL and a burn-in's HPL cut short by one, an
  XID 79 taken ahead of a minor event queued before it, and a firmware flash that may
  finish first; a runbook's wait cut short by an XID 79, whose runbook then starts
  (remediation-interrupt); a burst of XID 64 whose RMAs are held for an operator, one
  confirmed and one rejected, and two XID 64 whose RMAs wait out the storm window first
  (rma-burst-confirmation); in each, the queue's oldest item shown as FleetctlQueuedSince
  (queued-since-attribute); every admission held in its scheduler first (fence-burn-in), a
  recheck of a node running a job skipped and a sweep's check held then released
  (fence-checks); a GB200 domain held whole by a sweep's failed imex check and by a fatal
  NVSwitch SXid, with the guard's grant per tray (nvlink-domain-hold); and the workflow
  types no set had yet: a firmware roll-out and a job history sync.
- v4 (tests/histories/v4/*.json), the bounded run (bounded-run): an operator's drain waits for
  its job while a storm of one minor Xid arrives, folded into one queued event; the run
  continues as new before its signal budget is spent, carrying the drain's wait, and in the
  next run an XID 79 turns the carried drain critical and restarts the job.

- v5 (tests/histories/v5/*.json), job restarts keyed by their fault (restart-keyed-by-fault):
  an XID 79 under a job, whose node's workflow restarts it, and a runbook that drains its node
  and moves the job under the drain's key.
- v6 (tests/histories/v6/*.json), recorded at release 0.2.0, after the patches of v2's day and
  critical-events-preempt were deprecated (`workflow.deprecate_patch`): what v1 recorded (a node
  admitted, drained and undrained; a critical XID 79 under a job; an active-check sweep that
  drains through the capacity guard; runbooks) on today's code. Its markers of the deprecated
  ids are deprecated ones, which a replay skips once the calls are gone.
- v7 (tests/histories/v7/*.json), the cluster validation (ClusterValidation): eight nodes held,
  one of them with a slow fabric, the all-reduce bisected to it.
- v8 (tests/histories/v8/*.json), a hung-job judge (HungJobs) that drains the node a job hung on
  and restarts the job off it as that drain's fault.

- v9 (tests/histories/v9/*.json), a fault confined to one GPU (gpu-quarantine): an XID 48 and
  the XID 64 after it on one GPU of a node whose site policy scopes both to the GPU: the GPU
  taken out of its scheduler through the capacity guard, the second found out already; then an
  operator's release of the GPU (the update release_gpu).

- v10 (tests/histories/v10/*.json), the automatic return of quarantined GPUs (GpuReturns): of
  two GPUs out, one with a transient XID 48 (its row remap pending) reset, rechecked and
  returned through its node's release_gpu; the other's remap failed: kept out, its node drained.

- v11 (tests/histories/v11/*.json), the guard's question with its facts read in one activity
  (the update request_removal_at_once; docs/decisions/0030): an XID 79's critical drain and a
  runbook's drain judged on the fleet's counts. Sets v2 to v10 replay the guard's earlier
  update (request_removal), its facts read one activity at a time.

- v12 (tests/histories/v12/*.json), the short steps of the critical path as local activities
  (quick-steps-local; docs/decisions/0033): a minor event and an XID 79 on a node running a
  job, its drain through the guard and the job's restart, as the node's and the guard's
  histories. Every earlier set replays them as the activities they were.

By default only the newest set (v12) is recorded; `--set v2` or `--set all` rewrites older sets too, which is
only right when a change is meant to break running workflows (version it with
workflow.patched instead when they must keep running, and record a new set).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import tempfile
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml
from sqlalchemy import update
from sqlmodel import Session
from temporalio.client import Client, WorkflowHistory
from temporalio.common import WorkflowIDConflictPolicy

from fleetctl.config import Settings, load_settings
from fleetctl.connections.temporal_server import start_dev_server
from fleetctl.db import gpu_quarantines, queries
from fleetctl.db import remediation as rma_db
from fleetctl.db.engine import get_engine
from fleetctl.db.firmware import record_rollout, set_baseline
from fleetctl.db.jobs import record_checkpoint
from fleetctl.db.models import Job, StragglerFinding
from fleetctl.inventory.parse import parse_inventory
from fleetctl.nodes.gpu_quarantine import gpu_key
from fleetctl.nodes.search_attributes import start_attributes
from fleetctl.remediation.events import Event
from fleetctl.remediation.firmware import load_baseline
from fleetctl.remediation.runbooks import load_runbooks, parse_runbook
from fleetctl.sim.inventory import render_inventory
from fleetctl.sim.node import build_node_state
from fleetctl.sim.profiles import sim_profile
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.sim.store import add_fault
from fleetctl.workflows.api import (
    RMA_DECISION_UPDATE,
    GpuReturnsInput,
    HealthEventInput,
    HungJobsInput,
    JobSyncInput,
    NodeLifecycleState,
    RmaDecided,
    RmaDecision,
    RolloutInput,
    StragglerSweepInput,
    SweepInput,
    ValidationInput,
    gpu_returns_id,
    guard_id,
    hung_jobs_id,
    job_sync_id,
    node_workflow_id,
    remediation_id,
    rollout_workflow_id,
    straggler_sweep_id,
    validation_id,
)
from fleetctl.workflows.client import (
    connect,
    ensure_node_workflows,
    release_gpu,
    request_phase,
    request_transition,
    run_remediation,
    run_validation,
    send_health_events,
    start_remediation,
    start_rollout,
)
from fleetctl.workflows.definitions.active_checks import ActiveCheckBatch, ActiveCheckSweep
from fleetctl.workflows.definitions.firmware_rollout import FirmwareRollout
from fleetctl.workflows.definitions.gpu_returns import GpuReturns
from fleetctl.workflows.definitions.hung_jobs import HungJobs
from fleetctl.workflows.definitions.job_history import JobHistorySync
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.stragglers import ProductionStragglers
from fleetctl.workflows.worker import BackgroundWorker
from tests.support.checks import record_check

HISTORIES = Path(__file__).resolve().parents[1] / "histories"
SETS = {
    "v2": HISTORIES / "v2",
    "v3": HISTORIES / "v3",
    "v4": HISTORIES / "v4",
    "v5": HISTORIES / "v5",
    "v6": HISTORIES / "v6",
    "v7": HISTORIES / "v7",
    "v8": HISTORIES / "v8",
    "v9": HISTORIES / "v9",
    "v10": HISTORIES / "v10",
    "v11": HISTORIES / "v11",
    "v12": HISTORIES / "v12",
}
WORKFLOW_IDS = "workflow_ids.yaml"  # {history name: the workflow id it was recorded under}
# {history name: the patch ids it recorded}, decoded from its markers: the payloads in the
# JSON are base64, so this is what a reader (or a grep) sees of which branches a set covers.
PATCH_INDEX = "patches.json"
# What temporalio's workflow.patched records: a marker of this name whose details hold the
# patch id as a JSON payload ({"id": ..., "deprecated": ...}).
PATCH_MARKER = "core_patch"


def patch_marker_details(history: WorkflowHistory) -> list[dict]:
    """The details of a history's patch markers, decoded from its MarkerRecorded events:
    {"id": ..., "deprecated": ...}, one for each marker."""
    details = []
    for event in history.events:
        if not event.HasField("marker_recorded_event_attributes"):
            continue
        marker = event.marker_recorded_event_attributes
        if marker.marker_name != PATCH_MARKER:
            continue
        for payloads in marker.details.values():
            for payload in payloads.payloads:
                assert payload.metadata.get("encoding") == b"json/plain", payload.metadata
                details.append(json.loads(payload.data))
    return details


def patch_markers(history: WorkflowHistory) -> set[str]:
    """The patch ids a history recorded."""
    return {detail["id"] for detail in patch_marker_details(history)}


BASELINE = Path(__file__).resolve().parents[1] / "fixtures" / "firmware" / "h100-baseline.yaml"
# A code too large for the health_events column: its activity fails once, without retries.
UNFIT_XID = 99999999999999999999
# v2's drains wait this long for a node's jobs, polling this often (2 h and 30 s in a fleet):
# long enough that a runbook's restart_jobs moves a job first, short enough to record.
DRAIN_JOB_WAIT_S = 10.0
SET_STATE_DRAINING = """
name: drain-by-state
description: drains by naming the state
match: {xid: [13]}
steps:
  - action: set_state
    with: {state: draining, cause: recording}
"""
DRAIN_JOB_POLL_S = 2.0
AGENT_SILENCE_S = 5.0


@dataclass
class Recording:
    settings: Settings
    client: Client
    unique: str

    @property
    def engine(self):
        return get_engine(self.settings.db_url)

    def triggers(self, node: str) -> list[str]:
        return [e.trigger for e in queries.node_events(self.engine, node)]

    async def wait(self, node: str, predicate, timeout_s: float = 90.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not predicate(self.triggers(node)):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node}: {self.triggers(node)}")
            await asyncio.sleep(0.2)

    async def idle(self, node: str, timeout_s: float = 60.0) -> None:
        """The node's workflow has nothing queued or in progress."""
        deadline = time.monotonic() + timeout_s
        while True:
            s = await self.client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)
            if not s.work and not s.activity:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{node}: still busy: {s.activity or s.work}")
            await asyncio.sleep(0.2)

    def add_nodes(self, count: int, prefix: str, profile: str = "h100-sxm", racks: int = 2) -> list[str]:
        entries = render_inventory(count, racks, profile, seed=0, name_prefix=prefix)
        queries.upsert_nodes(self.engine, parse_inventory(yaml.safe_dump({"nodes": entries})))
        return [e["name"] for e in entries]

    async def workflow_ids(self, workflow_type: str) -> list[str]:
        query = f"WorkflowType = '{workflow_type}' AND TaskQueue = '{self.settings.task_queue}'"
        return sorted([wf.id async for wf in self.client.list_workflows(query)])

    async def save(self, directory: Path, wanted: dict[str, str]) -> None:
        """Each wanted workflow's history as `<name>.json`, and nothing else: a scenario of its own
        server returns `wanted` for the set's last write to index (workflow ids, patches)."""
        for name, workflow_id in wanted.items():
            history = await self.client.get_workflow_handle(workflow_id).fetch_history()
            (directory / f"{name}.json").write_text(history.to_json())

    async def write(self, directory: Path, wanted: dict[str, str]) -> list[Path]:
        directory.mkdir(parents=True, exist_ok=True)
        written, patches = [], {}
        for name, workflow_id in wanted.items():
            history = await self.client.get_workflow_handle(workflow_id).fetch_history()
            path = directory / f"{name}.json"
            path.write_text(history.to_json())
            written.append(path)
            patches[name] = sorted(patch_markers(history))
        # Replay runs each history under its workflow id (a child's id may be built from it):
        # the JSON holds only events, so the ids are kept beside it.
        ids = directory / WORKFLOW_IDS
        ids.write_text(yaml.safe_dump(wanted, sort_keys=True))
        written.append(ids)
        if any(patches.values()):
            index = directory / PATCH_INDEX
            index.write_text(json.dumps(patches, indent=1, sort_keys=True) + "\n")
            written.append(index)
        return written


@asynccontextmanager
async def recording(**flags) -> AsyncIterator[Recording]:
    """A fresh dev server, database and worker, gone afterwards; `flags` set more settings."""
    work = Path(tempfile.mkdtemp(prefix="fleetctl-histories-"))
    server = start_dev_server(work / "temporal.db")
    unique = uuid.uuid4().hex[:6]
    settings = load_settings(
        flags={
            "db_url": f"sqlite:///{work / 'fleet.db'}",
            "temporal_address": server.address,
            "task_queue": f"record-{unique}",
            "fleet": f"record-{unique}",
            # two runbooks drain through the guard in a fleet of 8 (v6) or 10 (v2)
            "guard_max_unavailable_fleet": 0.5,
            "guard_max_unavailable_rack": 0.5,
            # an agent heard a minute ago is silent (v2's sweep)
            "agent_silence_s": AGENT_SILENCE_S,
            # v2's straggler is drained at its job's end
            "straggler_policy": "drain-at-checkpoint",
            **flags,
        },
        env={},
        config_file="/dev/null",
    )
    get_engine(settings.db_url)
    worker = BackgroundWorker(settings).start()
    try:
        yield Recording(settings, await connect(settings), unique)
    finally:
        worker.stop()
        server.stop()


async def record_v6(directory: Path = SETS["v6"]) -> list[Path]:
    async with recording() as rec:
        client, settings, engine = rec.client, rec.settings, rec.engine
        names = rec.add_nodes(8, "rec")
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for n in names:
            await request_phase(client, n, "admit", "recorder", "quick")
        for n in names:
            await rec.wait(n, lambda t: "enter_production" in t)

        drained, checked = names[0], names[2]
        await request_transition(client, drained, "drain", "recorder", "operator: recording")
        await rec.wait(drained, lambda t: "drain_complete" in t)
        await request_transition(client, drained, "undrain", "recorder", "operator: recording")

        add_fault(engine, checked, "row-remap-failure")
        await client.execute_workflow(
            ActiveCheckSweep.run,
            SweepInput(suite="quick", max_concurrent=4),
            id=f"sweep/record-{rec.unique}",
            task_queue=settings.task_queue,
        )
        await rec.wait(checked, lambda t: "send_to_rma" in t)

        SimScheduler(engine).submit("recorded-job", 2)
        busy = next(n for n in names if any(j.state == "running" for j in SimScheduler(engine).jobs_on_node(n)))
        add_fault(engine, busy, "xid79")
        await send_health_events(
            client, busy, [HealthEventInput(busy, "xid", 79, "recorded", "recorder", "rec-79", time.time())]
        )
        await rec.wait(busy, lambda t: "drain_complete" in t)

        await asyncio.sleep(2.0)  # let the runbook and the job restart finish their last steps

        wanted = {
            "node_lifecycle_drain_undrain": node_workflow_id(drained),
            "node_lifecycle_xid79_under_a_job": node_workflow_id(busy),
            "node_lifecycle_active_check_to_rma": node_workflow_id(checked),
            "capacity_guard": guard_id(settings.fleet),
            "active_check_sweep": f"sweep/record-{rec.unique}",
            "remediation_ecc_to_rma": f"remediation/{checked}",
            "remediation_xid79": f"remediation/{busy}",
        }
        for workflow_id in await rec.workflow_ids("JobRestart"):
            wanted["job_restart_after_xid79"] = workflow_id
        return await rec.write(directory, wanted)


async def record_v2(directory: Path = SETS["v2"]) -> list[Path]:
    async with recording() as rec:
        client, settings, engine = rec.client, rec.settings, rec.engine
        scheduler = SimScheduler(engine)
        names = rec.add_nodes(10, "rv2")
        drifted, bad_event = names[0], names[1]

        # A firmware baseline in force during admission: every node compares itself with it
        # (patch firmware-phase); the drifted one is updated in the firmware phase first.
        baseline = load_baseline(BASELINE)
        set_baseline(engine, baseline.name, baseline.to_dict(), BASELINE.read_text(), "recorder")
        add_fault(engine, drifted, "firmware-drift")
        for n in names:
            await client.start_workflow(
                NodeLifecycle.run,
                NodeLifecycleState(node=n, drain_job_wait_s=DRAIN_JOB_WAIT_S, drain_job_poll_s=DRAIN_JOB_POLL_S),
                id=node_workflow_id(n),
                task_queue=settings.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            )
        for n in names:
            await request_phase(client, n, "admit", "recorder", "quick")
        # Entering production resumes the node in its scheduler (patch resume-in-scheduler).
        for n in names:
            await rec.wait(n, lambda t: "enter_production" in t)
        if "begin_firmware" not in rec.triggers(drifted):
            raise RuntimeError(f"{drifted}: the firmware phase did not run: {rec.triggers(drifted)}")

        # A code that does not fit its column is refused once (patch bad-health-event-skipped).
        await send_health_events(
            client,
            bad_event,
            [HealthEventInput(bad_event, "xid", UNFIT_XID, "garbled", "recorder", "rv2-unfit", time.time())],
        )

        # A runbook whose restart_jobs step finds a running job (patch runbook-restarts-jobs):
        # drain, then move the job, then nothing else (its hardware steps are v6's concern).
        job = scheduler.submit("recorded-train", 1)
        (runbook_node,) = job.nodes
        book = load_runbooks()["thermal-throttling"]
        book = dataclasses.replace(book, steps=tuple(s for s in book.steps if s.action in ("drain", "restart_jobs")))
        result = await run_remediation(
            client,
            settings,
            runbook_node,
            book,
            Event("check", check="nvidia-smi-query", status="warn", message="thermal"),
            "recorder",
        )
        if result.status != "succeeded" or "restarting 1 job" not in result.steps[-1].detail:
            raise RuntimeError(f"{runbook_node}: the runbook did not restart the job: {result}")
        await rec.wait(runbook_node, lambda t: "drain_complete" in t)

        # A runbook that drains by naming the state goes through the capacity guard (patch
        # set-state-drain-asks-the-guard; the guard reads its own policy and evidence first:
        # patch guard-reads-policy-and-evidence).
        state_drained = next(
            n
            for n in names
            if n not in (drifted, bad_event, runbook_node)
            and queries.get_node(engine, n).state == "production"
            and not scheduler.jobs_on_node(n)
        )
        by_state = parse_runbook(SET_STATE_DRAINING)
        result = await run_remediation(client, settings, state_drained, by_state, Event("xid", code=13), "recorder")
        if result.status != "succeeded":
            raise RuntimeError(f"{state_drained}: set_state draining did not drain through the guard: {result}")
        await rec.wait(state_drained, lambda t: "drain_complete" in t)

        # A drain whose job outlasts its wait: the job is restarted elsewhere at the deadline
        # (patch drain-deadline-restarts-jobs).
        job = scheduler.submit("recorded-long-train", 1)
        (deadline_node,) = job.nodes
        await request_transition(client, deadline_node, "drain", "recorder", "operator: recording")
        await rec.wait(deadline_node, lambda t: "drain_complete" in t, timeout_s=DRAIN_JOB_WAIT_S + 60)

        # A critical fault: the guard grants it without the fleet's counts (patch
        # guard-critical-skips-snapshot) and the cordon tells the scheduler so (patch critical-cordon). Every
        # drain above moved the node's pods by the policy (none here: patch drain-moves-pods)
        # and showed the node in maintenance in its scheduler (patch report-scheduler-state).
        critical_node = next(
            n
            for n in names
            if n not in (runbook_node, deadline_node, bad_event)
            and queries.get_node(engine, n).state == "production"
            and not scheduler.jobs_on_node(n)
        )
        await send_health_events(
            client,
            critical_node,
            [HealthEventInput(critical_node, "xid", 79, "fallen off the bus", "recorder", "rv2-79", time.time())],
        )
        await rec.wait(critical_node, lambda t: "drain_complete" in t)

        # A production straggler found while its job ran, drained through the capacity guard
        # now that the job has checkpointed, and its job restarted off it (ProductionStragglers;
        # no Prometheus here: its questions are errors in the result, and the finding was
        # recorded by an earlier judging).
        straggler_id = await straggler_scenario(rec)

        # A sweep in batches (patch sweep-batches) in which one node's checks end in error: the
        # errors are reported to the capacity guard (patch report-check-errors).
        unreachable = next(
            n
            for n in reversed(names)
            if n != critical_node
            and queries.get_node(engine, n).state == "production"
            and not scheduler.jobs_on_node(n)
        )
        add_fault(engine, unreachable, "unreachable")
        # In the same sweep, a node whose agent was last heard a minute ago is suspect and
        # reported to the guard, which is asked to drain it (patch agent-silence).
        quiet = next(
            n
            for n in names
            if n not in (unreachable, critical_node)
            and queries.get_node(engine, n).state == "production"
            and not scheduler.jobs_on_node(n)
        )
        queries.record_agent_heartbeats(engine, {quiet: datetime.now(UTC) - timedelta(seconds=60)})
        # The standard suite: a node's passed all-reduce is judged against its peers (patch
        # sweep-peer-stragglers).
        sweep_id = f"sweep/record-{rec.unique}"
        swept = await client.execute_workflow(
            ActiveCheckSweep.run,
            SweepInput(suite="standard", max_concurrent=2, batch_nodes=2, fleet=settings.fleet),
            id=sweep_id,
            task_queue=settings.task_queue,
        )
        if unreachable not in swept.errors:
            raise RuntimeError(f"the sweep recorded no error for {unreachable}: {swept}")
        if swept.silent != [quiet] or quiet not in swept.drained + swept.held:
            raise RuntimeError(f"the sweep did not judge {quiet}'s silent agent: {swept}")
        batches = [i for i in await rec.workflow_ids("ActiveCheckBatch") if i.startswith(sweep_id)]
        errored = [
            i
            for i in batches
            if unreachable in (await client.get_workflow_handle_for(ActiveCheckBatch.run, i).result()).errors
        ]
        peer_judged = [
            i
            for i in batches
            if "sweep-peer-stragglers" in patch_markers(await client.get_workflow_handle(i).fetch_history())
        ]

        # A burst from an agent, with its kernel lines' own times (ten minutes old: spooled
        # while Temporal was away): the critical event is recorded and acted on ahead of the
        # minor ones queued before it (patch health-events-critical-first), and the records'
        # times are kept (patch record-times-kept).
        burst = next(
            n
            for n in names
            if n not in (unreachable, bad_event)
            and queries.get_node(engine, n).state == "production"
            and not scheduler.jobs_on_node(n)
        )
        logged = time.time() - 600
        await send_health_events(
            client,
            burst,
            [
                *(
                    HealthEventInput(
                        burst, "agent", 13, f"minor {i}", "recorder", f"rv2-burst-{i}", logged + i, at_from_record=True
                    )
                    for i in range(5)
                ),
                HealthEventInput(
                    burst,
                    "agent",
                    79,
                    "fallen off the bus",
                    "recorder",
                    "rv2-burst-79",
                    logged + 5,
                    at_from_record=True,
                ),
            ],
        )
        await rec.wait(burst, lambda t: "drain" in t)

        # Search attributes with every transition (patch node-search-attributes), carried
        # across continue-as-new: the run recorded starts with them and moves the node on.
        listed = await search_attributes_scenario(rec)

        for n in names:
            await rec.idle(n)
        restarts = await rec.workflow_ids("JobRestart")
        wanted = {
            "node_lifecycle_firmware_phase": node_workflow_id(drifted),
            "node_lifecycle_bad_health_event": node_workflow_id(bad_event),
            "node_lifecycle_critical_first": node_workflow_id(burst),
            "node_lifecycle_drain_deadline": node_workflow_id(deadline_node),
            "node_lifecycle_critical_drain": node_workflow_id(critical_node),
            "remediation_restart_jobs": remediation_id(runbook_node),
            "remediation_set_state_draining": remediation_id(state_drained),
            "job_restart_by_runbook": next(i for i in restarts if runbook_node in i),
            "active_check_sweep_batches": sweep_id,
            "active_check_batch_with_an_error": errored[0],
            "active_check_batch_peer_judged": peer_judged[0],
            "capacity_guard": guard_id(settings.fleet),
            "node_lifecycle_search_attributes": node_workflow_id(listed),
            "production_stragglers_drain": straggler_id,
        }
        return await rec.write(directory, wanted)


async def straggler_scenario(rec: Recording) -> str:
    """A straggler found under a running job that has checkpointed since: the judge asks the
    guard, drains it and restarts the job off it."""
    scheduler = SimScheduler(rec.engine)
    job = scheduler.submit("rec-straggler-job", 1)
    (node,) = job.nodes
    found = datetime.now(UTC) - timedelta(minutes=5)
    with Session(rec.engine) as session:
        session.add(
            StragglerFinding(
                job_id=job.job_id,
                node_name=node,
                metric="sm_clock",
                found_at=found,
                evidence=f"sm_clock 1410 MHz (slowest GPU) vs job {job.job_id} median 1980",
            )
        )
        session.commit()
    record_checkpoint(rec.engine, job.job_id, found + timedelta(minutes=1))
    workflow_id = straggler_sweep_id(f"record-{rec.unique}")
    # The drains recorded before this one took this small fleet's budget and would make it a
    # storm; it must be granted to take the restart branch (the worker reads the guard's policy
    # from these settings before every decision).
    limits = ("guard_max_unavailable_fleet", "guard_max_unavailable_rack", "guard_storm_fraction")
    kept = {name: getattr(rec.settings, name) for name in limits}
    try:
        for name in limits:
            setattr(rec.settings, name, 1.0)
        result = await rec.client.execute_workflow(
            ProductionStragglers.run,
            StragglerSweepInput(fleet=rec.settings.fleet),
            id=workflow_id,
            task_queue=rec.settings.task_queue,
        )
    finally:
        for name, value in kept.items():
            setattr(rec.settings, name, value)
    if result.drained != [node]:
        from fleetctl.db.stragglers import open_findings

        raise RuntimeError(
            f"the straggler judge did not drain {node}: {result}; {[f.detail for f in open_findings(rec.engine)]}"
        )
    await rec.wait(node, lambda t: "drain_complete" in t)
    return workflow_id


async def search_attributes_scenario(rec: Recording) -> str:
    """A node started as `fleetctl node import` starts it (its state as a search attribute),
    admitted in a run short enough to continue-as-new, then drained to maintenance in the next
    run, which is the one recorded; Temporal's visibility must then list it by state."""
    node = rec.add_nodes(2, "rsa")[0]
    await rec.client.start_workflow(
        NodeLifecycle.run,
        NodeLifecycleState(node=node, transitions_per_run=3),
        id=node_workflow_id(node),
        task_queue=rec.settings.task_queue,
        search_attributes=start_attributes("new"),
    )
    await request_phase(rec.client, node, "admit", "recorder", "quick")
    await rec.wait(node, lambda t: "enter_production" in t)
    await rec.idle(node)
    await request_transition(rec.client, node, "drain", "recorder", "operator: recording")
    await rec.wait(node, lambda t: "drain_complete" in t)
    await rec.idle(node)
    query = (
        f'WorkflowId = "{node_workflow_id(node)}" AND ExecutionStatus = "Running" AND FleetctlNodeState = "maintenance" '
        f'AND FleetctlRack = "{queries.get_node(rec.engine, node).rack}"'
    )
    deadline = time.monotonic() + 30
    while [wf.id async for wf in rec.client.list_workflows(query)] != [node_workflow_id(node)]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node}: Temporal does not list it by {query}")
        await asyncio.sleep(0.5)
    history = await rec.client.get_workflow_handle(node_workflow_id(node)).fetch_history()
    if not history.events[0].workflow_execution_started_event_attributes.continued_execution_run_id:
        raise RuntimeError(f"{node}: the recorded run is its first: it did not continue as new")
    return node


# v3's long check: HPL alone, with commands taking 8 times the real tools' time (minutes).
LONG_SUITE, TINY_SUITE, IMEX_SUITE = "long-hpl", "tiny", "imex"
SUITES = {LONG_SUITE: ["hpl"], TINY_SUITE: ["nvidia-smi-query"], IMEX_SUITE: ["imex"]}
# v3's interrupted runbook: a drain, then an hour's wait an XID 79 cuts short; and the
# runbook the XID 79 then starts.
SLOW_RUNBOOK = """
name: slow-recovery
description: drains, then waits an hour
match: {xid: [13]}
steps:
  - action: drain
    with: {reason: recording}
  - action: wait
    name: settle
    with: {duration: 3600}
"""
XID79_RUNBOOK = """
name: gone
description: one notification
match: {xid: [79]}
steps:
  - action: notify
    with: {message: gone, severity: critical}
"""


def _critical_79(node: str, event_id: str) -> HealthEventInput:
    return HealthEventInput(
        node, "xid", 79, "fallen off the bus", "recorder", event_id, time.time(), severity="critical"
    )


async def _in_production(rec: Recording, node: str) -> None:
    """The node's workflow started and taken to production by automation, without a burn-in."""
    await rec.client.start_workflow(
        NodeLifecycle.run,
        NodeLifecycleState(node=node),
        id=node_workflow_id(node),
        task_queue=rec.settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
        await request_transition(rec.client, node, trigger, "recorder", actor_kind="automation")


async def _busy_with(rec: Recording, node: str, activity: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not (
        await rec.client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)
    ).activity.startswith(activity):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node}: never busy with {activity}")
        await asyncio.sleep(0.1)


async def record_v3(directory: Path = SETS["v3"]) -> list[Path]:
    suites = Path(tempfile.mkdtemp(prefix="fleetctl-suites-"))
    for name, checks in SUITES.items():
        (suites / f"{name}.yaml").write_text(
            yaml.safe_dump({"name": name, "description": "recording", "checks": checks})
        )
    runbooks = Path(tempfile.mkdtemp(prefix="fleetctl-runbooks-"))
    (runbooks / "slow-recovery.yaml").write_text(SLOW_RUNBOOK)
    (runbooks / "gone.yaml").write_text(XID79_RUNBOOK)
    # A firmware flash during admission, never cut short (at the simulator's instant speed).
    async with recording(suites_dir=str(suites), runbooks_dir=str(runbooks)) as rec:
        flashed, interrupted = rec.add_nodes(2, "rv3-fw")
        baseline = load_baseline(BASELINE)
        set_baseline(rec.engine, baseline.name, baseline.to_dict(), BASELINE.read_text(), "recorder")
        add_fault(rec.engine, flashed, "firmware-drift")
        await ensure_node_workflows(rec.client, rec.settings, [(flashed, "new", 0)])
        await request_phase(rec.client, flashed, "admit", "recorder", TINY_SUITE)
        await rec.wait(flashed, lambda t: "enter_production" in t)
        await rec.idle(flashed)
        # A runbook's wait cut short by an XID 79 (patch remediation-interrupt); the XID's
        # runbook starts after it.
        await _in_production(rec, interrupted)
        slow = await start_remediation(
            rec.client, rec.settings, interrupted, parse_runbook(SLOW_RUNBOOK), Event("xid", code=13), "recorder"
        )
        await rec.wait(interrupted, lambda t: "drain_complete" in t)
        await send_health_events(rec.client, interrupted, [_critical_79(interrupted, "rv3-interrupt-79")])
        cut = await slow.result()
        if cut.status != "interrupted":
            raise RuntimeError(f"{interrupted}: the runbook was not interrupted: {cut}")
        old_run = (await slow.describe()).run_id
        deadline = time.monotonic() + 60
        while (await rec.client.get_workflow_handle(remediation_id(interrupted)).describe()).run_id == old_run:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{interrupted}: the XID 79's runbook did not start")
            await asyncio.sleep(0.2)
        await rec.client.get_workflow_handle(remediation_id(interrupted)).result()
        await rec.idle(interrupted)
        kept = {
            "node_lifecycle_firmware_flash": node_workflow_id(flashed),
            "node_lifecycle_remediation_interrupted": node_workflow_id(interrupted),
        }
        await rec.write(directory, kept)
        history = await rec.client.get_workflow_handle(remediation_id(interrupted), run_id=old_run).fetch_history()
        (directory / "remediation_interrupted.json").write_text(history.to_json())
        kept["remediation_interrupted"] = remediation_id(interrupted)
    kept.update(await rma_burst_scenario(directory))
    kept.update(await nvlink_domain_scenario(directory, suites))
    kept.update(await rollout_and_job_sync_scenario(directory))
    async with recording(suites_dir=str(suites), sim_time_scale=8.0) as rec:
        client, settings, engine = rec.client, rec.settings, rec.engine
        scheduler = SimScheduler(engine)
        drained, rechecked, burnt = rec.add_nodes(3, "rv3")
        for n in (drained, rechecked):
            await _in_production(rec, n)

        # A recheck's HPL cut short: a minor event, then an XID 79, both queued while it runs;
        # the XID is taken first.
        await request_phase(client, rechecked, "recheck", "recorder", LONG_SUITE)
        await _busy_with(rec, rechecked, "recheck: hpl")
        await send_health_events(
            client,
            rechecked,
            [
                HealthEventInput(
                    rechecked, "xid", 13, "minor", "recorder", "rv3-recheck-13", time.time(), severity="warning"
                ),
                _critical_79(rechecked, "rv3-recheck-79"),
            ],
        )
        await rec.wait(rechecked, lambda t: "drain_complete" in t)

        # A burn-in's HPL cut short: the phase fails on the event, not on the check.
        await ensure_node_workflows(client, settings, [(burnt, "new", 0)])
        await request_phase(client, burnt, "admit", "recorder", LONG_SUITE)
        await _busy_with(rec, burnt, "burn_in: hpl")
        await send_health_events(client, burnt, [_critical_79(burnt, "rv3-burn-in-79")])
        await rec.wait(burnt, lambda t: "phase_failed" in t)

        # An operator's drain waits for the node's job; an XID 79 turns it critical and the
        # job is restarted at once. Last: the job lands on the first node the scheduler has not
        # drained, and its restart on the next, which would skip a recheck held after it.
        scheduler.submit("recorded-drain-train", 1)
        if not scheduler.jobs_on_node(drained):
            raise RuntimeError(f"{drained}: no job landed on it")
        await request_transition(client, drained, "drain", "recorder", "operator: PDU maintenance")
        await _busy_with(rec, drained, "draining: jobs")
        await send_health_events(client, drained, [_critical_79(drained, "rv3-drain-79")])
        await rec.wait(drained, lambda t: "drain_complete" in t)

        for n in (drained, rechecked, burnt):
            await rec.idle(n, timeout_s=120)
        interrupted_ids = {
            "node_lifecycle_drain_turns_critical": node_workflow_id(drained),
            "node_lifecycle_recheck_interrupted": node_workflow_id(rechecked),
            "node_lifecycle_burn_in_interrupted": node_workflow_id(burnt),
        }
        written = await rec.write(directory, interrupted_ids, kept)
        kept.update(interrupted_ids)
    # The node's hold (fence-checks): a recheck of a production node that runs a job is
    # skipped (held, the job found, released); a sweep check holds the idle node, then
    # releases it. (fence-burn-in: every admission above takes the hold.)
    async with recording(suites_dir=str(suites)) as rec:
        busy, swept = rec.add_nodes(2, "rv3-hold")
        for n in (busy, swept):
            await _in_production(rec, n)
        job = SimScheduler(rec.engine).submit("recorded-held-train", 1)
        if job.nodes != (busy,):
            raise RuntimeError(f"{busy}: the job did not land on it: {job}")
        await request_phase(rec.client, busy, "recheck", "recorder", TINY_SUITE)
        await rec.idle(busy)
        outcome = (
            await rec.client.get_workflow_handle(node_workflow_id(busy)).query(NodeLifecycle.current)
        ).last_outcome
        if "skipped" not in outcome:
            raise RuntimeError(f"{busy}: the recheck was not skipped: {outcome}")
        sweep_id = f"sweep/record-held-{rec.unique}"
        swept_result = await rec.client.execute_workflow(
            ActiveCheckSweep.run,
            SweepInput(suite=TINY_SUITE, max_concurrent=2, fleet=rec.settings.fleet),
            id=sweep_id,
            task_queue=rec.settings.task_queue,
        )
        if swept_result.passed != 1:
            raise RuntimeError(f"the fenced sweep did not pass {swept}: {swept_result}")
        (batch,) = [i for i in await rec.workflow_ids("ActiveCheckBatch") if i.startswith(sweep_id)]
        return written + await rec.write(
            directory,
            {
                "node_lifecycle_recheck_skipped": node_workflow_id(busy),
                "active_check_batch_fenced": batch,
            },
            kept,
        )


async def rma_burst_scenario(directory: Path) -> dict[str, str]:
    """XID 64 on three nodes of three at once: a correlated burst (the storm limit of a
    small fleet is 3), every RMA held for an operator (patch rma-burst-confirmation); one
    confirmed (the node to rma, the RMA sent), one rejected (back through burn-in). Then XID
    64 on two nodes of three: under the limit, each RMA waits for the storm window (a few
    seconds here) after its event to pass, then opens."""
    async with recording(guard_storm_window_s=5.0) as rec:
        nodes = rec.add_nodes(3, "rv3-burst")
        for n in nodes:
            await _in_production(rec, n)
        await asyncio.gather(
            *(
                send_health_events(
                    rec.client,
                    n,
                    [
                        HealthEventInput(
                            n,
                            "xid",
                            64,
                            "Row remapping failure",
                            "recorder",
                            f"rv3-burst-{n}",
                            time.time(),
                            severity="critical",
                        )
                    ],
                )
                for n in nodes
            )
        )
        deadline = time.monotonic() + 120
        while len(held := rma_db.rma_records(rec.engine, status="awaiting_confirmation")) < len(nodes):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the burst's RMAs were not held: {[(r.node_name, r.status) for r in held]}")
            await asyncio.sleep(0.2)
        by_node = {r.node_name: r for r in held}
        written = {}
        for name, node, confirm in (
            ("remediation_rma_held_confirmed", nodes[0], True),
            ("remediation_rma_held_rejected", nodes[1], False),
        ):
            record = by_node[node]
            workflow_id, _, run_id = record.remediation_run.rpartition("@")
            handle = rec.client.get_workflow_handle(workflow_id, run_id=run_id)
            await handle.execute_update(
                RMA_DECISION_UPDATE, RmaDecision(record.id, confirm, "recorder"), result_type=RmaDecided
            )
            await handle.result()
            (directory / f"{name}.json").write_text((await handle.fetch_history()).to_json())
            written[name] = workflow_id
    # Two nodes of three: under the limit, but each RMA waits out the window (a timer) first.
    async with recording(guard_storm_window_s=5.0) as rec:
        nodes = rec.add_nodes(3, "rv3-pair")
        for n in nodes:
            await _in_production(rec, n)
        await asyncio.gather(
            *(
                send_health_events(
                    rec.client,
                    n,
                    [
                        HealthEventInput(
                            n,
                            "xid",
                            64,
                            "Row remapping failure",
                            "recorder",
                            f"rv3-pair-{n}",
                            time.time(),
                            severity="critical",
                        )
                    ],
                )
                for n in nodes[:2]
            )
        )
        deadline = time.monotonic() + 120
        while not (opened := rma_db.rma_records(rec.engine, status="open", node_name=nodes[0])):
            if time.monotonic() > deadline:
                raise RuntimeError(f"{nodes[0]}: its RMA did not open after the window")
            await asyncio.sleep(0.2)
        workflow_id, _, run_id = opened[0].remediation_run.rpartition("@")
        handle = rec.client.get_workflow_handle(workflow_id, run_id=run_id)
        await handle.result()
        history = await handle.fetch_history()
        if not any(e.HasField("timer_started_event_attributes") for e in history.events):
            raise RuntimeError(f"{nodes[0]}: its RMA did not wait for the window")
        (directory / "remediation_rma_waits_for_the_burst.json").write_text(history.to_json())
        written["remediation_rma_waits_for_the_burst"] = workflow_id
    return written


async def nvlink_domain_scenario(directory: Path, suites: Path) -> dict[str, str]:
    """A fault of a GB200 NVL72 domain's fabric holds the domain (patch nvlink-domain-hold),
    each in a fleet of three trays of one domain beside three HGX nodes (its limit: 3 out):
    a sweep's imex check fails on the trays that see a tray's IMEX daemon down, and the
    guard grants the domain whole, a grant per tray; a fatal NVSwitch SXid, read by its
    signature, drains its tray at once and then the rest of the domain within the limit."""
    async with recording(suites_dir=str(suites)) as rec:
        trays, hgx = rec.add_nodes(3, "rv3-nvl", "gb200", racks=1), rec.add_nodes(3, "rv3-hgx")
        for n in trays + hgx:
            await _in_production(rec, n)
        add_fault(rec.engine, trays[0], "imex-down")
        sweep_id = f"sweep/record-nvl-{rec.unique}"
        swept = await rec.client.execute_workflow(
            ActiveCheckSweep.run,
            SweepInput(suite=IMEX_SUITE, max_concurrent=6, fleet=rec.settings.fleet),
            id=sweep_id,
            task_queue=rec.settings.task_queue,
        )
        if sorted(swept.drained) != sorted(trays) or swept.failed == []:
            raise RuntimeError(f"the sweep did not hold the domain {trays}: {swept}")
        for n in trays:
            await rec.wait(n, lambda t: "drain_complete" in t)
        (batch,) = [i for i in await rec.workflow_ids("ActiveCheckBatch") if i.startswith(sweep_id)]
        written = {
            "active_check_batch_nvlink_domain": batch,
            "capacity_guard_nvlink_domain": guard_id(rec.settings.fleet),
        }
        await rec.save(directory, written)
    async with recording(suites_dir=str(suites)) as rec:
        trays, hgx = rec.add_nodes(3, "rv3-sxid", "gb200", racks=1), rec.add_nodes(3, "rv3-sxh")
        for n in trays + hgx:
            await _in_production(rec, n)
        await send_health_events(
            rec.client,
            trays[0],
            [
                HealthEventInput(
                    trays[0],
                    "agent",
                    None,
                    "NVSwitch fatal SXid on the node: nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 20034, "
                    "Fatal, Link 30 LTSSM Fault Up",
                    "recorder",
                    "rv3-sxid-fatal",
                    time.time(),
                    severity="critical",
                    signature="nvswitch_sxid_fatal",
                )
            ],
        )
        for n in trays:
            await rec.wait(n, lambda t: "drain_complete" in t)
        await rec.idle(trays[0], timeout_s=120)
        sxid = {"node_lifecycle_nvswitch_fatal_holds_the_domain": node_workflow_id(trays[0])}
        await rec.save(directory, sxid)
        written.update(sxid)
    return written


async def rollout_and_job_sync_scenario(directory: Path) -> dict[str, str]:
    """The two workflow types no earlier set recorded: a firmware roll-out over three drifting
    nodes in maintenance (a canary of one, then batches of one, each updated and re-read), and
    one run of the job history sync a `fleetctl schedule create job-sync` schedule starts."""
    async with recording() as rec:
        nodes = rec.add_nodes(3, "rv3-roll")
        for n in nodes:
            await rec.client.start_workflow(
                NodeLifecycle.run,
                NodeLifecycleState(node=n),
                id=node_workflow_id(n),
                task_queue=rec.settings.task_queue,
            )
            for trigger in ("begin_burn_in", "phase_failed"):
                await request_transition(rec.client, n, trigger, "recorder", actor_kind="automation")
            add_fault(rec.engine, n, "firmware-drift")
            for check in ("firmware-inventory", "nic-firmware"):
                record_check(rec.settings, n, check)
        baseline = load_baseline(BASELINE)
        recorded = record_rollout(rec.engine, baseline, BASELINE.read_text(), 1, "1", 1, False, "recorder")
        rollout_id = recorded.rollout_id
        await start_rollout(
            rec.client,
            rec.settings,
            RolloutInput(rollout_id, recorded.baseline_id, recorded.batches, max_failures=1, actor="recorder"),
        )
        done = await rec.client.get_workflow_handle_for(FirmwareRollout.run, rollout_workflow_id(rollout_id)).result()
        if (done.status, done.done) != ("completed", len(nodes)):
            raise RuntimeError(f"the roll-out did not update every node: {done}")
        SimScheduler(rec.engine).submit("recorded-synced-train", 1)
        synced = await rec.client.execute_workflow(
            JobHistorySync.run,
            JobSyncInput(actor="recorder"),
            id=job_sync_id(f"record-{rec.unique}"),
            task_queue=rec.settings.task_queue,
        )
        if synced.jobs.get("sim") != 1:
            raise RuntimeError(f"the job history sync did not list the simulated scheduler's job: {synced}")
        written = {
            "firmware_rollout": rollout_workflow_id(rollout_id),
            "job_history_sync": job_sync_id(f"record-{rec.unique}"),
        }
        await rec.save(directory, written)
    return written


# v4's node continues as new after this many signals (a fleet's: SIGNALS_PER_RUN), and its
# storm is a few more than that.
V4_SIGNALS_PER_RUN = 20


async def record_v4(directory: Path = SETS["v4"]) -> list[Path]:
    async with recording() as rec:
        client = rec.client
        (drained,) = rec.add_nodes(1, "rv4", racks=1)
        await client.start_workflow(
            NodeLifecycle.run,
            NodeLifecycleState(node=drained, signals_per_run=V4_SIGNALS_PER_RUN, drain_job_poll_s=DRAIN_JOB_POLL_S),
            id=node_workflow_id(drained),
            task_queue=rec.settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(client, drained, trigger, "recorder", actor_kind="automation")
        await rec.idle(drained)
        SimScheduler(rec.engine).submit("recorded-storm-train", 1)
        await request_transition(client, drained, "drain", "recorder", "operator: PDU maintenance")
        await _busy_with(rec, drained, "draining: jobs")
        handle = client.get_workflow_handle(node_workflow_id(drained))
        first_run = (await handle.describe()).run_id
        storm = [
            HealthEventInput(drained, "xid", 13, "storm", "recorder", f"rv4-13-{i}", time.time(), severity="info")
            for i in range(V4_SIGNALS_PER_RUN + 5)
        ]
        await send_health_events(client, drained, storm)
        deadline = time.monotonic() + 60
        while (await handle.describe()).run_id == first_run:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{drained}: the run did not continue as new")
            await asyncio.sleep(0.2)
        await _busy_with(rec, drained, "draining: jobs")
        await send_health_events(client, drained, [_critical_79(drained, "rv4-drain-79")])
        await rec.wait(drained, lambda t: "drain_complete" in t)
        await rec.idle(drained)
        history = await client.get_workflow_handle(node_workflow_id(drained), run_id=first_run).fetch_history()
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "node_lifecycle_drain_carried.json").write_text(history.to_json())
        return await rec.write(
            directory,
            {"node_lifecycle_carried_drain_turns_critical": node_workflow_id(drained)},
            {"node_lifecycle_drain_carried": node_workflow_id(drained)},
        )


async def record_v5(directory: Path = SETS["v5"]) -> list[Path]:
    """Job restarts keyed by the fault (restart-keyed-by-fault): an XID 79 under a job, whose
    node's workflow restarts the job; and a runbook that drains its node and moves the node's
    job under the drain's key."""
    async with recording() as rec:
        client, settings = rec.client, rec.settings
        names = rec.add_nodes(6, "rv5", racks=1)
        for name in names:
            await _in_production(rec, name)
        scheduler = SimScheduler(rec.engine)
        (critical,) = scheduler.submit("recorded-xid79-train", 1).nodes
        await send_health_events(client, critical, [_critical_79(critical, "rv5-79")])
        await rec.wait(critical, lambda t: "drain_complete" in t)
        await rec.idle(critical)

        (runbook_node,) = scheduler.submit("recorded-runbook-train", 1).nodes
        book = load_runbooks()["thermal-throttling"]
        book = dataclasses.replace(book, steps=tuple(s for s in book.steps if s.action in ("drain", "restart_jobs")))
        result = await run_remediation(
            client,
            settings,
            runbook_node,
            book,
            Event("check", check="nvidia-smi-query", status="warn", message="thermal"),
            "recorder",
        )
        if result.status != "succeeded" or "restarting 1 job" not in result.steps[-1].detail:
            raise RuntimeError(f"{runbook_node}: the runbook did not restart the job: {result}")
        await rec.wait(runbook_node, lambda t: "drain_complete" in t)
        await rec.idle(runbook_node)
        return await rec.write(
            directory,
            {
                "node_lifecycle_xid79_restart_keyed": node_workflow_id(critical),
                "remediation_restart_keyed": remediation_id(runbook_node),
            },
        )


async def record_v7(directory: Path = SETS["v7"]) -> list[Path]:
    """ClusterValidation: eight production nodes held, one with a slow fabric, bisected to it."""
    async with recording() as rec:
        names = rec.add_nodes(8, "rv7", racks=2)
        for name in names:
            await _in_production(rec, name)
        add_fault(rec.engine, names[5], "fabric-slow", not_before=0.0)
        result = await run_validation(rec.client, rec.settings, ValidationInput(fleet=rec.settings.fleet), "recorded")
        if result.bad_nodes != [names[5]]:
            raise RuntimeError(f"the validation did not name {names[5]}: {result}")
        return await rec.write(directory, {"cluster_validation_bisected": validation_id("recorded")})


async def record_v8(directory: Path = SETS["v8"]) -> list[Path]:
    """A job late by three cadences on its checkpoints, three of its four nodes reporting
    PyTorch's NCCL watchdog timeout: the HungJobs judge drains the fourth and restarts the job
    off it."""
    async with recording(hang_policy="restart-off-node") as rec:
        names = rec.add_nodes(5, "rv8", racks=1)
        for name in names:
            await _in_production(rec, name)
        job = SimScheduler(rec.engine).submit("recorded-hung-train", 4)
        last = datetime.now(UTC) - timedelta(minutes=30)
        for back in (20, 10, 0):
            record_checkpoint(rec.engine, job.job_id, last - timedelta(minutes=back))
        with Session(rec.engine) as session:
            session.exec(update(Job).where(Job.job_id == job.job_id).values(started_at=last - timedelta(hours=1)))
            session.commit()
        watchdog = (
            "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1580, OpType=ALLREDUCE, "
            "NumelIn=466119168, NumelOut=466119168, Timeout(ms)=600000) ran for 600060 milliseconds before timing out."
        )
        for node in job.nodes[:3]:
            event = HealthEventInput(
                node, "log", None, watchdog, "recorder", f"rv8-wd-{node}", time.time(), severity="warning"
            )
            await send_health_events(rec.client, node, [event])
        deadline = time.monotonic() + 60
        while len(queries.health_events_since(rec.engine, job.nodes, last)) < 3:
            if time.monotonic() > deadline:
                raise RuntimeError("the watchdog events were not recorded")
            await asyncio.sleep(0.2)
        judged = await rec.client.execute_workflow(
            HungJobs.run,
            HungJobsInput(fleet=rec.settings.fleet, actor="recorder"),
            id=hung_jobs_id(f"record-{rec.unique}"),
            task_queue=rec.settings.task_queue,
        )
        if judged.restarted != [f"{job.job_id} off {job.nodes[3]}"]:
            raise RuntimeError(f"the judge did not restart the hung job: {judged}")
        return await rec.write(directory, {"hung_jobs_restart": hung_jobs_id(f"record-{rec.unique}")})


async def record_v9(directory: Path = SETS["v9"]) -> list[Path]:
    """An XID 48 and its XID 64 on one GPU, scoped to it by the site's policy (gpu-quarantine)."""
    policy = Path(tempfile.mkdtemp(prefix="fleetctl-xid-policy-")) / "xid-policy.yaml"
    policy.write_text("xid:\n  48: {scope: gpu}\n  64: {scope: gpu}\n")
    async with recording(xid_policy=str(policy)) as rec:
        (node,) = rec.add_nodes(1, "rv9", racks=1)
        await _in_production(rec, node)
        await rec.idle(node)
        gpu = "0000:2b:00"
        events = [
            HealthEventInput(
                node, "agent", code, f"Xid {code} on {gpu}", "recorder", f"rv9-{code}", time.time(), gpu=gpu
            )
            for code in (48, 64)
        ]
        await send_health_events(rec.client, node, events)
        deadline = time.monotonic() + 60
        while gpu_quarantines.gpus_out(rec.engine, node) != [gpu]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{node}: GPU {gpu} was not taken out")
            await asyncio.sleep(0.2)
        await rec.idle(node)
        if rec.triggers(node)[-1] != "enter_production":
            raise RuntimeError(f"{node}: the node moved: {rec.triggers(node)}")
        await release_gpu(rec.client, node, gpu, "recorder", "reset and recheck passed")
        await rec.idle(node)
        return await rec.write(directory, {"node_lifecycle_gpu_quarantine": node_workflow_id(node)})


async def record_v10(directory: Path = SETS["v10"]) -> list[Path]:
    """GpuReturns: a transient XID 48 GPU returned, a persistent one kept out and its node drained."""
    policy = Path(tempfile.mkdtemp(prefix="fleetctl-xid-policy-")) / "xid-policy.yaml"
    policy.write_text("xid:\n  48: {scope: gpu}\n  64: {scope: gpu}\n")
    async with recording(xid_policy=str(policy)) as rec:
        names = rec.add_nodes(4, "rv10", racks=1)
        transient, persistent = names[:2]
        for node in names:
            await _in_production(rec, node)
        for node, kind in ((transient, "xid48-remapped"), (persistent, "xid48")):
            await rec.idle(node)
            add_fault(rec.engine, node, kind, gpu=2)
            profile = sim_profile(queries.get_node(rec.engine, node).profile)
            gpu = gpu_key(build_node_state(node, profile, 0, [], time.time()).gpus[2].pci_bus_id)
            event = HealthEventInput(
                node, "agent", 48, f"Xid 48 on {gpu}", "recorder", f"rv10-{node}", time.time(), gpu=gpu
            )
            await send_health_events(rec.client, node, [event])
            deadline = time.monotonic() + 60
            while gpu_quarantines.gpus_out(rec.engine, node) != [gpu]:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{node}: GPU {gpu} was not taken out")
                await asyncio.sleep(0.2)
            await rec.idle(node)
        run_id = gpu_returns_id(f"record-{rec.unique}")
        result = await rec.client.execute_workflow(
            GpuReturns.run,
            GpuReturnsInput(fleet=rec.settings.fleet, actor="recorder", settle_s=0, max_failed=1),
            id=run_id,
            task_queue=rec.settings.task_queue,
        )
        if len(result.returned) != 1 or result.drained != [persistent]:
            raise RuntimeError(f"the GPUs were not returned and drained as recorded: {result}")
        return await rec.write(directory, {"gpu_returns": run_id})


async def record_v11(directory: Path = SETS["v11"]) -> list[Path]:
    """The guard's question with its facts read in one activity (request_removal_at_once): an
    XID 79 drain, critical on its recorded event, and a runbook's drain judged on the fleet's
    counts, then the XID 79's job restart and the drained node's state."""
    async with recording() as rec:
        names = rec.add_nodes(4, "rv11", racks=1)
        for node in names:
            await _in_production(rec, node)
        critical, counted = names[:2]
        await send_health_events(
            rec.client,
            critical,
            [HealthEventInput(critical, "xid", 79, "GPU has fallen off the bus", "recorder", "rv11-79", time.time())],
        )
        await rec.wait(critical, lambda t: "drain_complete" in t)
        by_state = parse_runbook(SET_STATE_DRAINING)
        result = await run_remediation(rec.client, rec.settings, counted, by_state, Event("xid", code=13), "recorder")
        if result.status != "succeeded":
            raise RuntimeError(f"{counted}: the runbook's drain was not granted: {result}")
        await rec.wait(counted, lambda t: "drain_complete" in t)
        return await rec.write(directory, {"capacity_guard_facts_at_once": guard_id(rec.settings.fleet)})


async def record_v12(directory: Path = SETS["v12"]) -> list[Path]:
    """The short steps of the critical path as local activities (quick-steps-local): a minor
    event then an XID 79 on a node running a job (its events recorded, its facts read, the
    guard's facts and decision, each transition), the job restarted off the node and the node
    drained, as the node's and the guard's histories."""
    async with recording() as rec:
        names = rec.add_nodes(4, "rv12", racks=1)
        for node in names:
            await _in_production(rec, node)
        job = SimScheduler(rec.engine).submit("rv12-train", 1)
        (node,) = job.nodes
        now = time.time()
        await send_health_events(
            rec.client,
            node,
            [
                HealthEventInput(node, "xid", 13, "Graphics SM exception", "recorder", "rv12-13", now),
                HealthEventInput(node, "xid", 79, "GPU has fallen off the bus", "recorder", "rv12-79", now),
            ],
        )
        await rec.wait(node, lambda t: "drain_complete" in t)
        return await rec.write(
            directory,
            {
                "node_lifecycle_local_steps": node_workflow_id(node),
                "capacity_guard_local_steps": guard_id(rec.settings.fleet),
            },
        )


RECORDERS = {
    "v2": record_v2,
    "v3": record_v3,
    "v4": record_v4,
    "v5": record_v5,
    "v6": record_v6,
    "v7": record_v7,
    "v8": record_v8,
    "v9": record_v9,
    "v10": record_v10,
    "v11": record_v11,
    "v12": record_v12,
}


async def record(sets: list[str]) -> list[Path]:
    written: list[Path] = []
    for name in sets:
        written += await RECORDERS[name]()
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.replay.record", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--set",
        choices=[*RECORDERS, "all"],
        default="v12",
        help="which set to (re)record; an older one is rewritten only when its runs are gone",
    )
    args = parser.parse_args(argv)
    for path in asyncio.run(record(list(RECORDERS) if args.set == "all" else [args.set])):
        print(path)


if __name__ == "__main__":
    main()
