"""The worker thread the CLI tests drive their commands against, and clean-up of node
workflows whose names other tests reuse (the Slurm cluster's node1..node4)."""

from temporalio.service import RPCError

from workflows.node_lifecycle import workflow_id_for
from workflows.starter import connect
from workflows.worker import BackgroundWorker as WorkerThread  # noqa: F401


async def terminate_node_workflows(settings, names) -> None:
    """Another test's import of the same node names must start fresh workflows, not attach to
    these (their worker and task queue are gone with this test)."""
    client = await connect(settings)
    for name in names:
        try:
            await client.get_workflow_handle(workflow_id_for(name)).terminate("test finished")
        except RPCError:
            pass  # already closed
