"""A node's run stays within Temporal's bounds whatever its senders send: repeated minor events
are queued once with their count, the run continues as new before its signal budget is spent
even while a drain waits for its job (the wait carried), `current` answers a bounded summary,
and a work item of a kind no branch handles cannot be made."""

from __future__ import annotations

import ast
import asyncio
from pathlib import Path

import pytest
from temporalio.api.enums.v1 import EventType, WorkflowTaskFailedCause

from fleetctl.workflows.api import HealthEventInput, WorkItem, WorkKind
from fleetctl.workflows.definitions.health_queue import QUEUED_MINOR_EVENTS
from fleetctl.workflows.definitions.node_lifecycle import WORK_SHOWN, NodeLifecycle
from tests.workflows.conftest import DECISION_S
from tests.workflows.fakes import World
from tests.workflows.test_node_lifecycle_decisions import MINOR, XID79

pytestmark = pytest.mark.temporal


async def _signal(node, code: int, event_id: str, severity: str = "", at: float = 0.0) -> None:
    await node.handle.signal(
        NodeLifecycle.health_event,
        HealthEventInput(node.node, "xid", code, "test", "tester", event_id, at, severity=severity),
    )


async def test_repeats_of_a_minor_event_are_queued_once_with_their_count_and_critical_ones_never(lifecycle) -> None:
    held = asyncio.Event()
    node = await lifecycle(world=World(verdicts={13: MINOR, 79: XID79}, records_held=held))
    await node.event(13, "first")
    await node.until(lambda: node.fakes.asked("record_health_events"))  # being recorded, held
    now = 1_700_000_000.0
    for i in range(40):
        await _signal(node, 13, f"minor-{i}", "info", at=now + i)
    for name in ("e-79a", "e-79b"):
        await node.event(79, name, severity="critical")
    queued = await node.handle.query(NodeLifecycle.current)
    assert [w.event.event_id for w in queued.work] == ["minor-0", "e-79a", "e-79b"]
    held.set()
    await node.settled()
    batches = [b.events for b in node.fakes.asked("record_health_events")]
    assert [[e.event_id for e in b] for b in batches] == [["first"], ["e-79a", "e-79b"], ["minor-0"]]
    (folded,) = batches[2]
    # The workflow believes a sender's clock only near its own: the test's times are the receive times.
    assert folded.repeat_count == 40 and folded.first_seen <= folded.last_seen and folded.last_seen > 0


async def test_a_drain_waiting_for_its_job_is_carried_into_the_next_run_and_an_xid79_there_restarts_the_job(
    lifecycle,
) -> None:
    # A poll far longer than a decision: the run must continue as new within its wait, not at its end.
    node = await lifecycle(
        world=World(verdicts={13: MINOR, 79: XID79}, jobs=["job-1"]),
        signals_per_run=10,
        drain_job_poll_s=10 * DECISION_S,
    )
    await node.transition("drain")
    await node.until(lambda: node.fakes.asked("running_jobs_on"))
    first_run = (await node.handle.describe()).run_id
    for i in range(15):  # distinct codes: none folds, every one counts toward the run's signals
        await _signal(node, 100 + i, f"minor-{i}", "info")

    async def next_run() -> None:
        while (await node.handle.describe()).run_id == first_run:
            await asyncio.sleep(0.05)

    await asyncio.wait_for(next_run(), DECISION_S)
    carried = await node.handle.query(NodeLifecycle.current)
    assert carried.state == "draining"
    assert carried.activity.startswith("draining") or carried.work[0].kind is WorkKind.DRAIN_FOLLOWUP
    await node.event(79, "e-79", severity="critical")
    await node.until(lambda: "drain_complete" in node.fakes.triggers())
    restart = await node.job_restart("job-1", f"{node.node}-v2")
    assert restart.bad_nodes == [node.node]


async def test_current_answers_the_first_items_of_the_queue_and_their_count(lifecycle) -> None:
    held = asyncio.Event()
    node = await lifecycle(world=World(verdict=MINOR, records_held=held))
    await node.event(13, "first")
    await node.until(lambda: node.fakes.asked("record_health_events"))
    for i in range(WORK_SHOWN + 10):
        await _signal(node, 100 + i, f"minor-{i}", "info")
    s = await node.handle.query(NodeLifecycle.current)
    assert len(s.work) == WORK_SHOWN and s.work_total == WORK_SHOWN + 10
    held.set()
    await node.settled()


# Senders at once in the burst below: an agent's and an intake's deliveries and the tests'
# own client, all on the worker's event loop, outpace the node's workflow tasks.
BURST_SENDERS, BURST = 50, 1_500


async def test_a_burst_faster_than_the_nodes_workflow_tasks_fails_none_of_them(lifecycle) -> None:
    """Temporal buffers the signals that arrive while a workflow task runs, by default at most
    100, and fails the task past that (FORCE_CLOSE_COMMAND): the worker then replays the whole
    run, longer with every signal, so a storm failed every task after it and the node took no
    event, an XID 79 included. The dev server (and deploy/temporal) buffers up to
    MAX_BUFFERED_EVENTS (fleetctl.connections.temporal_server)."""
    held = asyncio.Event()
    node = await lifecycle(world=World(verdicts={13: MINOR, 79: XID79}, records_held=held))
    first_run = (await node.handle.describe()).run_id
    await node.event(13, "first")
    await node.until(lambda: node.fakes.asked("record_health_events"))  # the run waits on an activity

    async def sender(part: int) -> None:
        for i in range(part, BURST, BURST_SENDERS):
            await _signal(node, 13, f"minor-{i}", "info")

    await asyncio.gather(*(sender(p) for p in range(BURST_SENDERS)))
    await node.event(79, "e-79", severity="critical")
    held.set()
    await node.settled()
    history = await node.client.get_workflow_handle(node.handle.id, run_id=first_run).fetch_history()
    failed = [
        e.workflow_task_failed_event_attributes.cause
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED
    ]
    assert WorkflowTaskFailedCause.WORKFLOW_TASK_FAILED_CAUSE_FORCE_CLOSE_COMMAND not in failed, failed
    assert "drain" in node.fakes.triggers()


async def test_minor_events_past_the_queue_bound_are_dropped_and_counted_a_critical_one_never(lifecycle) -> None:
    held = asyncio.Event()
    node = await lifecycle(world=World(verdict=MINOR, verdicts={79: XID79}, records_held=held))
    await node.event(13, "first")
    await node.until(lambda: node.fakes.asked("record_health_events"))
    for i in range(QUEUED_MINOR_EVENTS + 3):
        await _signal(node, 100 + i, f"minor-{i}", "info")
    await node.event(79, "e-79", severity="critical")
    s = await node.handle.query(NodeLifecycle.current)
    assert s.minor_events_dropped == 3 and s.work_total == QUEUED_MINOR_EVENTS + 1
    held.set()
    await node.settled()
    assert "drain" in node.fakes.triggers()


def test_a_work_item_of_a_kind_no_branch_handles_cannot_be_made() -> None:
    with pytest.raises(ValueError):
        WorkItem("health-event")  # type: ignore[arg-type]
    assert WorkItem("drain_followup").kind is WorkKind.DRAIN_FOLLOWUP  # a recorded payload's word decodes


def test_every_work_kind_has_its_branch_in_perform() -> None:
    source = Path(NodeLifecycle.__module__.replace(".", "/") + ".py")
    tree = ast.parse((Path(__file__).resolve().parents[2] / source).read_text())
    perform = next(n for n in ast.walk(tree) if isinstance(n, ast.AsyncFunctionDef) and n.name == "_perform")
    cases = {
        c.pattern.value.attr
        for m in ast.walk(perform)
        if isinstance(m, ast.Match)
        for c in m.cases
        if isinstance(c.pattern, ast.MatchValue)
    }
    assert cases == set(WorkKind.__members__)
