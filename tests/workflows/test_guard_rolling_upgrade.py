"""A rolling upgrade: the fleet's guard still runs on a worker of the previous release, whose
code knows the removal Update by its old name. A drain asked by the new name is granted by
that guard at once (asked again by the old name), not refused until the last worker is
upgraded; an Update whose name never changed is refused as before."""

from __future__ import annotations

import asyncio
import functools

import pytest
from temporalio import workflow
from temporalio.client import WorkflowUpdateFailedError
from temporalio.worker import Worker

from fleetctl.nodes.capacity import CheckErrorReport, RemovalDecision, RemovalRequest
from fleetctl.workflows.activities.guard import GuardActivities
from fleetctl.workflows.api import (
    CAPACITY_GUARD,
    REPORT_CHECK_ERRORS_UPDATE,
    STEPWISE_REQUEST_REMOVAL_UPDATE,
    CapacityGuardState,
    guard_id,
)
from fleetctl.workflows.client import ask_capacity_guard, connect

pytestmark = pytest.mark.temporal

# An Update to a running workflow is answered within one workflow task; a loaded machine's
# task has taken seconds, so a minute bounds it.
ANSWERED_WITHIN_S = 60.0


@workflow.defn(name=CAPACITY_GUARD, sandboxed=False)
class PreviousReleaseGuard:
    """The guard as the previous release's workers run it: the removal Update only by its old
    name, and no other handler this test asks for."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    @workflow.run
    async def run(self, state: CapacityGuardState) -> None:
        await workflow.wait_condition(lambda: False)

    @workflow.update(name=STEPWISE_REQUEST_REMOVAL_UPDATE)
    async def request_removal(self, req: RemovalRequest) -> RemovalDecision:
        return RemovalDecision(node=req.node, granted=True, reason="granted by the previous release", grant="old")


async def _on_previous_release(settings, ask):
    client = await connect(settings)
    async with Worker(client, task_queue=settings.task_queue, workflows=[PreviousReleaseGuard]):
        try:
            return await asyncio.wait_for(ask(client), ANSWERED_WITHIN_S)
        finally:
            await client.get_workflow_handle(guard_id(settings.fleet)).terminate("test finished")


async def test_a_drain_asked_by_the_new_name_is_granted_by_a_guard_of_the_previous_release(
    make_settings, sqlite_url
) -> None:
    settings = make_settings(sqlite_url)
    req = RemovalRequest(node="gpu-7", rack="r1", reason="xid 79", actor="automation", critical=True)

    async def through_the_worker_activity(client):
        # What a node's workflow asks through: the activity the worker builds with the client's ask.
        guard = GuardActivities(settings, functools.partial(ask_capacity_guard, client, settings))
        return await guard.ask_capacity_guard(req)

    decision = await _on_previous_release(settings, through_the_worker_activity)
    assert decision.granted and decision.reason == "granted by the previous release" and decision.grant == "old"


async def test_an_update_the_previous_release_never_had_is_still_refused(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)

    async def report(client):
        report = CheckErrorReport(errored=["gpu-7"], checked=10, actor="sweep", key="sweep-1")
        return await ask_capacity_guard(client, settings, REPORT_CHECK_ERRORS_UPDATE, report, CapacityGuardState)

    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await _on_previous_release(settings, report)
    assert f"'{REPORT_CHECK_ERRORS_UPDATE}' expected but not found" in str(refused.value.cause)
