"""What a workflow's history says it ran."""

from __future__ import annotations

import json

from temporalio.client import WorkflowHistory

# What temporalio records for a local activity: a marker of this name whose `data` payload
# names the activity's type.
LOCAL_ACTIVITY_MARKER = "core_local_activity"


def activity_steps(history: WorkflowHistory) -> list[tuple[str, bool]]:
    """Each activity the history ran, in order, as (type, local): scheduled on a task queue
    (False) or run in the worker as a local activity (True, its marker)."""
    steps = []
    for event in history.events:
        if event.HasField("marker_recorded_event_attributes"):
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == LOCAL_ACTIVITY_MARKER:
                steps.append((json.loads(marker.details["data"].payloads[0].data)["activity_type"], True))
        elif event.HasField("activity_task_scheduled_event_attributes"):
            steps.append((event.activity_task_scheduled_event_attributes.activity_type.name, False))
    return steps
