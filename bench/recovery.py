"""What a dead worker costs, derived from what the workflows configured: never guessed.

A SIGKILLed worker says nothing. Temporal learns that an activity attempt died with it only
when the attempt times out (its heartbeat timeout when it has one, else its start-to-close
timeout); the next attempt then waits its retry policy's first backoff. A workflow task on
the dead worker's sticky queue moves to the shared queue after the worker's sticky
schedule-to-start timeout, and one it held times out after the workflow task timeout.

`kill_cost(client, task_queue)`, called right after a kill, reads all of that from the
histories of the workflows that were running (the activities scheduled and not closed: where
the kill landed) and from the worker's own settings. A test waits `cost.bound_s(...)` for
what must happen after the restart; a bench reports where its kills landed.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass

from temporalio.api.enums.v1 import EventType, PendingActivityState, TaskQueueKind, TimeoutType
from temporalio.client import Client
from temporalio.worker import Worker

_CLOSED = {
    EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED: "activity_task_completed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED: "activity_task_failed_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT: "activity_task_timed_out_event_attributes",
    EventType.EVENT_TYPE_ACTIVITY_TASK_CANCELED: "activity_task_canceled_event_attributes",
}
# fleetctl's worker (workflows/worker.py) keeps the SDK's default.
STICKY_SCHEDULE_TO_START_S = (
    inspect.signature(Worker.__init__).parameters["sticky_queue_schedule_to_start_timeout"].default.total_seconds()
)


@dataclass(frozen=True)
class InFlight:
    """An activity scheduled and not closed when the worker died."""

    workflow_id: str
    activity: str
    # When Temporal gives up on the dead attempt: its heartbeat timeout, else its start-to-close;
    # 0 when no worker had taken it yet.
    lost_after_s: float
    retry_after_s: float  # the retry policy's first backoff

    def __str__(self) -> str:
        return f"{self.activity} in {self.workflow_id} ({self.lost_after_s:g} s + {self.retry_after_s:g} s)"


@dataclass(frozen=True)
class KillCost:
    in_flight: tuple[InFlight, ...]
    workflow_task_timeout_s: float  # the longest of the running workflows'

    @property
    def seconds(self) -> float:
        """The longest a kill can hold up the workflows that were running: the slowest dead
        attempt to be given up and retried, then a workflow task to find a live worker."""
        activity_s = max((a.lost_after_s + a.retry_after_s for a in self.in_flight), default=0.0)
        return activity_s + STICKY_SCHEDULE_TO_START_S + self.workflow_task_timeout_s

    def bound_s(self, step_s: float) -> float:
        """How long to wait after the worker is back for what one step of work then does,
        `step_s` being the workflows' own bound on that step (its start-to-close timeout)."""
        return self.seconds + step_s

    def landed_in(self) -> str:
        return ", ".join(map(str, self.in_flight)) or "no activity (between activities)"


async def kill_cost(client: Client, task_queue: str) -> KillCost:
    in_flight: list[InFlight] = []
    task_timeout_s = 0.0
    async for execution in client.list_workflows(f"TaskQueue = '{task_queue}' AND ExecutionStatus = 'Running'"):
        handle = client.get_workflow_handle(execution.id, run_id=execution.run_id)
        history = await handle.fetch_history()
        scheduled, closed = {}, set()
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
                started = event.workflow_execution_started_event_attributes
                task_timeout_s = max(task_timeout_s, started.workflow_task_timeout.ToTimedelta().total_seconds())
            elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                scheduled[event.event_id] = event.activity_task_scheduled_event_attributes
            elif event.event_type in _CLOSED:
                closed.add(getattr(event, _CLOSED[event.event_type]).scheduled_event_id)
        # Only an attempt a worker took can die with it; one still queued goes to the next worker.
        taken = {
            p.activity_id
            for p in (await handle.describe()).raw_description.pending_activities
            if p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        }
        for event_id, attrs in scheduled.items():
            if event_id in closed:
                continue
            heartbeat_s = attrs.heartbeat_timeout.ToTimedelta().total_seconds()
            lost_after_s = heartbeat_s or attrs.start_to_close_timeout.ToTimedelta().total_seconds()
            in_flight.append(
                InFlight(
                    execution.id,
                    attrs.activity_type.name,
                    lost_after_s if attrs.activity_id in taken else 0.0,
                    attrs.retry_policy.initial_interval.ToTimedelta().total_seconds(),
                )
            )
    return KillCost(tuple(in_flight), task_timeout_s)


async def activity_started(client: Client, workflow_id: str, activity: str) -> bool:
    """The workflow has `activity` running on a worker now (where a kill is meant to land)."""
    description = await client.get_workflow_handle(workflow_id).describe()
    return any(
        p.activity_type.name == activity and p.state == PendingActivityState.PENDING_ACTIVITY_STATE_STARTED
        for p in description.raw_description.pending_activities
    )


@dataclass(frozen=True)
class Wait:
    """Something the workflows waited on after a kill, read back from their histories once
    they had recovered: a timeout that fired, or a workflow task that sat unclaimed."""

    workflow_id: str
    what: str  # "run_check start-to-close timeout", "workflow task on the sticky queue", ...
    after_kill_s: float  # when the wait ended, from the kill
    lasted_s: float

    def __str__(self) -> str:
        return (
            f"{self.what} in {self.workflow_id}: {self.lasted_s:.1f} s, ended {self.after_kill_s:.1f} s after the kill"
        )


_TIMEOUT_NAMES = {
    TimeoutType.TIMEOUT_TYPE_START_TO_CLOSE: "start-to-close",
    TimeoutType.TIMEOUT_TYPE_HEARTBEAT: "heartbeat",
    TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_START: "schedule-to-start",
    TimeoutType.TIMEOUT_TYPE_SCHEDULE_TO_CLOSE: "schedule-to-close",
}


async def waits_after_kill(client: Client, task_queue: str, killed_at: float, longer_than_s: float = 1.0) -> list[Wait]:
    """What the workflows on `task_queue` waited on after a kill at `killed_at` (time.time()):
    each activity or workflow task timeout that fired after it, and each workflow task that
    waited longer than `longer_than_s` for a worker to take it (on the dead worker's sticky
    queue until the server gave up on it, or on the shared queue until a worker polled)."""
    waits: list[Wait] = []
    async for execution in client.list_workflows(f"TaskQueue = '{task_queue}'"):
        history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
        by_id = {event.event_id: event for event in history.events}
        for event in history.events:
            at = event.event_time.ToDatetime().timestamp()
            if at < killed_at:
                continue
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
                attrs = event.activity_task_timed_out_event_attributes
                scheduled = by_id[attrs.scheduled_event_id].activity_task_scheduled_event_attributes
                kind = _TIMEOUT_NAMES.get(attrs.failure.timeout_failure_info.timeout_type, "unknown")
                began = by_id[attrs.started_event_id].event_time.ToDatetime().timestamp()
                waits.append(
                    Wait(execution.id, f"{scheduled.activity_type.name} {kind} timeout", at - killed_at, at - began)
                )
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
                attrs = event.workflow_task_timed_out_event_attributes
                kind = _TIMEOUT_NAMES.get(attrs.timeout_type, "unknown")
                began = by_id[attrs.scheduled_event_id].event_time.ToDatetime().timestamp()
                waits.append(Wait(execution.id, f"workflow task {kind} timeout", at - killed_at, at - began))
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
                scheduled = by_id[event.workflow_task_started_event_attributes.scheduled_event_id]
                waited = at - scheduled.event_time.ToDatetime().timestamp()
                if waited > longer_than_s:
                    queue = scheduled.workflow_task_scheduled_event_attributes.task_queue
                    where = "sticky" if queue.kind == TaskQueueKind.TASK_QUEUE_KIND_STICKY else "shared"
                    waits.append(
                        Wait(execution.id, f"workflow task unclaimed on the {where} queue", at - killed_at, waited)
                    )
    return sorted(waits, key=lambda w: w.after_kill_s)
