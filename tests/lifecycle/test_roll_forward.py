"""`fleetctl temporal roll-forward`: every running node workflow and the capacity guard
continue as new, idle or not, with their state, so that no open run keeps a branch a later
release retires (docs/decisions/0023-retiring-patches.md)."""

from __future__ import annotations

import asyncio

import pytest
from temporalio.client import WorkflowExecutionStatus

from fleetctl.workflows.api import guard_id, node_workflow_id
from fleetctl.workflows.client import connect, ensure_capacity_guard, guard_status, node_now
from tests.support.fleet import Cli, wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

# Temporal's default workflow task timeout: a signalled run continues as new in one workflow
# task, and the dev server's visibility shows a started run once its first task is done.
WORKFLOW_TASK_S = 10.0


async def test_idle_nodes_and_the_guard_continue_as_new_with_their_state(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    names = make_fleet(settings, 2)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        for name in names:
            await start_in_production(client, settings, name)
        await ensure_capacity_guard(client, settings)
        guard_before = await guard_status(client, settings)
        ids = [*map(node_workflow_id, names), guard_id(settings.fleet)]
        first_runs = {i: (await client.get_workflow_handle(i).describe()).run_id for i in ids}
        before = {name: await node_now(client, name) for name in names}
        cli = Cli(settings)

        async def every_one_asked() -> bool:
            result = await asyncio.to_thread(cli, "temporal", "roll-forward")
            assert result.exit_code == 0, result.output
            return int(result.output.split()[0]) >= len(ids)

        await wait_for(every_one_asked, WORKFLOW_TASK_S, "the query to list every node workflow and the guard")

        async def each_on_a_new_run() -> bool:
            for workflow_id in ids:
                described = await client.get_workflow_handle(workflow_id).describe()
                if described.run_id == first_runs[workflow_id] or described.status != WorkflowExecutionStatus.RUNNING:
                    return False
            return True

        await wait_for(each_on_a_new_run, 2 * WORKFLOW_TASK_S, "a new run of every workflow asked")
        for name in names:
            after = await node_now(client, name)
            assert (after.state, after.state_version) == (before[name].state, before[name].state_version)
        assert (await guard_status(client, settings)).fleet == guard_before.fleet
    finally:
        worker.stop()
