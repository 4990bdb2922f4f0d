"""Past Temporal's cap of signals per run, a health event waits for the node's run to continue
as new, and is taken then: never refused while the worker is only late. A dev server whose cap
is CAP signals a run, a node whose run continues as new at a quarter of it, its worker stopped
while the events arrive (a worker restarted, or slowed by load, in a storm): the cap is met
every time, and the events past it are delivered once a worker is back; an XID 79 after them
still takes the node out of production."""

from __future__ import annotations

import asyncio
import time

import pytest
from temporalio.api.enums.v1 import EventType

from fleetctl.checks.xid_policy import CATALOG
from fleetctl.connections.temporal_server import start_dev_server
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import SIGNAL_CAP_WAIT_S, connect, send_health_events
from fleetctl.workflows.health_events import health_event
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

CAP = 40
SIGNALS_PER_RUN = CAP // 4
PAST_THE_CAP = 5
# The server takes CAP signals in well under a second; a loaded 2-core machine, many times that.
TO_THE_CAP_S = 60.0
# From the worker's return: the run continues as new, the waiting sends are taken, the XID 79
# drains the node; each is a few workflow tasks, bounded together by the senders' own wait.
BACK_S = SIGNAL_CAP_WAIT_S


@pytest.fixture
def capped_server(tmp_path):
    server = start_dev_server(tmp_path / "temporal.db", dynamic_config={"history.maximumSignalsPerExecution": str(CAP)})
    yield server.address
    server.stop()


def _minor(node: str, index: int):
    # Distinct codes: no event folds into another, every one is a signal of its own.
    return health_event(node, "agent", code=100 + index, message="minor", event_id=f"minor-{index}", at=time.time(),
                        policy=CATALOG)  # fmt: skip


async def test_events_past_the_signal_cap_wait_for_the_next_run_and_an_xid79_after_them_drains(
    capped_server, make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url, capped_server)
    settings.runbooks_dir = str(tmp_path)
    engine = get_engine(sqlite_url)
    (node,) = make_fleet(settings, 1)
    worker = WorkerThread(settings).start()
    client = await connect(settings)
    await start_in_production(client, settings, node, signals_per_run=SIGNALS_PER_RUN)
    handle = client.get_workflow_handle(node_workflow_id(node))
    first_run = (await handle.describe()).run_id
    worker.stop()
    try:
        sending = asyncio.ensure_future(
            send_health_events(client, node, [_minor(node, i) for i in range(CAP + PAST_THE_CAP)])
        )

        async def at_the_cap() -> bool:
            history = await client.get_workflow_handle(node_workflow_id(node), run_id=first_run).fetch_history()
            signals = [e for e in history.events if e.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED]
            return len(signals) == CAP

        await wait_for(at_the_cap, TO_THE_CAP_S, "the run at the server's signal cap")
        assert not sending.done()  # waiting, not refused
        worker = WorkerThread(settings).start()
        await asyncio.wait_for(sending, BACK_S)
        assert (await handle.describe()).run_id != first_run

        xid79 = health_event(node, "agent", code=79, message="GPU has fallen off the bus", event_id="xid-79",
                             at=time.time(), policy=CATALOG)  # fmt: skip
        await send_health_events(client, node, [xid79])
        await wait_for(lambda: queries.get_node(engine, node).state != "production", BACK_S, "the node drained")
    finally:
        worker.stop()
