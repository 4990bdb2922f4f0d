"""A simulated fleet on the real Temporal dev server, driven through the real workflows."""

from __future__ import annotations

import pytest

from fleetctl.workflows.client import connect, ensure_node_workflows
from tests.support.sim_fleet import SimFleet, make_fleet
from tests.support.worker import WorkerThread


@pytest.fixture
def sim_fleet(make_settings, sqlite_url):
    """factory(count, profile) -> SimFleet with a worker thread running; stopped at teardown."""
    workers: list[WorkerThread] = []

    async def factory(count: int, profile: str = "h100-sxm", racks: int = 4, worker: bool = True) -> SimFleet:
        settings = make_settings(sqlite_url)
        if worker:
            workers.append(WorkerThread(settings).start())
        names = make_fleet(settings, count, profile, racks)
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        return SimFleet(settings, client, names)

    yield factory
    for w in workers:
        w.stop()
