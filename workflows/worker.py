"""The worker: hosts every fleetctl workflow and activity, in two lanes.

The task queue (settings.task_queue) carries the workflows and the critical work: an XID 79's
node workflow tasks, its drain, the job restart, the capacity guard's grant. Its bulk lane
(`<task_queue>-bulk`, workflows.api.bulk_queue) carries what may wait: checks (a sweep's,
burn-in's, a recheck's, a runbook's), sweep batches, scans (job history, stragglers, the
sweep's idle-node read), firmware flashes and hardware steps. Each lane is a Temporal Worker
of its own in this process, with activity slots of its own out of one thread pool: bulk work
takes at most settings.bulk_slot_share of them and never one of the critical lane's, so a
sweep's checks cannot hold the slot an XID 79's drain needs, and its batches' workflow tasks
queue apart from the node workflows'. Which lane an activity runs in is said where the
workflow calls it (workflows.definitions.shared.bulk)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import math
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, NamedTuple

from temporalio.client import Client
from temporalio.worker import Worker

from fleetctl.config import ConfigError, Settings, WorkerLanes
from fleetctl.text import one_line
from fleetctl.workflows.activities.checks import CheckActivities
from fleetctl.workflows.activities.executors import ExecutorRegistry
from fleetctl.workflows.activities.firmware import FirmwareActivities
from fleetctl.workflows.activities.gpu_quarantine import GpuQuarantineActivities
from fleetctl.workflows.activities.gpu_returns import GpuReturnActivities
from fleetctl.workflows.activities.guard import GuardActivities
from fleetctl.workflows.activities.hang import HangActivities
from fleetctl.workflows.activities.job_history import JobHistoryActivities
from fleetctl.workflows.activities.jobs import JobRestartActivities
from fleetctl.workflows.activities.node import NodeActivities, NodeCommandActivities
from fleetctl.workflows.activities.remediation import RemediationActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.activities.stragglers import StragglerActivities
from fleetctl.workflows.activities.validation import ValidationActivities
from fleetctl.workflows.api import bulk_queue

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from fleetctl.nodes.scheduler_sync import ExternalDrain
from fleetctl.workflows.client import ask_capacity_guard, connect, require_search_attributes, stalled_nodes
from fleetctl.workflows.definitions.active_checks import ActiveCheckBatch, ActiveCheckSweep
from fleetctl.workflows.definitions.capacity_guard import CapacityGuard
from fleetctl.workflows.definitions.firmware_rollout import FirmwareRollout
from fleetctl.workflows.definitions.gpu_returns import GpuReturns
from fleetctl.workflows.definitions.hung_jobs import HungJobs
from fleetctl.workflows.definitions.job_history import JobHistorySync
from fleetctl.workflows.definitions.job_restart import JobRestart
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.remediation import Remediation
from fleetctl.workflows.definitions.stragglers import ProductionStragglers
from fleetctl.workflows.definitions.validation import ClusterValidation

# One worker process's activity threads: its two lanes' slots and the critical lane's local
# activities together (lane_slots), one thread in LOCAL_SHARE for the local ones.
ACTIVITY_THREADS = 64
LOCAL_SHARE = 8
# How many external drains' event ids a worker remembers having signalled (watch_external_drains).
SENT_EXTERNAL_DRAINS = 10_000

WORKFLOWS: list[type] = [
    NodeLifecycle,
    CapacityGuard,
    ActiveCheckSweep,
    ActiveCheckBatch,
    JobRestart,
    Remediation,
    FirmwareRollout,
    ProductionStragglers,
    JobHistorySync,
    ClusterValidation,
    HungJobs,
    GpuReturns,
]
# Also on the bulk lane: a sweep starts its batches there (one started on the task queue before
# the lanes finishes there: WORKFLOWS hosts it too).
BULK_WORKFLOWS: list[type] = [ActiveCheckBatch]


def activities_for(settings: Settings, client: Client) -> list[Callable[..., Any]]:
    """Every activity the worker hosts, bound to this process's settings and client. One
    executor registry and one scheduler registry serve them all, so the SSH pool and its
    concurrency limit cover every command this worker runs."""
    executors = ExecutorRegistry(settings)
    schedulers = SchedulerRegistry(settings, executors)
    node = NodeActivities(settings, schedulers)
    commands = NodeCommandActivities(client)
    checks = CheckActivities(settings, executors)
    guard = GuardActivities(settings, functools.partial(ask_capacity_guard, client, settings))
    remediation = RemediationActivities(settings, executors, client)
    fw = FirmwareActivities(settings, executors)
    restarts = JobRestartActivities(settings, schedulers)
    stragglers = StragglerActivities(settings)
    hangs = HangActivities(settings)
    job_history = JobHistoryActivities(settings, schedulers)
    validation = ValidationActivities(settings, executors)
    gpu_quarantine = GpuQuarantineActivities(settings, schedulers)
    gpu_returns = GpuReturnActivities(settings, executors, client)
    return [
        node.record_transition,
        node.record_transition_with_facts,
        node.node_facts,
        node.record_health_event,
        node.record_health_events,
        node.record_automation_event,
        node.judge_reachability,
        node.judge_agent_silence,
        node.idle_production_nodes,
        node.running_jobs_on,
        node.cordon_in_scheduler,
        node.resume_in_scheduler,
        node.hold_in_scheduler,
        node.release_hold,
        node.drain_pods_on,
        node.report_state,
        node.choose_remediation,
        commands.command_node,
        checks.suite_checks,
        checks.run_check,
        checks.judge_admission,
        checks.judge_against_peers,
        guard.removal_facts,
        guard.fleet_snapshot,
        guard.fleet_policy,
        guard.critical_evidence,
        guard.state_versions,
        guard.removals_for_fault,
        guard.in_service_nodes,
        guard.ask_capacity_guard,
        guard.report_check_errors,
        remediation.begin_run,
        remediation.node_state,
        remediation.prepare_step,
        remediation.record_step,
        remediation.finish_run,
        remediation.gpu_reset,
        remediation.reboot,
        remediation.admit_node,
        remediation.notify,
        remediation.open_rma,
        remediation.rma_burst,
        remediation.decide_rma,
        fw.current_baseline_id,
        fw.node_drift,
        fw.apply_updates,
        fw.record_node,
        fw.record_progress,
        restarts.restart_id_of_fault,
        restarts.record_restart_started,
        restarts.drain_nodes,
        restarts.restart_job,
        restarts.wait_until_running,
        restarts.record_restart_step,
        restarts.record_restart_outcome,
        stragglers.judge_running_jobs,
        stragglers.record_straggler_drain,
        job_history.sync_job_history,
        validation.validation_nodes,
        validation.run_allreduce,
        hangs.judge_hung_jobs,
        gpu_quarantine.plan_gpu_quarantine,
        gpu_quarantine.quarantine_gpu,
        gpu_quarantine.release_gpu,
        gpu_returns.gpus_due_for_return,
        gpu_returns.reset_and_recheck,
        gpu_returns.record_failed_return,
        gpu_returns.return_gpu,
    ]


def slots_of(threads: int, bulk_share: float) -> tuple[int, int]:
    """(critical, bulk): the activity slots of each lane out of `threads`. Bulk takes at most
    its share (rounded down), at least one; the critical lane keeps the rest, at least one.
    Together they are the threads, so neither lane's tasks ever queue for a thread."""
    bulk = min(threads - 1, max(1, math.floor(threads * bulk_share)))
    return threads - bulk, bulk


class Lanes:
    """A worker's lanes (the critical task queue, its bulk lane, or one of them), each a
    Temporal Worker: started and stopped together (`async with`)."""

    def __init__(self, critical: Worker | None, bulk: Worker | None):
        self.critical, self.bulk = critical, bulk
        self._stack = contextlib.AsyncExitStack()

    async def __aenter__(self) -> Lanes:
        for lane in (self.critical, self.bulk):
            if lane is not None:
                await self._stack.enter_async_context(lane)
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self._stack.aclose()


class LaneSlots(NamedTuple):
    critical: int  # the critical lane's activity slots
    bulk: int  # the bulk lane's
    local: int  # the critical lane's local activities (quick_local: its short database steps)


def lane_slots(threads: int, settings: Settings) -> LaneSlots:
    """The slots of this process's `threads`: where it serves the critical lane, one thread in
    LOCAL_SHARE (at least one) for that lane's local activities, so a step of an XID 79's drain
    never waits for a thread the lanes' activities hold; the rest split by
    settings.bulk_slot_share when it serves both lanes, or all to the one lane it serves
    (settings.worker_lanes). Together they are the threads."""
    if settings.worker_lanes == WorkerLanes.BULK:
        return LaneSlots(0, threads, 0)
    local = max(1, threads // LOCAL_SHARE)
    lanes = 1 if settings.worker_lanes == WorkerLanes.CRITICAL else 2
    if threads - local < lanes:
        raise ValueError(f"{threads} activity threads: the lanes need {lanes + local} at least")
    if lanes == 1:
        return LaneSlots(threads - local, 0, local)
    return LaneSlots(*slots_of(threads - local, settings.bulk_slot_share), local)


def build_worker(
    client: Client,
    settings: Settings,
    executor: ThreadPoolExecutor,
    activities: list[Callable[..., Any]] | None = None,
) -> Lanes:
    """The lanes this process serves (settings.worker_lanes) on `executor`'s threads
    (`lane_slots`). Every activity is hosted in both (`activities`: a test's own, else
    activities_for): where one runs is the workflow's word, and an activity scheduled before
    the lanes is still served."""
    hosted = activities_for(settings, client) if activities is None else activities
    critical, bulk, local = lane_slots(executor._max_workers, settings)
    return Lanes(
        Worker(
            client,
            task_queue=settings.task_queue,
            workflows=WORKFLOWS,
            activities=hosted,
            activity_executor=executor,
            max_concurrent_activities=critical,
            max_concurrent_local_activities=local,
        )
        if critical
        else None,
        Worker(
            client,
            task_queue=bulk_queue(settings.task_queue),
            workflows=BULK_WORKFLOWS,
            activities=hosted,
            activity_executor=executor,
            max_concurrent_activities=bulk,
            # Its workflows run no local activity (quick_local is the node's and the guard's);
            # unset, Temporal would allow 100 on these threads. One, never used, takes none.
            max_concurrent_local_activities=1,
            # Held by the server across every worker of the lane (settings.bulk_activities_per_s).
            max_task_queue_activities_per_second=settings.bulk_activities_per_s or None,
        )
        if bulk
        else None,
    )


async def watch_stalls(client: Client, settings: Settings) -> None:
    """Every settings.stall_watch_s: which of this task queue's node workflows are stalled
    (failing workflow tasks, queued work past settings.stall_after_s), recorded where `node
    list`, `fleet status` and the exporter read it. Outside every workflow, so a stalled one
    cannot hide itself; any worker of the queue may do it (the records are idempotent)."""
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import utcnow

    log = logging.getLogger(__name__)
    engine = get_engine(settings.db_url)
    while True:
        try:
            now = utcnow()
            stalls = await stalled_nodes(client, settings, now)
            newly, cleared = await asyncio.to_thread(queries.record_stalls, engine, stalls, now, settings.fleet)
            for stall in (s for s in stalls if s.node in newly):
                log.warning("node %s stalled: %s", stall.node, stall.reason)
            for node in cleared:
                log.info("node %s works its queue again", node)
        except Exception as exc:  # noqa: BLE001 - the watch goes on; the next round asks again
            log.warning("stall watch: %s", one_line(exc))
        await asyncio.sleep(settings.stall_watch_s)


async def watch_external_drains(client: Client, settings: Settings, schedulers: SchedulerRegistry) -> None:
    """Every settings.external_drain_watch_s (0: never): the fleet's production nodes another
    tool drained in their scheduler (fleetctl.nodes.scheduler_sync.external_drains). Each new
    one is sent to the node's workflow as a health event (recorded once: its id is the drain's),
    and its lifting as an `info` one; under external_drain_policy `maintenance` each is asked of
    the capacity guard, as the Slurm prolog asks, and drained to maintenance when granted (a
    refusal is recorded by the guard; the next watch asks again). Any worker may: what one
    records the next finds recorded."""
    import dataclasses

    from fleetctl.config import xid_policy
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import HealthEvent, utcnow
    from fleetctl.inventory.names import scheduler_members
    from fleetctl.nodes.capacity import EXTERNAL_DRAIN, in_fleet
    from fleetctl.nodes.scheduler_sync import episode_id, external_drains
    from fleetctl.schedulers import SCHEDULER_KINDS
    from fleetctl.text import bounded, printable
    from fleetctl.workflows.client import CommandRejected, send_health_events
    from fleetctl.workflows.health_events import health_event

    if not settings.external_drain_watch_s:
        return
    log = logging.getLogger(__name__)
    engine = get_engine(settings.db_url)
    policy = xid_policy(settings)
    # What this worker signalled: a drain seen again before the workflow has recorded it is not
    # sent twice (another worker's is recorded once, by its id). Bounded: oldest forgotten first.
    sent: OrderedDict[str, None] = OrderedDict()

    async def signal(node: str, message: str, event_id: str, severity: str) -> None:
        if event_id in sent:
            return
        try:
            await send_health_events(
                client,
                node,
                [
                    health_event(
                        node,
                        EXTERNAL_DRAIN,
                        message=bounded(printable(message)),
                        actor=EXTERNAL_DRAIN,
                        event_id=event_id,
                        at=utcnow().timestamp(),
                        severity=severity,
                        policy=policy,
                    )
                ],
            )
        except CommandRejected as exc:  # no workflow for the node (retired meanwhile): the others go on
            log.warning("external drain of %s not recorded: %s", node, exc)
            return
        sent[event_id] = None  # once sent: a failed send is tried again next watch
        while len(sent) > SENT_EXTERNAL_DRAINS:
            sent.popitem(last=False)

    def look() -> tuple[list[ExternalDrain], set[str], list[HealthEvent], dict[str, str]]:
        nodes = [
            n
            for n in queries.list_nodes(engine, state="production")
            if in_fleet(n.labels, settings.fleet)
            and n.scheduler != "none"
            and set(scheduler_members(n.scheduler)) <= set(SCHEDULER_KINDS)
        ]
        found, unknown = external_drains(nodes, {kind: schedulers.get(kind) for kind in {n.scheduler for n in nodes}})
        recorded = queries.health_event_ids_starting(engine, [d.event_id for d in found])
        found = [dataclasses.replace(d, event_id=episode_id(d.event_id, recorded)) for d in found]
        # Lifted: asked, and no longer drained by another tool (a scheduler that did not answer says nothing).
        answered = {n.name for n in nodes} - unknown - {d.node for d in found}
        lifted = [e for node, e in queries.open_external_drains(engine, EXTERNAL_DRAIN).items() if node in answered]
        return found, recorded, lifted, {n.name: n.rack for n in nodes}

    while True:
        # First a whole interval: a worker (re)started asks nothing of the schedulers at once.
        await asyncio.sleep(settings.external_drain_watch_s)
        try:
            found, recorded, lifted, racks = await asyncio.to_thread(look)
            for drain in found:
                if drain.event_id not in recorded and drain.event_id not in sent:
                    log.warning("node %s: %s", drain.node, printable(drain.message))
                    await signal(drain.node, drain.message, drain.event_id, "warning")
                if settings.external_drain_policy == "maintenance" and await _recorded(engine, drain.event_id):
                    await _drain_for_external(client, settings, drain, racks[drain.node])
            for was in lifted:
                await signal(was.node_name, f"lifted: {was.message}", f"{was.idempotency_key}/lifted", "info")
        except Exception as exc:  # noqa: BLE001 - the watch goes on; the next round asks again
            log.warning("external drain watch: %s", one_line(exc))


# How long the outside-drain watch waits for a node's workflow to record the drain it was just
# sent, polling this often, before it asks the guard (the next watch asks again).
EXTERNAL_DRAIN_RECORD_WAIT_S = 10.0
EXTERNAL_DRAIN_RECORD_POLL_S = 0.05


async def _recorded(engine: Engine, event_id: str) -> bool:
    """Whether the node's workflow has recorded the health event `event_id` (an outside drain),
    waiting up to EXTERNAL_DRAIN_RECORD_WAIT_S. The guard counts a node another tool drained as
    out of service by that record: asked before it, the guard counts the node in service and
    may refuse it at the fleet's limit."""
    from fleetctl.db import queries

    deadline = time.monotonic() + EXTERNAL_DRAIN_RECORD_WAIT_S
    while not await asyncio.to_thread(queries.health_event_ids_starting, engine, [event_id]):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(EXTERNAL_DRAIN_RECORD_POLL_S)
    return True


async def _drain_for_external(client: Client, settings: Settings, drain: ExternalDrain, rack: str) -> None:
    """Under external_drain_policy `maintenance`: the node another tool drained, asked of the
    capacity guard as the Slurm prolog asks, and drained to maintenance when granted (a refusal
    is recorded by the guard; the next watch asks again)."""
    from fleetctl.db.models import utcnow
    from fleetctl.nodes.capacity import EXTERNAL_DRAIN
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.text import bounded, printable
    from fleetctl.workflows.client import CommandRejected, request_guarded_drain

    message = bounded(printable(drain.message))
    try:
        await request_guarded_drain(
            client,
            settings,
            drain.node,
            rack,
            message,
            EXTERNAL_DRAIN,
            f"{drain.event_id}@{utcnow().isoformat()}",
            Event(EventKind.MANUAL, message=message).to_dict(),
        )
    except CommandRejected as exc:  # moved meanwhile (an operator, a fault)
        logging.getLogger(__name__).info("node %s: not drained for the external drain: %s", drain.node, exc)


async def prune_periodically(settings: Settings) -> None:
    """Every settings.retention_interval_s (0: never), the retention policy's prune
    (fleetctl.db.retention). Any worker may: what one removes the next finds gone."""
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import utcnow
    from fleetctl.db.retention import RetentionPolicy, prune

    if not settings.retention_interval_s:
        return
    log = logging.getLogger(__name__)
    engine = get_engine(settings.db_url)
    while True:
        try:
            removed = await asyncio.to_thread(prune, engine, RetentionPolicy.of(settings), utcnow())
            log.info("retention: removed %s", ", ".join(f"{n} {what}" for what, n in removed.items()))
        except Exception as exc:  # noqa: BLE001 - the next round tries again
            log.warning("retention: %s", one_line(exc))
        await asyncio.sleep(settings.retention_interval_s)


def require_site_files(settings: Settings) -> None:
    """Refuse to start on a broken site profile or Xid policy (ConfigError, one line naming the
    file): a worker that started would fail every check of that profile's nodes, or judge every
    event by a policy the site did not write, and only then say why."""
    from fleetctl.checks.profiles import ProfileError, site_profiles
    from fleetctl.checks.xid_policy import XidPolicyError
    from fleetctl.config import xid_policy

    try:
        site_profiles(settings.profiles_dir or None)
    except ProfileError as exc:
        raise ConfigError(f"profiles_dir: {exc}") from None
    try:
        xid_policy(settings)
    except XidPolicyError as exc:
        raise ConfigError(f"xid_policy: {exc}") from None


def collect_less_often(settings: Settings) -> None:
    """This process's young generation at settings.worker_gc_young objects (its older
    generations' thresholds as they were): the short-lived objects of a workflow activation die
    before a collection sees them, so few are promoted and the full collections they would
    trigger, each a pause of every workflow and activity the process runs, come seldom."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(settings.worker_gc_young, older, oldest)


async def run_worker(settings: Settings, stop: asyncio.Event) -> None:
    require_site_files(settings)
    client = await connect(settings)
    # Before polling: a namespace without the search attributes would stall every node's workflow.
    warning = await require_search_attributes(client)
    if warning:
        logging.getLogger(__name__).warning(warning)
    collect_less_often(settings)
    bulk_only = settings.worker_lanes == WorkerLanes.BULK
    if bulk_only:
        os.nice(settings.worker_bulk_nice)  # bulk work takes the CPU only when nothing critical wants it
    # The watchers act for the fleet (a stall, an outside drain, retention): they run where the
    # critical lane does, never only in a process the bulk lane may starve.
    watchers = (
        []
        if bulk_only
        else [
            asyncio.create_task(watch_stalls(client, settings)),
            asyncio.create_task(prune_periodically(settings)),
            asyncio.create_task(
                watch_external_drains(client, settings, SchedulerRegistry(settings, ExecutorRegistry(settings)))
            ),
        ]
    )
    try:
        with ThreadPoolExecutor(max_workers=ACTIVITY_THREADS, thread_name_prefix="fleetctl-activity") as executor:
            lanes = build_worker(client, settings, executor)
            slots = lane_slots(ACTIVITY_THREADS, settings)
            logging.getLogger(__name__).info(
                "lanes: %s (%d activity slots, %d local), %s (%d)",
                settings.task_queue,
                slots.critical,
                slots.local,
                bulk_queue(settings.task_queue),
                slots.bulk,
            )
            async with lanes:
                await stop.wait()
    finally:
        for task in watchers:
            task.cancel()


class BackgroundWorker:
    """A worker on its own event loop in a daemon thread: for the demo (and tests) that
    drive the CLI from the main thread while workflows run."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="fleetctl-worker", daemon=True)

    def _main(self) -> None:
        async def body() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await run_worker(self.settings, self._stop)

        try:
            asyncio.run(body())
        except BaseException as exc:  # noqa: BLE001 - surfaced to the owner in stop()
            self._error = exc
            self._ready.set()

    def start(self) -> BackgroundWorker:
        self._thread.start()
        self._ready.wait(30)
        return self

    def stop(self) -> None:
        # A worker that already died has closed its loop: raise why it died, not "loop closed".
        if self._loop and self._stop and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)
        if self._error:
            raise self._error
