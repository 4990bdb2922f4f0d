"""NodeLifecycle on the session's dev server, on a task queue of the test's own, with every
activity it calls replaced by name (tests/workflows/fakes.py)."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass

import pytest_asyncio
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError, RPCStatusCode
from temporalio.worker import Worker

from fleetctl.workflows.api import (
    HealthEventInput,
    JobRestartInput,
    NodeLifecycleState,
    PhaseRequest,
    TransitionRequest,
    TransitionResult,
    bulk_queue,
    job_restart_id,
    node_workflow_id,
)
from fleetctl.workflows.converter import DATA_CONVERTER
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import QUICK
from tests.workflows.children import FakeJobRestart
from tests.workflows.fakes import FakeActivities, World

# One decision is a handful of activities, each bounded by QUICK's start-to-close: a
# decision not taken within that many bounds is not coming.
DECISION_S = 5 * QUICK["start_to_close_timeout"].total_seconds()


@dataclass
class Lifecycle:
    client: Client
    handle: WorkflowHandle
    node: str
    fakes: FakeActivities

    @property
    def world(self) -> World:
        return self.fakes.world

    async def transition(self, trigger: str, actor_kind: str = "operator", request_id: str = "") -> TransitionResult:
        return await self.handle.execute_update(
            NodeLifecycle.transition,
            TransitionRequest(
                trigger=trigger, actor="tester", actor_kind=actor_kind, cause=f"test: {trigger}", request_id=request_id
            ),
        )

    async def admit(self, suite: str = "quick") -> None:
        await self.handle.execute_update(NodeLifecycle.admit, PhaseRequest(actor="tester", suite=suite))

    async def event(self, code: int | None, event_id: str, severity: str = "") -> None:
        await self.handle.signal(
            NodeLifecycle.health_event,
            HealthEventInput(self.node, "xid", code, "test", "tester", event_id, 0.0, severity=severity),
        )

    async def settled(self) -> NodeLifecycleState:
        """The workflow's state once it has nothing queued and nothing in progress."""

        async def idle() -> NodeLifecycleState:
            while True:
                s = await self.handle.query(NodeLifecycle.current)
                if not s.work and not s.activity:
                    return s
                await asyncio.sleep(0.02)

        return await asyncio.wait_for(idle(), DECISION_S)

    async def until(self, predicate) -> None:
        await self.fakes.until(predicate, DECISION_S)

    async def job_restart(self, job: str, restart_id: str) -> JobRestartInput:
        """What the (fake) JobRestart for `job` was started with, once it has finished."""
        handle = self.client.get_workflow_handle(job_restart_id(job, restart_id))
        await asyncio.wait_for(handle.result(), DECISION_S)
        history = await handle.fetch_history()
        (payload,) = history.events[0].workflow_execution_started_event_attributes.input.payloads
        return JobRestartInput(**json.loads(payload.data))


# The worker must poll on the test's own event loop (fixtures default to the session's).
@pytest_asyncio.fixture(loop_scope="function")
async def lifecycle(temporal_address):
    """factory(state="production", world=World(), **state overrides) -> Lifecycle, a node's
    workflow running on fakes; the worker stops at teardown."""
    client = await Client.connect(temporal_address, data_converter=DATA_CONVERTER)  # the worker's, as in production
    task_queue = f"decisions-{uuid.uuid4().hex[:8]}"
    started: list[WorkflowHandle] = []
    fakes = FakeActivities(World())

    async def factory(state: str = "production", world: World | None = None, **overrides) -> Lifecycle:
        fakes.world = world or World()
        node = f"n{uuid.uuid4().hex[:8]}"
        handle = await client.start_workflow(
            NodeLifecycle.run,
            NodeLifecycleState(node=node, state=state, state_version=1, **overrides),
            id=node_workflow_id(node),
            task_queue=task_queue,
        )
        started.append(handle)
        return Lifecycle(client, handle, node, fakes)

    # Both of a worker's lanes (workflows.worker): the checks run in the bulk one.
    async with (
        Worker(client, task_queue=task_queue, workflows=[NodeLifecycle, FakeJobRestart], activities=fakes.all()),
        Worker(client, task_queue=bulk_queue(task_queue), activities=fakes.all()),
    ):
        yield factory
        for handle in started:
            try:
                await handle.terminate("test finished")
            except RPCError as exc:  # a retired node's workflow has ended by itself
                if exc.status != RPCStatusCode.NOT_FOUND:
                    raise
