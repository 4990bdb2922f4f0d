"""What a node's workflow asks of its scheduler besides the cordon and the resume: moving a
cordoned node's pods off it by the drain policy, and saying the node's lifecycle state on
the scheduler's own node object.

Helpers of NodeLifecycle (they read and write its state), kept apart so that the lifecycle's
module stays small; NodeLifecycle calls each behind its own `workflow.patched` id
(drain-moves-pods, report-scheduler-state). A scheduler that places no pods, or has no node
object to label (Slurm, the simulator), answers with nothing to do.
"""

from __future__ import annotations

from temporalio import workflow
from temporalio.exceptions import ActivityError

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.lifecycle import NodeState
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.api import (
        AutomationRecord,
        NodeLifecycleState,
        PodDrainOutcome,
        PodDrainRequest,
        SchedulerStateReport,
    )
    from fleetctl.workflows.definitions.shared import POD_DRAIN_ROUND, SCHEDULER_ROUND, record_automation

# The drain sets `draining` and the resume `production` on the scheduler's node themselves.
SAID_BY_PLACEMENT = frozenset({NodeState.DRAINING.value, NodeState.PRODUCTION.value})
# Pods named in the node's last outcome; the rest are counted.
PODS_NAMED = 5


def pod_progress(outcome: PodDrainOutcome, deadline_passed: bool) -> str:
    """One line for the node's last outcome: what the round moved, and what holds the drain
    open and why (a disruption budget's refusal names the budget)."""
    parts = []
    if outcome.evicted:
        parts.append(f"evicted {_pods(outcome.evicted)}")
    if outcome.deleted:
        parts.append(f"deleted after the drain deadline {_pods(outcome.deleted)}")
    if outcome.holding:
        held = "left on the node at the drain deadline" if deadline_passed else "holding the drain"
        parts.append(f"{held} {_pods(outcome.holding)}")
    return "draining pods: " + ("; ".join(parts) if parts else "none left to move")


def _pods(items: list[str]) -> str:
    shown = "; ".join(items[:PODS_NAMED])
    more = len(items) - PODS_NAMED
    return f"{len(items)} pod(s): {shown}" + (f"; and {more} more" if more > 0 else "")


async def move_pods(s: NodeLifecycleState, deadline_passed: bool) -> bool:
    """One round of moving the node's pods off it; True while pods hold the drain open. The
    round's progress becomes the node's last outcome, so an operator sees why a drain holds.
    A round the scheduler could not do holds the drain too (never read as "no pods left"),
    and is recorded where fleet status shows it."""
    try:
        outcome: PodDrainOutcome = await workflow.execute_activity_method(
            NodeActivities.drain_pods_on, PodDrainRequest(s.node, deadline_passed=deadline_passed), **POD_DRAIN_ROUND
        )
    except ActivityError as exc:
        message = f"cannot move the node's pods: {exc.cause or exc}"
        s.last_outcome = f"draining pods: {message}"
        await _record_scheduler_error(s, message, f"pods/{workflow.now().timestamp()}")
        return True
    if outcome.evicted or outcome.deleted or outcome.holding:
        s.last_outcome = pod_progress(outcome, deadline_passed)
    return bool(outcome.holding)


async def report_state(s: NodeLifecycleState, cause: str) -> None:
    """Show the node's state now in its scheduler (the state it is in when this runs: a report
    queued behind later transitions says the latest). A scheduler that cannot be told is
    recorded and the node's work goes on: placement does not depend on it."""
    if s.state in SAID_BY_PLACEMENT:
        return
    try:
        await workflow.execute_activity_method(
            NodeActivities.report_state, SchedulerStateReport(s.node, s.state, cause), **SCHEDULER_ROUND
        )
    except ActivityError as exc:
        await _record_scheduler_error(s, f"show the node as {s.state}: {exc.cause or exc}", f"report@{s.state_version}")


async def _record_scheduler_error(s: NodeLifecycleState, message: str, what: str) -> None:
    await record_automation(
        AutomationRecord(
            kind="scheduler_error",
            reason=message,
            actor="lifecycle",
            node=s.node,
            key=f"{workflow.info().workflow_id}/{what}",
        )
    )
