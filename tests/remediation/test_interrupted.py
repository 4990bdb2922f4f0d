"""A critical event while a runbook works on the node cuts the runbook short: the
step in flight (here a long wait) is cancelled and recorded as interrupted, never as passed
or failed, the run ends `interrupted`, and the runbook for the new event starts. Before, the
node's workflow recorded the XID 79 as a refused drain ("already in maintenance") and the
old runbook went on as if nothing had happened."""

from __future__ import annotations

import asyncio
import time

import pytest

from fleetctl.db import queries
from fleetctl.db import remediation as runs_db
from fleetctl.db.engine import get_engine
from fleetctl.remediation.events import Event
from fleetctl.remediation.runbooks import load_runbooks
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import connect, send_health_events, start_remediation
from fleetctl.workflows.definitions.shared import MESSAGE, QUICK
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

LONG_WAIT_S = 3600
# The interrupt reaches the run and it ends: the signal, the step and the run recorded (QUICK
# each), then the new runbook's start; far below the wait it cut short.
ENDED_WITHIN_S = (4 * QUICK["start_to_close_timeout"] + MESSAGE["start_to_close_timeout"]).total_seconds()
RUNBOOKS = {
    "slow-recovery.yaml": f"""
name: slow-recovery
description: drains, then waits an hour before anything else
match: {{xid: [13]}}
steps:
  - action: drain
    with: {{reason: "XID 13 on {{{{ node.name }}}}"}}
  - action: wait
    name: settle
    with: {{duration: {LONG_WAIT_S}}}
  - action: set_state
    with: {{state: burn_in, cause: settled}}
""",
    "gone.yaml": """
name: gone
description: the XID 79 runbook of this test, one notification
match: {xid: [79]}
steps:
  - action: notify
    with: {message: "XID 79 on {{ node.name }}", severity: critical}
""",
}


async def test_an_xid79_during_a_runbook_interrupts_it_and_starts_the_runbook_for_the_xid(
    make_settings, sqlite_url, tmp_path
) -> None:
    for name, text in RUNBOOKS.items():
        (tmp_path / name).write_text(text)
    settings = make_settings(sqlite_url)
    settings.runbooks_dir = str(tmp_path)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        (node,) = make_fleet(settings, 1)
        client = await connect(settings)
        await start_in_production(client, settings, node)
        book = load_runbooks(tmp_path)["slow-recovery"]
        handle = await start_remediation(client, settings, node, book, Event("xid", code=13), "tester")

        def step(name: str):
            run = next((r for r in runs_db.runs(engine, node) if r.runbook == "slow-recovery"), None)
            return next((s for s in runs_db.steps(engine, run.run_key) if s.name == name), None) if run else None

        await wait_for(lambda: queries_state(engine, node) == "maintenance", ENDED_WITHIN_S, "the runbook's drain")
        started = time.monotonic()
        await send_health_events(
            client,
            node,
            [
                HealthEventInput(
                    node,
                    "xid",
                    79,
                    "GPU has fallen off the bus",
                    "agent",
                    "interrupt-79",
                    time.time(),
                    severity="critical",
                )
            ],
        )
        result = await asyncio.wait_for(handle.result(), ENDED_WITHIN_S)
        assert time.monotonic() - started < ENDED_WITHIN_S < LONG_WAIT_S
        assert result.status == "interrupted" and "XID 79" in result.outcome, result
        settle = step("settle")
        assert settle is not None and settle.status == "interrupted", settle
        assert step("set_state") is None  # nothing ran after the cut
        await wait_for(
            lambda: any(r.runbook == "gone" for r in runs_db.runs(engine, node)),
            ENDED_WITHIN_S,
            "the XID 79 runbook started",
        )
        # Two runs of the node begun within a minute keep rows of their own (run ids are UUIDv7:
        # the first eight characters are the start time).
        (old,) = [r for r in runs_db.runs(engine, node) if r.runbook == "slow-recovery"]
        assert old.status == "interrupted"
    finally:
        worker.stop()


def queries_state(engine, node: str) -> str:
    return queries.get_node(engine, node).state
