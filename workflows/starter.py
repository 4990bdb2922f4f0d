"""The client side: connect to Temporal, start node workflows, send them commands.

Light to import: the Temporal client, settings and workflows.messages only. A command that
signals or updates a node (`fleetctl node event`, above all) must not pay for importing
every workflow and the activity stack behind them; the functions that need a workflow's
classes import them when called.
"""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from temporalio.client import Client, WorkflowUpdateFailedError, WorkflowUpdateRPCTimeoutOrCancelledError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError

from fleetctl.config import Settings
from workflows.messages import HEALTH_EVENT_SIGNAL, HealthEventInput, node_workflow_id

if TYPE_CHECKING:
    from fleetctl.capacity import CheckErrorReport, GuardPolicy, RemovalDecision, RemovalRequest
    from workflows.capacity_guard import CapacityGuardState
    from workflows.node_lifecycle import TransitionResult

# Node requests in flight at once from one command (the benchmarks drive 1,000 nodes so).
CLIENT_CONCURRENCY = 50
# Update calls per request before a node is reported as not answering. A call times out
# when the node's worker is too busy to take the update in time; the retry carries the same
# update id, so it is the same update, never a second one.
UPDATE_ATTEMPTS = 5


class TemporalUnavailable(RuntimeError):
    pass


class CommandRejected(RuntimeError):
    """The node's workflow refused the command (an illegal transition, say)."""


async def connect(settings: Settings, timeout_s: float = 5.0) -> Client:
    from fleetctl.temporal_connection import resolve

    temporal = resolve(settings)  # flags, TEMPORAL_* env, fleetctl config, Temporal profile
    try:
        return await asyncio.wait_for(Client.connect(**temporal.connect_kwargs()), timeout_s)
    except (RuntimeError, asyncio.TimeoutError, OSError) as exc:
        raise TemporalUnavailable(
            f"cannot reach Temporal at {temporal.describe()} ({_one_line(exc)}); {temporal.unreachable_hint()}"
        ) from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else exc.__class__.__name__


async def ensure_node_workflows(
    client: Client, settings: Settings, nodes: Iterable[tuple[str, str, int]], concurrency: int = CLIENT_CONCURRENCY,
    on_started=None,
) -> int:
    """Start NodeLifecycle for each (name, state, version) that has none running. Idempotent."""
    from workflows.node_lifecycle import NodeLifecycle, NodeLifecycleState

    sem = asyncio.Semaphore(concurrency)

    async def start(name: str, state: str, version: int) -> None:
        async with sem:
            await client.start_workflow(
                NodeLifecycle.run,
                NodeLifecycleState(node=name, state=state, state_version=version),
                id=node_workflow_id(name),
                task_queue=settings.task_queue,
                id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
                id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
            )
        if on_started:
            on_started(name)

    nodes = list(nodes)
    await asyncio.gather(*(start(*n) for n in nodes))
    return len(nodes)


def guard_policy(settings: Settings) -> GuardPolicy:
    from fleetctl.capacity import GuardPolicy

    return GuardPolicy(settings.guard_max_unavailable_fleet, settings.guard_max_unavailable_rack,
                       settings.guard_storm_fraction, settings.guard_storm_window_s)


async def ensure_capacity_guard(client: Client, settings: Settings):
    from workflows.capacity_guard import CapacityGuard, CapacityGuardState, guard_id

    return await client.start_workflow(
        CapacityGuard.run, CapacityGuardState(fleet=settings.fleet, policy=guard_policy(settings)), id=guard_id(settings.fleet),
        task_queue=settings.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )


async def ask_capacity_guard(client: Client, settings: Settings, req: RemovalRequest) -> RemovalDecision:
    from fleetctl.capacity import RemovalDecision
    from workflows.capacity_guard import CapacityGuard

    handle = await ensure_capacity_guard(client, settings)
    return await handle.execute_update(CapacityGuard.request_removal, req, result_type=RemovalDecision)


async def guard_status(client: Client, settings: Settings) -> CapacityGuardState:
    from workflows.capacity_guard import CapacityGuard, CapacityGuardState

    handle = await ensure_capacity_guard(client, settings)
    return await handle.query(CapacityGuard.status, result_type=CapacityGuardState)


async def report_check_errors(client: Client, settings: Settings, report: CheckErrorReport) -> CapacityGuardState:
    from workflows.capacity_guard import CapacityGuard, CapacityGuardState

    handle = await ensure_capacity_guard(client, settings)
    return await handle.execute_update(CapacityGuard.report_check_errors, report, result_type=CapacityGuardState)


async def resume_automation(client: Client, settings: Settings, actor: str) -> CapacityGuardState:
    from workflows.capacity_guard import CapacityGuard, CapacityGuardState, ResumeAutomation

    handle = await ensure_capacity_guard(client, settings)
    return await handle.execute_update(CapacityGuard.resume_automation, ResumeAutomation(actor), result_type=CapacityGuardState)


def _retryable_timeout(exc: WorkflowUpdateRPCTimeoutOrCancelledError) -> bool:
    """The update call ran out of time (retry it); not the caller's own task being cancelled
    (the SDK reports both with this one error: a cancelled activity must stay cancelled)."""
    return not isinstance(exc.__cause__, asyncio.CancelledError)


async def request_transition(
    client: Client, node: str, trigger: str, actor: str, cause: str = "", actor_kind: str = "operator",
    request_id: str | None = None, event: dict | None = None, attempts: int = UPDATE_ATTEMPTS,
    rpc_timeout: timedelta | None = None,
) -> TransitionResult:
    """A transition, answered by the node's workflow. A call that times out is sent again with
    the same request id, which the workflow's idempotency guard answers without moving twice."""
    from workflows.node_lifecycle import NodeLifecycle, TransitionRequest, TransitionResult

    handle = client.get_workflow_handle(node_workflow_id(node))
    req = TransitionRequest(trigger=trigger, actor=actor, actor_kind=actor_kind, cause=cause,
                            request_id=request_id or str(uuid.uuid4()), event=event)
    for _ in range(attempts):
        try:
            return await handle.execute_update(NodeLifecycle.transition, req, result_type=TransitionResult,
                                               rpc_timeout=rpc_timeout)
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            if not _retryable_timeout(exc):
                raise
        except WorkflowUpdateFailedError as exc:
            cause_exc = exc.cause
            message = getattr(cause_exc, "message", None) or str(cause_exc or exc)
            raise CommandRejected(message) from None
        except RPCError as exc:
            if "not found" in str(exc).lower() or "already completed" in str(exc).lower():
                raise CommandRejected(f"{node}: no lifecycle workflow is running (retired, or never imported)") from None
            raise TemporalUnavailable(f"Temporal error for {node}: {_one_line(exc)}") from None
    raise TemporalUnavailable(_no_answer(node, attempts))


def _no_answer(node: str, attempts: int) -> str:
    return (f"{node}: its workflow did not take the request after {attempts} tr{'ies' if attempts > 1 else 'y'} "
            "(workers busy or none running); run the command again")


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
    client: Client, node: str, kind: str, actor: str, suite: str, request_id: str | None = None,
    attempts: int = UPDATE_ATTEMPTS, rpc_timeout: timedelta | None = None,
) -> PhaseOutcome:
    """Ask a node's workflow to admit or recheck it. `request_id` names the request (one per
    command); the same request sent again (a retry, a resent command) is one update."""
    from workflows.node_lifecycle import NodeLifecycle, PhaseAccepted, PhaseRequest

    update = NodeLifecycle.admit if kind == "admit" else NodeLifecycle.recheck
    update_id = phase_update_id(kind, node, request_id or str(uuid.uuid4()))
    handle = client.get_workflow_handle(node_workflow_id(node))
    req = PhaseRequest(actor=actor, suite=suite, request_id=update_id)
    for attempt in range(1, attempts + 1):
        try:
            accepted = await handle.execute_update(update, req, id=update_id, result_type=PhaseAccepted,
                                                   rpc_timeout=rpc_timeout)
        except WorkflowUpdateRPCTimeoutOrCancelledError as exc:
            if not _retryable_timeout(exc):
                raise
            continue
        except WorkflowUpdateFailedError as exc:
            return PhaseOutcome(node, False, getattr(exc.cause, "message", None) or str(exc.cause or exc), attempt - 1)
        except RPCError as exc:
            return PhaseOutcome(node, False, f"{node}: {_one_line(exc)}", attempt - 1)
        where = f"{accepted.queued_behind} item(s) ahead" if accepted.queued_behind else "now"
        return PhaseOutcome(node, True, where, attempt - 1)
    return PhaseOutcome(node, False, _no_answer(node, attempts), attempts)


async def request_phase(client: Client, node: str, kind: str, actor: str, suite: str,
                        request_id: str | None = None) -> tuple[str, bool, str]:
    """Ask a node's workflow to admit or recheck it; (node, accepted, message)."""
    o = await phase_outcome(client, node, kind, actor, suite, request_id=request_id)
    return o.node, o.accepted, o.message


async def request_phases(
    client: Client, nodes: Sequence[str], kind: str, actor: str, suite: str, request_id: str | None = None,
    concurrency: int = CLIENT_CONCURRENCY, attempts: int = UPDATE_ATTEMPTS, rpc_timeout: timedelta | None = None,
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


async def send_health_events(client: Client, node: str, events: Sequence[HealthEventInput]) -> None:
    """Signals NodeLifecycle.health_event by name: importing the workflow would import the
    activity stack behind it, and this is the first step of the reaction to a critical event."""
    handle = client.get_workflow_handle(node_workflow_id(node))
    try:
        for ev in events:
            await handle.signal(HEALTH_EVENT_SIGNAL, ev)
    except RPCError as exc:
        raise CommandRejected(f"{node}: cannot deliver the event ({_one_line(exc)})") from None


@dataclass
class Outcome:
    node: str
    result: TransitionResult | None
    error: str | None


async def request_many(client: Client, nodes: Sequence[str], trigger: str, actor: str, cause: str = "") -> list[Outcome]:
    async def one(node: str) -> Outcome:
        try:
            return Outcome(node, await request_transition(client, node, trigger, actor, cause), None)
        except CommandRejected as exc:
            return Outcome(node, None, str(exc))

    return list(await asyncio.gather(*(one(n) for n in nodes)))
