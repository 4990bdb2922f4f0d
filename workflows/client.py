"""Everything the CLI and other processes use to talk to the workflows: connect, start them,
send them updates and signals, query them, and schedule the sweeps.

Light to import: the Temporal client, settings and workflows.api. Workflows are started,
updated, signalled and queried by the names in workflows.api, never through their classes,
so a command that signals or updates a node (`fleetctl node event`, above all) does not pay
for importing every workflow and the activity stack behind them.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.client import (
    Client,
    Schedule,
    ScheduleActionStartWorkflow,
    ScheduleIntervalSpec,
    ScheduleOverlapPolicy,
    SchedulePolicy,
    ScheduleSpec,
    WithStartWorkflowOperation,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import SearchAttributeKey, WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from fleetctl.config import Settings, guard_policy
from fleetctl.nodes.capacity import RemovalDecision, RemovalRequest
from fleetctl.nodes.search_attributes import QUEUED_SINCE, REPORTED_PROBLEMS, compare_registered, start_attributes
from fleetctl.nodes.stalls import Stall, judge_stall, stalled_query
from fleetctl.text import failure_message, one_line
from fleetctl.workflows.api import (
    ACTIVE_CHECK_SWEEP,
    ADMIT_UPDATE,
    CAPACITY_GUARD,
    CLUSTER_VALIDATION,
    FIRMWARE_ROLLOUT,
    GPU_RETURNS,
    GUARD_STATUS_QUERY,
    GUARD_UPDATE_NAMES_BEFORE,
    HEALTH_EVENT_SIGNAL,
    HUNG_JOBS,
    JOB_HISTORY_SYNC,
    JOB_RESTART,
    NODE_LIFECYCLE,
    NODE_STATE_QUERY,
    PRODUCTION_STRAGGLERS,
    RECHECK_UPDATE,
    RELEASE_GPU_UPDATE,
    REMEDIATION,
    REQUEST_REMOVAL_UPDATE,
    RESUME_AUTOMATION_UPDATE,
    ROLL_FORWARD_SIGNAL,
    ROLLOUT_ABORT_UPDATE,
    ROLLOUT_PROGRESS_QUERY,
    ROLLOUT_RESUME_UPDATE,
    TRANSITION_UPDATE,
    CapacityGuardState,
    GpuQuarantineRequest,
    GpuReturnsInput,
    HealthEventInput,
    HungJobsInput,
    JobRestartInput,
    JobRestartResult,
    JobSyncInput,
    NodeLifecycleState,
    PhaseAccepted,
    PhaseRequest,
    RemediationInput,
    RemediationResult,
    ResumeAutomation,
    RolloutCommand,
    RolloutInput,
    RolloutStatus,
    StragglerSweepInput,
    SweepInput,
    TransitionRequest,
    TransitionResult,
    ValidationInput,
    ValidationResult,
    gpu_returns_id,
    guard_id,
    hung_jobs_id,
    job_restart_id,
    job_sync_id,
    node_of_workflow_id,
    node_workflow_id,
    remediation_id,
    remediation_mode,
    rollout_workflow_id,
    straggler_sweep_id,
    sweep_id,
    validation_id,
)
from fleetctl.workflows.converter import DATA_CONVERTER

if TYPE_CHECKING:
    from fleetctl.db.sweep_intervals import SweepSchedule
    from fleetctl.remediation.events import Event
    from fleetctl.remediation.runbooks import Runbook

# Node requests in flight at once from one command (the benchmarks drive 1,000 nodes so).
CLIENT_CONCURRENCY = 50
# What `temporal workflow describe` shows of a node's workflow besides its search attributes
# (fixed at start: the state now is FleetctlNodeState, and `temporal workflow metadata`).
NODE_STATIC_DETAILS = (
    "Lifecycle of one GPU node, started in state {state} (version {version}). Its state, fleet, "
    "rack, GPU profile, scheduler and the cause and time of its last transition are search "
    "attributes (FleetctlNodeState, FleetctlFleet, FleetctlRack, FleetctlGpuProfile, "
    "FleetctlScheduler, FleetctlLastCause, FleetctlStateSince); its current details say the "
    "state and last cause now."
)
# Update calls per request before a node is reported as not answering. A call times out
# when the node's worker is too busy to take the update in time; the retry carries the same
# update id, so it is the same update, never a second one.
UPDATE_ATTEMPTS = 5


class NodeTiming(TypedDict, total=False):
    """NodeLifecycleState's timing fields other than the fleet's, as a caller may set them
    (the tests' drain that looks for its jobs every half second, not every DRAIN_JOB_POLL_S)."""

    scheduler_retry_s: float
    drain_job_wait_s: float
    drain_job_poll_s: float


class TemporalUnavailable(RuntimeError):
    pass


class CommandRejected(RuntimeError):
    """The node's workflow refused the command (an illegal transition, say)."""


class TemporalNotSetUp(RuntimeError):
    """The namespace lacks what fleetctl's workflows need: its search attributes."""


async def connect(settings: Settings, timeout_s: float = 5.0) -> Client:
    from fleetctl.connections.temporal_client import resolve

    temporal = resolve(settings)  # flags, TEMPORAL_* env, fleetctl config, Temporal profile
    try:
        # The worker decodes with its client's converter, in the workflow sandbox too.
        return await asyncio.wait_for(
            Client.connect(**temporal.connect_kwargs(), data_converter=DATA_CONVERTER), timeout_s
        )
    except (TimeoutError, RuntimeError, OSError) as exc:
        raise TemporalUnavailable(
            f"cannot reach Temporal at {temporal.describe()} ({_one_line(exc)}); {temporal.unreachable_hint()}"
        ) from None


async def task_queue_unpolled(client: Client, task_queue: str, timeout_s: float = 2.0) -> bool:
    """Whether no worker has polled `task_queue`'s workflow tasks lately (the server keeps a
    poller for some minutes after its last poll). Unknown (an error, no answer in time) is
    False: a warning is only said when the server said so."""
    from temporalio.api.enums.v1 import TaskQueueType
    from temporalio.api.taskqueue.v1 import TaskQueue
    from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

    request = DescribeTaskQueueRequest(
        namespace=client.namespace,
        task_queue=TaskQueue(name=task_queue),
        task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
    )
    try:
        described = await client.workflow_service.describe_task_queue(request, timeout=timedelta(seconds=timeout_s))
    except (RPCError, TimeoutError):
        return False
    return not described.pollers


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return sdk_error_line(text.splitlines()[0]) if text else exc.__class__.__name__


# Where the Rust core's Debug text of an error begins, after the SDK's own words ("Failed
# client connect: Server connection error: tonic::transport::Error(Transport, ...)").
_RUST_DEBUG = re.compile(r":?\s*(?:tonic::|Status \{)")
# What that text says for a person: a status code, and the quoted or named causes
# (ConnectError("tcp connect error", Os { ..., message: "Connection refused" })).
_RUST_CODE = re.compile(r"\bcode: ([A-Z]\w*)")
_RUST_CAUSE = re.compile(r'(?:ConnectError\(|message: |error: )"((?:[^"\\]|\\.)*)"|error: ([A-Z]\w*(?:\(\w+\))?)')
SDK_ERROR_LIMIT = 300


def sdk_error_line(text: str) -> str:
    """The Temporal SDK's error text as one line a person reads: its own words, then the status
    code and the causes the Rust core's Debug text carries, never that text cut mid-struct."""
    debug = _RUST_DEBUG.search(text)
    if debug is None:
        return text[:SDK_ERROR_LIMIT]
    causes = [m.group(1) for m in _RUST_CODE.finditer(text)]
    causes += [m.group(1) or m.group(2) for m in _RUST_CAUSE.finditer(text)]
    said = [text[: debug.start()].strip(), *dict.fromkeys(c for c in causes if c)]
    return ": ".join(said)[:SDK_ERROR_LIMIT]


async def ensure_node_workflows(
    client: Client,
    settings: Settings,
    nodes: Iterable[tuple[str, str, int]],
    concurrency: int = CLIENT_CONCURRENCY,
    on_started: Callable[[str], object] | None = None,
    **timing: Unpack[NodeTiming],
) -> int:
    """Start NodeLifecycle for each (name, state, version) that has none running. Idempotent.
    `timing`: NodeTiming's fields, given to each node's NodeLifecycleState."""
    sem = asyncio.Semaphore(concurrency)

    async def start(name: str, state: str, version: int) -> None:
        async with sem:
            await client.start_workflow(
                NODE_LIFECYCLE,
                NodeLifecycleState(node=name, state=state, state_version=version, **timing),
                id=node_workflow_id(name),
                task_queue=settings.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
                search_attributes=start_attributes(state),
                static_summary=f"GPU node {name}",
                static_details=NODE_STATIC_DETAILS.format(state=state, version=version),
            )
        if on_started:
            on_started(name)

    nodes = list(nodes)
    await asyncio.gather(*(start(*n) for n in nodes))
    return len(nodes)


async def _registered_search_attributes(client: Client) -> dict[str, int]:
    from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest

    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace)
    )
    return dict(listed.custom_attributes)


async def register_search_attributes(client: Client) -> list[str]:
    """Register fleetctl's search attributes in the client's namespace through the operator
    API; the names added (none when all were there). Idempotent. A name already registered
    with another type changes nothing and raises TemporalNotSetUp, as does a refusal."""
    from temporalio.api.operatorservice.v1 import AddSearchAttributesRequest

    where = f"namespace {client.namespace}"
    try:
        missing, conflicts = compare_registered(await _registered_search_attributes(client))
        if conflicts:
            raise TemporalNotSetUp(
                f"{where}: {'; '.join(conflicts)}: nothing registered (remove that attribute or use another namespace)"
            )
        if missing:
            await client.operator_service.add_search_attributes(
                AddSearchAttributesRequest(
                    namespace=client.namespace,
                    search_attributes={k.name: IndexedValueType.ValueType(k.indexed_value_type) for k in missing},
                )
            )
        # Read back: the namespace holds every one now (another setup may have raced this one).
        missing_after, conflicts = compare_registered(await _registered_search_attributes(client))
    except RPCError as exc:
        raise TemporalNotSetUp(f"{where}: cannot register search attributes: {one_line(exc.message or exc)}") from None
    if missing_after or conflicts:
        raise TemporalNotSetUp(
            f"{where}: still not registered after adding them: {', '.join([k.name for k in missing_after] + conflicts)}"
        )
    return [k.name for k in missing]


async def require_search_attributes(client: Client) -> str | None:
    """Raise TemporalNotSetUp when the namespace lacks one of fleetctl's search attributes:
    a node's workflow that sets one there fails its task until it is registered. A server
    that will not list them (the operator API refused) is trusted: the warning is returned."""
    try:
        missing, conflicts = compare_registered(await _registered_search_attributes(client))
    except RPCError as exc:
        return (
            f"could not check the search attributes of namespace {client.namespace} ({one_line(exc.message or exc)}); "
            "node workflows stall if `fleetctl temporal setup` was not run there"
        )
    if missing or conflicts:
        raise TemporalNotSetUp(
            f"namespace {client.namespace} lacks fleetctl's search attributes "
            f"({', '.join([k.name for k in missing] + conflicts)}): run `fleetctl temporal setup` "
            "(or `fleetctl dev server` for a local one)"
        )
    return None


T = TypeVar("T")


def _guard_start(settings: Settings) -> dict[str, Any]:
    """How this fleet's guard is started when none is running. The policy it starts with is
    only what it shows until its first decision: the guard reads its fleet's own from the
    worker's configuration before each one (so no command's environment sets it for everyone)."""
    return {
        "id": guard_id(settings.fleet),
        "task_queue": settings.task_queue,
        "id_conflict_policy": WorkflowIDConflictPolicy.USE_EXISTING,
        "id_reuse_policy": WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    }


def _guard_state(settings: Settings) -> CapacityGuardState:
    return CapacityGuardState(fleet=settings.fleet, policy=guard_policy(settings, settings.fleet))


async def ensure_capacity_guard(client: Client, settings: Settings) -> WorkflowHandle[Any, None]:
    """This fleet's guard, started if none is running (_guard_start)."""
    return await client.start_workflow(CAPACITY_GUARD, _guard_state(settings), **_guard_start(settings))


async def ask_capacity_guard(client: Client, settings: Settings, update: str, arg: Any, result_type: type[T]) -> T:
    """An Update to this fleet's guard, the guard started if none is running, in one request
    (update-with-start): a drain's grant is on its critical path, and a start then an Update
    were two round trips. The worker hands this to the guard's activities, so the guard is
    started one way only. A guard that has no handler for `update` runs on a worker of the
    previous release (a rolling upgrade): asked again by the name that release knows, where
    the name changed, a drain is granted now, not once the last worker is upgraded."""
    try:
        return await _update_guard(client, settings, update, arg, result_type)
    except WorkflowUpdateFailedError as exc:
        before = GUARD_UPDATE_NAMES_BEFORE.get(update)
        if before is None or not handler_missing(exc, update):
            raise
    return await _update_guard(client, settings, before, arg, result_type)


async def _update_guard(client: Client, settings: Settings, update: str, arg: Any, result_type: type[T]) -> T:
    answer: T = await client.execute_update_with_start_workflow(
        update,
        arg,
        start_workflow_operation=WithStartWorkflowOperation(
            CAPACITY_GUARD, _guard_state(settings), **_guard_start(settings)
        ),
        result_type=result_type,
    )
    return answer


def handler_missing(exc: WorkflowUpdateFailedError, update: str) -> bool:
    """Whether the workflow refused an Update because its code has no handler of that name
    (the Python SDK's words; an older worker's code, or a misspelt name)."""
    return f"Update handler for '{update}' expected but not found" in failure_message(exc)


async def guard_status(client: Client, settings: Settings) -> CapacityGuardState:
    handle = await ensure_capacity_guard(client, settings)
    # Queried by name, the SDK types the answer Any: result_type decodes it to what is declared.
    status: CapacityGuardState = await handle.query(GUARD_STATUS_QUERY, result_type=CapacityGuardState)
    return status


async def running_guard_status(client: Client, settings: Settings) -> CapacityGuardState | None:
    """The fleet's guard, without starting one (a look must not create the fleet it looks
    at); None when no guard runs for it."""
    from temporalio.service import RPCError, RPCStatusCode

    try:
        status: CapacityGuardState = await client.get_workflow_handle(guard_id(settings.fleet)).query(
            GUARD_STATUS_QUERY, result_type=CapacityGuardState
        )
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    return status


async def guarded_fleets(client: Client, limit: int = 20) -> list[str]:
    """The fleets a capacity guard runs for in this namespace (at most `limit`)."""
    prefix = guard_id("")
    fleets = []
    async for w in client.list_workflows(f'WorkflowType="{CAPACITY_GUARD}" AND ExecutionStatus="Running"', limit=limit):
        if w.id.startswith(prefix):
            fleets.append(w.id[len(prefix) :])
    return sorted(set(fleets))


async def node_now(client: Client, node: str) -> NodeLifecycleState:
    """What the node's workflow is doing now and how its last phase ended (a query: reads only)."""
    state: NodeLifecycleState = await client.get_workflow_handle(node_workflow_id(node)).query(
        NODE_STATE_QUERY, result_type=NodeLifecycleState
    )
    return state


async def resume_automation(client: Client, settings: Settings, actor: str) -> CapacityGuardState:
    return await ask_capacity_guard(
        client, settings, RESUME_AUTOMATION_UPDATE, ResumeAutomation(actor), CapacityGuardState
    )


def _retryable_timeout(exc: WorkflowUpdateRPCTimeoutOrCancelledError) -> bool:
    """The update call ran out of time (retry it); not the caller's own task being cancelled
    (the SDK reports both with this one error: a cancelled activity must stay cancelled)."""
    return not isinstance(exc.__cause__, asyncio.CancelledError)


async def request_transition(
    client: Client,
    node: str,
    trigger: str,
    actor: str,
    cause: str = "",
    actor_kind: str = "operator",
    request_id: str | None = None,
    event: dict[str, Any] | None = None,
    attempts: int = UPDATE_ATTEMPTS,
    rpc_timeout: timedelta | None = None,
    grant: str = "",
) -> TransitionResult:
    """A transition, answered by the node's workflow. A call that times out is sent again with
    the same request id, which the workflow's idempotency guard answers without moving twice.
    An automated drain needs the capacity guard's `grant` for the node."""
    handle = client.get_workflow_handle(node_workflow_id(node))
    req = TransitionRequest(
        node=node,
        trigger=trigger,
        actor=actor,
        actor_kind=actor_kind,
        cause=cause,
        request_id=request_id or str(uuid.uuid4()),
        event=event,
        grant=grant,
    )
    for _ in range(attempts):
        try:
            result: TransitionResult = await handle.execute_update(
                TRANSITION_UPDATE, req, result_type=TransitionResult, rpc_timeout=rpc_timeout
            )
            return result
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            if not _retryable_timeout(exc):
                raise
        except WorkflowUpdateFailedError as exc:
            raise CommandRejected(failure_message(exc)) from None
        except RPCError as exc:
            if "not found" in str(exc).lower() or "already completed" in str(exc).lower():
                raise CommandRejected(
                    f"{node}: no lifecycle workflow is running (retired, or never imported)"
                ) from None
            raise TemporalUnavailable(f"Temporal error for {node}: {_one_line(exc)}") from None
    raise TemporalUnavailable(_no_answer(node, attempts))


async def request_guarded_drain(
    client: Client,
    settings: Settings,
    node: str,
    rack: str,
    cause: str,
    actor: str,
    request_id: str,
    event: dict[str, Any] | None = None,
) -> tuple[RemovalDecision, TransitionResult | None]:
    """An automated drain asked from outside a workflow (the Slurm prolog): the fleet's
    capacity guard first, then the node's workflow, as workflows.definitions.shared.guarded_drain
    does inside one. None: the guard refused, nothing was asked of the node."""
    try:
        decision = await ask_capacity_guard(
            client,
            settings,
            REQUEST_REMOVAL_UPDATE,
            RemovalRequest(node=node, rack=rack, reason=cause, actor=actor, request_id=request_id),
            RemovalDecision,
        )
    except RPCError as exc:
        raise TemporalUnavailable(f"capacity guard: {_one_line(exc)}") from None
    if not decision.granted:
        return decision, None
    return decision, await request_transition(
        client,
        node,
        "drain",
        actor,
        cause,
        actor_kind="automation",
        request_id=request_id,
        event=event,
        grant=decision.grant,
    )


def _no_answer(node: str, attempts: int) -> str:
    return (
        f"{node}: its workflow did not take the request after {attempts} tr{'ies' if attempts > 1 else 'y'} "
        "(workers busy or none running); run the command again"
    )


@dataclass
class PhaseOutcome:
    """How a node's workflow answered an admit or recheck request."""

    node: str
    accepted: bool
    message: str
    # Update calls that timed out before the answer came (each retried with the same update id).
    timeouts: int = 0


def phase_update_id(kind: str, node: str, request_id: str) -> str:
    """One update id per (node, request): every call of a retried request is the same update,
    which Temporal answers once (a second admit would be refused as already in progress)."""
    return f"{kind}/{node}/{request_id}"


async def phase_outcome(
    client: Client,
    node: str,
    kind: str,
    actor: str,
    suite: str,
    request_id: str | None = None,
    attempts: int = UPDATE_ATTEMPTS,
    rpc_timeout: timedelta | None = None,
) -> PhaseOutcome:
    """Ask a node's workflow to admit or recheck it. `request_id` names the request (one per
    command); the same request sent again (a retry, a resent command) is one update."""
    update = ADMIT_UPDATE if kind == "admit" else RECHECK_UPDATE
    update_id = phase_update_id(kind, node, request_id or str(uuid.uuid4()))
    handle = client.get_workflow_handle(node_workflow_id(node))
    req = PhaseRequest(actor=actor, suite=suite, request_id=update_id)
    for attempt in range(1, attempts + 1):
        try:
            accepted: PhaseAccepted = await handle.execute_update(
                update, req, id=update_id, result_type=PhaseAccepted, rpc_timeout=rpc_timeout
            )
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            if not _retryable_timeout(exc):
                raise
            continue
        except WorkflowUpdateFailedError as exc:
            return PhaseOutcome(node, False, failure_message(exc), attempt - 1)
        except RPCError as exc:
            return PhaseOutcome(node, False, f"{node}: {_one_line(exc)}", attempt - 1)
        where = f"{accepted.queued_behind} item(s) ahead" if accepted.queued_behind else "now"
        return PhaseOutcome(node, True, where, attempt - 1)
    return PhaseOutcome(node, False, _no_answer(node, attempts), attempts)


async def request_phase(
    client: Client, node: str, kind: str, actor: str, suite: str, request_id: str | None = None
) -> tuple[str, bool, str]:
    """Ask a node's workflow to admit or recheck it; (node, accepted, message)."""
    o = await phase_outcome(client, node, kind, actor, suite, request_id=request_id)
    return o.node, o.accepted, o.message


async def request_phases(
    client: Client,
    nodes: Sequence[str],
    kind: str,
    actor: str,
    suite: str,
    request_id: str | None = None,
    concurrency: int = CLIENT_CONCURRENCY,
    attempts: int = UPDATE_ATTEMPTS,
    rpc_timeout: timedelta | None = None,
    on_done: Callable[[PhaseOutcome], None] | None = None,
) -> list[PhaseOutcome]:
    """Admit or recheck many nodes, `concurrency` requests in flight at once; one outcome per
    node, in the order given. One request id for the whole command: node by node, a resent
    command with the same id is deduplicated like a retried call."""
    request_id = request_id or str(uuid.uuid4())
    gate = asyncio.Semaphore(concurrency)

    async def one(node: str) -> PhaseOutcome:
        async with gate:
            outcome = await phase_outcome(client, node, kind, actor, suite, request_id, attempts, rpc_timeout)
        if on_done:
            on_done(outcome)
        return outcome

    return list(await asyncio.gather(*(one(n) for n in nodes)))


async def release_gpu(client: Client, node: str, gpu: str, actor: str, reason: str) -> str:
    """Put a GPU taken out alone back in its node's scheduler, through the node's workflow;
    CommandRejected says why not (the GPU is not out, the node is retired)."""
    handle = client.get_workflow_handle(node_workflow_id(node))
    req = GpuQuarantineRequest(node, gpu, reason=reason, actor=actor, request_id=str(uuid.uuid4()))
    try:
        done: str = await handle.execute_update(RELEASE_GPU_UPDATE, req, result_type=str)
    except WorkflowUpdateFailedError as exc:
        raise CommandRejected(failure_message(exc)) from None
    return done


# Temporal refuses a run's signals past its cap (10,000 by default) until the run continues as
# new, which the node's workflow does at its signals_per_run: a worker slowed by load may take
# seconds to get there while senders go on. A sender waits that out, not refused; an XID 79
# sent then must still arrive. Past this long the worker is not continuing the run: refused.
SIGNAL_CAP_WAIT_S = 30.0
SIGNAL_CAP_REFUSAL = "exceeded workflow execution limit for signal events"


async def send_health_events(client: Client, node: str, events: Sequence[HealthEventInput]) -> None:
    """Signals NodeLifecycle.health_event: the first step of the reaction to a critical event."""
    handle = client.get_workflow_handle(node_workflow_id(node))  # no run id: the run current at each send
    loop = asyncio.get_running_loop()
    try:
        for ev in events:
            deadline, pause = loop.time() + SIGNAL_CAP_WAIT_S, 0.05
            while True:
                try:
                    await handle.signal(HEALTH_EVENT_SIGNAL, ev)
                    break
                except RPCError as exc:
                    if SIGNAL_CAP_REFUSAL not in str(exc) or loop.time() + pause > deadline:
                        raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 1.0)
    except RPCError as exc:
        raise CommandRejected(f"{node}: cannot deliver the event ({_one_line(exc)})") from None


@dataclass
class Outcome:
    node: str
    result: TransitionResult | None
    error: str | None


async def request_many(
    client: Client,
    nodes: Sequence[str],
    trigger: str,
    actor: str,
    cause: str = "",
    event: dict[str, Any] | None = None,
) -> list[Outcome]:
    """`trigger` on each node; `event` (fleetctl.remediation.events.Event.to_dict()) says what a drain is for."""

    async def one(node: str) -> Outcome:
        try:
            return Outcome(node, await request_transition(client, node, trigger, actor, cause, event=event), None)
        except CommandRejected as exc:
            return Outcome(node, None, str(exc))

    return list(await asyncio.gather(*(one(n) for n in nodes)))


# ---- remediation ---------------------------------------------------------------------------


class RemediationAlreadyRunning(RuntimeError):
    pass


async def start_remediation(
    client: Client, settings: Settings, node: str, runbook: Runbook, event: Event, actor: str, dry_run: bool = False
) -> WorkflowHandle[Any, RemediationResult]:
    mode = remediation_mode(dry_run, settings.remediation_shadow or settings.automation_dry_run)
    workflow_id = remediation_id(node) if mode == "live" else f"{remediation_id(node)}/{mode}-{uuid.uuid4().hex[:8]}"
    try:
        return await client.start_workflow(
            REMEDIATION,
            RemediationInput(node, runbook.to_dict(), event.to_dict(), mode, actor, event.critical),
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=RemediationResult,
            id_conflict_policy=WorkflowIDConflictPolicy.FAIL,
            id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:
        raise RemediationAlreadyRunning(f"{node}: a remediation is already running ({workflow_id})") from None


async def run_remediation(
    client: Client, settings: Settings, node: str, runbook: Runbook, event: Event, actor: str, dry_run: bool = False
) -> RemediationResult:
    handle = await start_remediation(client, settings, node, runbook, event, actor, dry_run)
    return await handle.result()


# ---- job restarts ----------------------------------------------------------------------------


async def start_job_restart(
    client: Client, settings: Settings, inp: JobRestartInput
) -> WorkflowHandle[Any, JobRestartResult]:
    """Start the restart of `inp.job_id` for the fault `inp.restart_id`; its handle.

    Idempotent: for a restart id already started, running or finished, this answers with
    that restart's handle and starts nothing, so the same fault never restarts a job twice.
    """
    if datetime.fromisoformat(inp.fault_seen_at).tzinfo is None:
        raise ValueError(f"fault_seen_at {inp.fault_seen_at!r} needs a UTC offset")
    workflow_id = job_restart_id(inp.job_id, inp.restart_id)
    try:
        return await client.start_workflow(
            JOB_RESTART,
            inp,
            id=workflow_id,
            task_queue=settings.task_queue,
            result_type=JobRestartResult,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
            id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
        )
    except WorkflowAlreadyStartedError:  # it ran to its end already
        return client.get_workflow_handle(workflow_id, result_type=JobRestartResult)


# ---- firmware roll-outs ----------------------------------------------------------------------


class RolloutRefused(RuntimeError):
    pass


async def start_rollout(client: Client, settings: Settings, inp: RolloutInput) -> None:
    """Start the FirmwareRollout workflow of a roll-out already recorded
    (fleetctl.db.firmware.record_rollout)."""
    await client.start_workflow(
        FIRMWARE_ROLLOUT, inp, id=rollout_workflow_id(inp.rollout_id), task_queue=settings.task_queue
    )


async def rollout_command(client: Client, rollout_id: str, command: str, actor: str) -> str:
    handle = client.get_workflow_handle(rollout_workflow_id(rollout_id))
    update = ROLLOUT_RESUME_UPDATE if command == "resume" else ROLLOUT_ABORT_UPDATE
    try:
        answer: str = await handle.execute_update(update, RolloutCommand(actor), result_type=str)
    except WorkflowUpdateFailedError as exc:
        raise RolloutRefused(failure_message(exc)) from None
    except RPCError as exc:
        raise RolloutRefused(
            f"roll-out {rollout_id}: {str(exc).splitlines()[0] if str(exc) else 'not found'}"
        ) from None
    return answer


async def rollout_progress(client: Client, rollout_id: str) -> RolloutStatus:
    status: RolloutStatus = await client.get_workflow_handle(rollout_workflow_id(rollout_id)).query(
        ROLLOUT_PROGRESS_QUERY, result_type=RolloutStatus
    )
    return status


# ---- schedules -------------------------------------------------------------------------------


def sweep_schedule(settings: Settings, schedule_id: str, every: timedelta, sweep: SweepInput) -> Schedule:
    """The Temporal Schedule that starts an ActiveCheckSweep every `every`."""
    return _every(
        ScheduleActionStartWorkflow(
            ACTIVE_CHECK_SWEEP, sweep, id=sweep_id(schedule_id), task_queue=settings.task_queue
        ),
        every,
    )


async def sweep_schedules(client: Client) -> list[SweepSchedule]:
    """Every active-check sweep schedule of the namespace, of every fleet, paused or not, with
    its shortest interval: what `fleetctl schedule list` records (fleetctl.db.sweep_intervals)."""
    from fleetctl.db.sweep_intervals import SweepSchedule

    found: list[SweepSchedule] = []
    async for entry in await client.list_schedules():
        desc = await client.get_schedule_handle(entry.id).describe()
        action = desc.schedule.action
        if (
            not isinstance(action, ScheduleActionStartWorkflow)
            or action.workflow != ACTIVE_CHECK_SWEEP
            or not desc.schedule.spec.intervals
        ):
            continue
        (sweep,) = await client.data_converter.decode(action.args, [SweepInput]) if action.args else (None,)
        if sweep is not None:
            found.append(
                SweepSchedule(
                    entry.id,
                    sweep.fleet,
                    min(i.every.total_seconds() for i in desc.schedule.spec.intervals),
                    desc.schedule.state.paused,
                )
            )
    return found


def job_sync_schedule(settings: Settings, schedule_id: str, every: timedelta, sync: JobSyncInput) -> Schedule:
    """The Temporal Schedule that starts a JobHistorySync every `every`."""
    return _every(
        ScheduleActionStartWorkflow(
            JOB_HISTORY_SYNC, sync, id=job_sync_id(schedule_id), task_queue=settings.task_queue
        ),
        every,
    )


def straggler_schedule(settings: Settings, schedule_id: str, every: timedelta, judge: StragglerSweepInput) -> Schedule:
    """The Temporal Schedule that starts a ProductionStragglers judge every `every`."""
    return _every(
        ScheduleActionStartWorkflow(
            PRODUCTION_STRAGGLERS, judge, id=straggler_sweep_id(schedule_id), task_queue=settings.task_queue
        ),
        every,
    )


def hung_jobs_schedule(settings: Settings, schedule_id: str, every: timedelta, judge: HungJobsInput) -> Schedule:
    """The Temporal Schedule that starts a HungJobs judge every `every`."""
    return _every(
        ScheduleActionStartWorkflow(HUNG_JOBS, judge, id=hung_jobs_id(schedule_id), task_queue=settings.task_queue),
        every,
    )


def gpu_returns_schedule(settings: Settings, schedule_id: str, every: timedelta, inp: GpuReturnsInput) -> Schedule:
    """The Temporal Schedule that starts a GpuReturns every `every` (one at a time)."""
    return _every(
        ScheduleActionStartWorkflow(GPU_RETURNS, inp, id=gpu_returns_id(schedule_id), task_queue=settings.task_queue),
        every,
    )


def _every(action: ScheduleActionStartWorkflow, every: timedelta) -> Schedule:
    return Schedule(
        action=action,
        spec=ScheduleSpec(intervals=[ScheduleIntervalSpec(every=every)]),
        # A run that overruns its interval is not doubled up: the next one is skipped.
        policy=SchedulePolicy(overlap=ScheduleOverlapPolicy.SKIP),
    )


async def stalled_nodes(client: Client, settings: Settings, now: datetime | None = None) -> list[Stall]:
    """The node workflows on this task queue that are stalled (fleetctl.nodes.stalls), from
    one visibility query: failing workflow tasks, or queued work past settings.stall_after_s."""
    now = now or datetime.now(UTC)
    query = stalled_query(NODE_LIFECYCLE, settings.task_queue, now - timedelta(seconds=settings.stall_after_s))
    problems_key = SearchAttributeKey.for_keyword_list(REPORTED_PROBLEMS)
    stalls = []
    async for wf in client.list_workflows(query):
        node = node_of_workflow_id(wf.id)
        if node is None:
            continue
        attributes = wf.typed_search_attributes
        stall = judge_stall(
            node, attributes.get(problems_key) or [], attributes.get(QUEUED_SINCE), now, settings.stall_after_s
        )
        if stall is not None:
            stalls.append(stall)
    return stalls


# ---- validation at cluster scale -------------------------------------------------------------


async def run_validation(client: Client, settings: Settings, inp: ValidationInput, request_id: str) -> ValidationResult:
    """Start a ClusterValidation and wait for its verdict."""
    handle = await client.start_workflow(
        CLUSTER_VALIDATION,
        inp,
        id=validation_id(request_id),
        task_queue=settings.task_queue,
        result_type=ValidationResult,
    )
    result: ValidationResult = await handle.result()
    return result


def validation_schedule(settings: Settings, schedule_id: str, every: timedelta, inp: ValidationInput) -> Schedule:
    """The Temporal Schedule that starts a ClusterValidation every `every` (one at a time)."""
    return _every(
        ScheduleActionStartWorkflow(
            CLUSTER_VALIDATION, inp, id=validation_id(f"schedule/{schedule_id}"), task_queue=settings.task_queue
        ),
        every,
    )


async def roll_forward(client: Client, settings: Settings) -> list[str]:
    """Ask every running node workflow and capacity guard on this task queue to continue as
    new, so that each next run is on the workers' code: after an upgrade (every worker on the
    new release), before the next release retires a patch. The workflow ids asked."""
    query = (
        f"(WorkflowType = '{NODE_LIFECYCLE}' OR WorkflowType = '{CAPACITY_GUARD}') "
        f"AND ExecutionStatus = 'Running' AND TaskQueue = '{settings.task_queue}'"
    )
    asked = []
    async for found in client.list_workflows(query):
        try:
            await client.get_workflow_handle(found.id).signal(ROLL_FORWARD_SIGNAL)
        except RPCError as exc:
            if exc.status is not RPCStatusCode.NOT_FOUND:
                raise
            continue  # it ended since the query: its next run, if any, starts on today's code
        asked.append(found.id)
    return asked
