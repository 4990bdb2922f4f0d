"""The worker thread the CLI tests drive their commands against, and clean-up of node
workflows whose names other tests reuse (the Slurm cluster's node1..node4)."""

import asyncio

from temporalio.common import WorkflowIDConflictPolicy
from temporalio.service import RPCError

from fleetctl.workflows.api import NodeLifecycleState, node_workflow_id, remediation_id
from fleetctl.workflows.client import connect, request_transition, task_queue_unpolled
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.worker import BackgroundWorker as WorkerThread  # noqa: F401

# NodeLifecycleState timing for a test whose job ends (or moves) while a drain waits for it:
# the drain sees it gone within half a second, not at its next look DRAIN_JOB_POLL_S (30 s)
# later, which each such test spent idle.
DRAIN_LOOKS_OFTEN = {"drain_job_poll_s": 0.5}

# A started worker's first poll reaches the server within moments; a loaded machine's 2 cores
# have taken seconds. A minute is the bound, not the expectation.
POLLED_WITHIN_S = 60.0


async def until_polled(settings) -> None:
    """Until Temporal has seen a worker poll the settings' task queue: a command run before it
    warns that nobody polls it (fleetctl.cli.context), which a test asserting its stderr reads
    as a failure of its own."""
    client = await connect(settings)
    deadline = asyncio.get_running_loop().time() + POLLED_WITHIN_S
    while await task_queue_unpolled(client, settings.task_queue):
        assert asyncio.get_running_loop().time() < deadline, f"no worker polled {settings.task_queue}"
        await asyncio.sleep(0.2)


async def terminate_node_workflows(settings, names) -> None:
    """Another test's import of the same node names must start fresh workflows, not attach to
    these (their worker and task queue are gone with this test): the nodes' own, and their live
    remediations, of which a node may start one only while none runs (a loaded machine left a
    runbook running past its test, and the next test's XID 79 on node1 started none)."""
    client = await connect(settings)
    for workflow_id in [wf(name) for name in names for wf in (node_workflow_id, remediation_id)]:
        try:
            await client.get_workflow_handle(workflow_id).terminate("test finished")
        except RPCError:
            pass  # already closed, or never started


async def start_in_production(client, settings, name: str, **state) -> None:
    """The node's workflow started with `state` overrides (e.g. retry rounds a second apart
    instead of a minute) and taken new -> production by automation, without a burn-in."""
    await client.start_workflow(
        NodeLifecycle.run,
        NodeLifecycleState(node=name, **state),
        id=node_workflow_id(name),
        task_queue=settings.task_queue,
        id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
    )
    for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
        await request_transition(client, name, trigger, "setup", actor_kind="automation")
