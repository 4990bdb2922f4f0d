"""The client side: connect to Temporal, start node workflows, send them commands."""

from __future__ import annotations

import asyncio
import uuid
from dataclasses import dataclass
from typing import Iterable, Sequence

from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.common import WorkflowIDConflictPolicy, WorkflowIDReusePolicy
from temporalio.service import RPCError

from fleetctl.capacity import CheckErrorReport, GuardPolicy, RemovalDecision, RemovalRequest
from fleetctl.config import Settings
from workflows.capacity_guard import CapacityGuard, CapacityGuardState, ResumeAutomation, guard_id
from workflows.node_activities import HealthEventInput
from workflows.node_lifecycle import (
    NodeLifecycle,
    NodeLifecycleState,
    PhaseAccepted,
    PhaseRequest,
    TransitionRequest,
    TransitionResult,
    workflow_id_for,
)


class TemporalUnavailable(RuntimeError):
    pass


class CommandRejected(RuntimeError):
    """The node's workflow refused the command (an illegal transition, say)."""


async def connect(settings: Settings, timeout_s: float = 5.0) -> Client:
    try:
        return await asyncio.wait_for(
            Client.connect(settings.temporal_address, namespace=settings.temporal_namespace), timeout_s
        )
    except (RuntimeError, asyncio.TimeoutError, OSError) as exc:
        raise TemporalUnavailable(
            f"cannot reach Temporal at {settings.temporal_address} ({_one_line(exc)}); "
            "start one with `fleetctl dev server` or set TEMPORAL_ADDRESS"
        ) from None


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else exc.__class__.__name__


async def ensure_node_workflows(
    client: Client, settings: Settings, nodes: Iterable[tuple[str, str, int]], concurrency: int = 50,
    on_started=None,
) -> int:
    """Start NodeLifecycle for each (name, state, version) that has none running. Idempotent."""
    sem = asyncio.Semaphore(concurrency)

    async def start(name: str, state: str, version: int) -> None:
        async with sem:
            await client.start_workflow(
                NodeLifecycle.run,
                NodeLifecycleState(node=name, state=state, state_version=version),
                id=workflow_id_for(name),
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
    return GuardPolicy(settings.guard_max_unavailable_fleet, settings.guard_max_unavailable_rack,
                       settings.guard_storm_fraction, settings.guard_storm_window_s)


async def ensure_capacity_guard(client: Client, settings: Settings):
    return await client.start_workflow(
        CapacityGuard.run, CapacityGuardState(fleet=settings.fleet, policy=guard_policy(settings)), id=guard_id(settings.fleet),
        task_queue=settings.task_queue, id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        id_reuse_policy=WorkflowIDReusePolicy.ALLOW_DUPLICATE,
    )


async def ask_capacity_guard(client: Client, settings: Settings, req: RemovalRequest) -> RemovalDecision:
    handle = await ensure_capacity_guard(client, settings)
    return await handle.execute_update(CapacityGuard.request_removal, req, result_type=RemovalDecision)


async def guard_status(client: Client, settings: Settings) -> CapacityGuardState:
    handle = await ensure_capacity_guard(client, settings)
    return await handle.query(CapacityGuard.status, result_type=CapacityGuardState)


async def report_check_errors(client: Client, settings: Settings, report: CheckErrorReport) -> CapacityGuardState:
    handle = await ensure_capacity_guard(client, settings)
    return await handle.execute_update(CapacityGuard.report_check_errors, report, result_type=CapacityGuardState)


async def resume_automation(client: Client, settings: Settings, actor: str) -> CapacityGuardState:
    handle = await ensure_capacity_guard(client, settings)
    return await handle.execute_update(CapacityGuard.resume_automation, ResumeAutomation(actor), result_type=CapacityGuardState)


async def request_transition(
    client: Client, node: str, trigger: str, actor: str, cause: str = "", actor_kind: str = "operator",
    request_id: str | None = None, event: dict | None = None,
) -> TransitionResult:
    handle = client.get_workflow_handle(workflow_id_for(node))
    req = TransitionRequest(trigger=trigger, actor=actor, actor_kind=actor_kind, cause=cause,
                            request_id=request_id or str(uuid.uuid4()), event=event)
    try:
        return await handle.execute_update(NodeLifecycle.transition, req, result_type=TransitionResult)
    except WorkflowUpdateFailedError as exc:
        cause_exc = exc.cause
        message = getattr(cause_exc, "message", None) or str(cause_exc or exc)
        raise CommandRejected(message) from None
    except RPCError as exc:
        if "not found" in str(exc).lower() or "already completed" in str(exc).lower():
            raise CommandRejected(f"{node}: no lifecycle workflow is running (retired, or never imported)") from None
        raise TemporalUnavailable(f"Temporal error for {node}: {_one_line(exc)}") from None


async def request_phase(client: Client, node: str, kind: str, actor: str, suite: str) -> tuple[str, bool, str]:
    """Ask a node's workflow to admit or recheck it; (node, accepted, message)."""
    handle = client.get_workflow_handle(workflow_id_for(node))
    update = NodeLifecycle.admit if kind == "admit" else NodeLifecycle.recheck
    try:
        accepted = await handle.execute_update(update, PhaseRequest(actor=actor, suite=suite, request_id=str(uuid.uuid4())),
                                               result_type=PhaseAccepted)
    except WorkflowUpdateFailedError as exc:
        return node, False, getattr(exc.cause, "message", None) or str(exc.cause or exc)
    except RPCError as exc:
        return node, False, f"{node}: {_one_line(exc)}"
    return node, True, f"{accepted.queued_behind} item(s) ahead" if accepted.queued_behind else "now"


async def send_health_events(client: Client, node: str, events: Sequence[HealthEventInput]) -> None:
    handle = client.get_workflow_handle(workflow_id_for(node))
    try:
        for ev in events:
            await handle.signal(NodeLifecycle.health_event, ev)
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
