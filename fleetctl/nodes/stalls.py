"""When a node's workflow is stalled, so that a node whose owner has stopped working reads
`Stalled`, never `Ready`. Pure: the question the watcher asks Temporal's visibility, and the
verdict on each workflow it answers with.

Two ways a node's workflow stops acting on its events, both seen from outside it:
- its workflow tasks keep failing (a payload it cannot decode, one too large to schedule, a
  bug): Temporal flags it in `TemporalReportedProblems` after a few in a row (server 1.28+,
  with `system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute` set; fleetctl's
  dev server sets it), and clears the flag when a task completes again;
- the oldest work queued on it has waited past the bound (`FleetctlQueuedSince`, which the
  workflow upserts when its oldest queued item changes, so a workflow that stopped leaves it
  standing): blocked behind its own long work, or by a worker that no longer polls.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from fleetctl.nodes.search_attributes import QUEUED_SINCE, REPORTED_PROBLEMS

_CAMEL = re.compile(r"(?<=[a-z])(?=[A-Z])")


@dataclass(frozen=True)
class Stall:
    node: str
    reason: str
    since: datetime


def stalled_query(workflow_type: str, task_queue: str, queued_before: datetime) -> str:
    """The visibility query for the running node workflows of one task queue that are stalled."""
    return (
        f"WorkflowType = '{workflow_type}' AND ExecutionStatus = 'Running' AND TaskQueue = '{task_queue}' AND "
        f"({REPORTED_PROBLEMS} IS NOT NULL OR {QUEUED_SINCE.name} < '{queued_before.isoformat()}')"
    )


def judge_stall(
    node: str, problems: Sequence[str], queued_since: datetime | None, now: datetime, stall_after_s: float
) -> Stall | None:
    """The node's stall, or None: failing workflow tasks first (they stop everything), then
    queued work past `stall_after_s` (the setting: far beyond what an item waits behind
    another on a node that works). `problems` are Temporal's `key=value` words."""
    if problems:
        words = dict(p.partition("=")[::2] for p in problems)
        # cause=WorkflowTaskFailedCauseWorkflowWorkerUnhandledFailure -> "workflow worker unhandled failure"
        cause = _CAMEL.sub(" ", words.get("cause", "").removeprefix("WorkflowTaskFailedCause")).lower().strip()
        what = words.get("category", "WorkflowTaskFailed")
        reason = "workflow tasks failing" if what == "WorkflowTaskFailed" else "workflow tasks timing out"
        return Stall(
            node,
            f"{reason}{f': {cause}' if cause else ''} (Temporal: {', '.join(sorted(problems))})",
            queued_since or now,
        )
    if queued_since is not None and now - queued_since >= timedelta(seconds=stall_after_s):
        waited = int((now - queued_since).total_seconds())
        return Stall(node, f"work queued {waited} s ago is still waiting (bound {stall_after_s:g} s)", queued_since)
    return None
