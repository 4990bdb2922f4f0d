"""ActiveCheckSweep: started by a Temporal Schedule, it checks idle production nodes a few
at a time and drains (through the capacity guard) the ones that fail, or that pass but fall
well below their peers of the same profile (stragglers). A node whose check
could not run (`error`) is left alone and checked again on the next sweep, unless no check
has reached it for several sweeps in a row, or its agent has fallen silent
(fleetctl.nodes.reachability): then it is suspect and drained through the guard too; the sweep's
errors and silent agents go to the guard, which opens the breaker when they are a storm.

Each node is held in its scheduler for its checks (patch fence-checks): drained with
fleetctl's reason `fleetctl: active check <suite>`, then read idle once more; a job that
landed since the idleness read makes its check `skipped` (the hold lifted, the node back in
service), and a node that passes is released. Holds are not asked of the capacity guard: the
sweep's width (max_concurrent, max_concurrent_fraction) bounds how many are held at once, and a
held node is idle, so no work is displaced (docs/concepts.md, "The node's hold")."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from fleetctl.checks.stragglers import PEER_JUDGED_CHECKS
    from fleetctl.nodes.capacity import AGENT_SILENCE, CheckErrorReport, RemovalRequest
    from fleetctl.nodes.lifecycle import Actor
    from fleetctl.nodes.reachability import UNREACHABLE
    from fleetctl.remediation.events import Event, EventKind
    from fleetctl.schedulers.base import check_hold_reason
    from fleetctl.workflows.activities.checks import CheckActivities
    from fleetctl.workflows.activities.guard import GuardActivities
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.api import (
        AgentSilence,
        CheckRequest,
        NodeFacts,
        PeerVerdict,
        ReachabilityVerdict,
        SchedulerHold,
        SweepBatch,
        SweepInput,
        SweepResult,
        SweepScope,
        TransitionRequest,
        bulk_queue,
    )
    from fleetctl.workflows.definitions.shared import (
        MESSAGE,
        QUICK,
        SCHEDULER,
        bulk,
        guarded_drain,
        hold_for_check,
        hold_nvlink_domain,
        release_hold,
        removals_for,
        run_check,
    )


@workflow.defn
class ActiveCheckSweep:
    @workflow.run
    async def run(self, req: SweepInput) -> SweepResult:
        scope = SweepScope(fleet=req.fleet, suite=req.suite)
        checks = await workflow.execute_activity_method(CheckActivities.suite_checks, scope, **QUICK)
        nodes = await workflow.execute_activity_method(NodeActivities.idle_production_nodes, scope, **bulk(SCHEDULER))
        width = req.max_concurrent or max(1, math.ceil(len(nodes) * req.max_concurrent_fraction))
        result = SweepResult()
        sweep_id = workflow.info().workflow_id + "/" + workflow.info().run_id
        workflow.deprecate_patch("sweep-batches")
        # A node costs ~19 history events (its hold and release, fence-checks, add two
        # activities: up to 12 more); one history for all of them would hit Temporal's
        # limit near 2,800 nodes (near 1,650 held). Batches run one after another, so
        # `width` still bounds the nodes checked at once. Each batch runs in the bulk lane
        # (workflows.worker), its workflow tasks and activities on slots of their own.
        size = max(1, req.batch_nodes)
        for start in range(0, len(nodes), size):
            part: SweepResult = await workflow.execute_child_workflow(
                ActiveCheckBatch.run,
                SweepBatch(nodes[start : start + size], checks, req, sweep_id, width),
                id=f"{workflow.info().workflow_id}/batch-{start // size}",
                task_queue=bulk_queue(workflow.info().task_queue),
            )
            result.merge(part)
        # Errors drain nobody, but many at once are the checker's fault, not the nodes': the
        # guard decides whether they amount to a storm.
        if result.errors:
            workflow.deprecate_patch("report-check-errors")
            await workflow.execute_activity_method(
                GuardActivities.report_check_errors,
                CheckErrorReport(sorted(result.errors), result.checked, req.actor, sweep_id),
                **MESSAGE,
            )
        # A node unreachable sweep after sweep is suspect, and drained through the guard:
        # asked after the errors were reported, so a partition or a checker outage that
        # makes many nodes unreachable at once has opened the breaker first.
        if result.unreachable:
            workflow.deprecate_patch("unreachable-suspect")
            for node in sorted(result.unreachable):
                await drain_if_suspect(node, req, f"{sweep_id}/{node}", result)
        # A node whose agent fell silent is suspect the same way, busy or idle.
        workflow.deprecate_patch("agent-silence")
        await drain_silent_agents(scope, req, sweep_id, result)
        return result


async def check_nodes(
    nodes: list[str], checks: list[str], req: SweepInput, sweep_id: str, width: int, result: SweepResult
) -> None:
    gate = asyncio.Semaphore(width)

    async def one(node: str) -> None:
        async with gate:
            await check_node(node, checks, req, f"{sweep_id}/{node}", result)

    await asyncio.gather(*(one(n) for n in nodes))


@workflow.defn
class ActiveCheckBatch:
    """Part of a sweep: its own history, so a sweep's size is not bounded by one history."""

    @workflow.run
    async def run(self, batch: SweepBatch) -> SweepResult:
        result = SweepResult()
        await check_nodes(batch.nodes, batch.checks, batch.req, batch.sweep_id, batch.width, result)
        return result


async def check_node(node: str, checks: list[str], req: SweepInput, key: str, result: SweepResult) -> None:
    if not workflow.patched("fence-checks"):
        await check_held_node(node, checks, req, key, result)
        return
    hold = SchedulerHold(node, check_hold_reason(req.suite))
    if await hold_for_check(hold, req.actor, key):
        result.skipped.append(node)
        return
    await check_held_node(node, checks, req, key, result)
    # A node drained for its failure keeps the drain (release_hold lifts only this hold, on a
    # node still in production); one whose drain the guard held goes back to service.
    await release_hold(hold, req.actor, key)


async def check_held_node(node: str, checks: list[str], req: SweepInput, key: str, result: SweepResult) -> None:
    result.checked += 1
    for index, check in enumerate(checks):
        outcome = await run_check(CheckRequest(node, check, req.suite, f"{key}/{index}"))
        if outcome.status == "error":
            result.errors.append(node)
            if outcome.error_kind == UNREACHABLE:
                result.unreachable.append(node)
            return
        if outcome.status == "fail":
            result.failed.append(node)
            await drain_failed_node(
                node,
                f"active check {req.suite}: {check}: {outcome.reason}",
                req,
                key,
                result,
                Event(EventKind.CHECK, check=check, status="fail", message=outcome.reason).to_dict(),
                check=check,
            )
            return
        # Within the profile's floors, but well below the same profile's nodes: a straggler
        # (a link at half rate, a GPU at lower clocks), drained like a failure.
        if check in PEER_JUDGED_CHECKS:
            workflow.deprecate_patch("sweep-peer-stragglers")
            peers: PeerVerdict = await workflow.execute_activity_method(
                CheckActivities.judge_against_peers, outcome, **QUICK
            )
            if peers.straggler:
                result.failed.append(node)
                await drain_failed_node(
                    node,
                    f"active check {req.suite}: {check}: {peers.reason}",
                    req,
                    key,
                    result,
                    Event(
                        EventKind.CHECK, check=check, status="fail", message=peers.reason, against_peers=True
                    ).to_dict(),
                )
                return
    result.passed += 1


async def drain_if_suspect(node: str, req: SweepInput, key: str, result: SweepResult) -> None:
    verdict: ReachabilityVerdict = await workflow.execute_activity_method(
        NodeActivities.judge_reachability, node, **QUICK
    )
    if verdict.suspect:
        cause = f"suspect: {verdict.reason}"
        await drain_failed_node(node, cause, req, key, result, {"kind": "manual", "message": cause})


async def drain_silent_agents(scope: SweepScope, req: SweepInput, sweep_id: str, result: SweepResult) -> None:
    """The path of the unreachable: the silent are reported to the guard first (out of the
    nodes with an agent, so that many falling silent at once open the breaker: an intake or
    network outage, not many bad nodes), then each is drained through it."""
    silence: AgentSilence = await workflow.execute_activity_method(
        NodeActivities.judge_agent_silence, scope, **bulk(QUICK)
    )
    if not silence.silent:
        return
    silent = [v.node for v in silence.silent]
    result.silent.extend(silent)
    await workflow.execute_activity_method(
        GuardActivities.report_check_errors,
        CheckErrorReport(
            silent,
            silence.with_agent,
            req.actor,
            f"{sweep_id}/agent-silence",
            AGENT_SILENCE,
            count=silence.silent_total,
        ),
        **MESSAGE,
    )
    for verdict in silence.silent:
        if verdict.node in result.drained or verdict.node in result.held:
            continue  # already asked about in this sweep (unreachable too): asked once
        cause = f"suspect: {verdict.reason}"
        await drain_failed_node(
            verdict.node,
            cause,
            req,
            f"{sweep_id}/{verdict.node}/agent-silence",
            result,
            {"kind": "manual", "message": cause},
        )


async def drain_failed_node(
    node: str, cause: str, req: SweepInput, key: str, result: SweepResult, event: dict[str, Any], check: str = ""
) -> None:
    """Drain `node` for its failure through the guard; a failed `check` of an NVLink domain's
    fabric asks for the whole domain at once and drains the domain's other nodes with it."""
    facts: NodeFacts = await workflow.execute_activity_method(NodeActivities.node_facts, node, **QUICK)
    removals = await removals_for(
        RemovalRequest(node=node, rack=facts.rack, reason=cause, actor=req.actor, request_id=key), check=check
    )
    if not removals:
        return  # already out: held with its domain by another node's request for the same fault
    decision, outcome = await guarded_drain(
        removals[0],
        TransitionRequest(
            node=node,
            trigger="drain",
            actor=req.actor,
            actor_kind=Actor.AUTOMATION.value,
            cause=cause,
            request_id=f"{key}/drain",
            event=event,
        ),
    )
    (result.drained if outcome is not None and outcome.accepted else result.held).append(node)
    if decision.granted:
        for held in await hold_nvlink_domain(removals, decision, cause, key):
            (result.drained if held.accepted else result.held).append(held.node)
