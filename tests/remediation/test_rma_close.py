"""`fleetctl rma close` says how an RMA ended: a part replaced confirms the removal
behind it, no fault found makes it a false alarm. End to end: CLI -> Temporal -> worker ->
database, and the report's rule precision on what was recorded."""

from __future__ import annotations

import asyncio
import json
from datetime import timedelta

import pytest

from fleetctl.db import queries
from fleetctl.db import remediation as db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import utcnow
from fleetctl.workflows.client import connect
from fleetctl.workflows.definitions.shared import QUICK
from tests.cli.test_what_operators_see import DRAINED_S
from tests.support.fleet import Cli, wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = pytest.mark.temporal

# The operator's RMA opens its record in the node's workflow, one activity after the move.
RMA_OPENED_S = DRAINED_S + QUICK["start_to_close_timeout"].total_seconds()


@pytest.mark.parametrize("flags", [(), ("--replaced", "GPU3", "--no-fault-found")])
def test_close_must_say_how_the_rma_ended(make_settings, sqlite_url, flags) -> None:
    result = Cli(make_settings(sqlite_url))("rma", "close", "1", *flags)
    assert result.exit_code == 2 and "--replaced PART or --no-fault-found" in result.stderr


async def test_no_fault_found_is_recorded_and_scores_the_removal_a_false_alarm(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(settings.db_url)
    cli = Cli(settings)
    worker = WorkerThread(settings).start()
    try:
        (name,) = make_fleet(settings, 1)
        await start_in_production(await connect(settings), settings, name)
        result = await asyncio.to_thread(cli, "node", "drain", name, "--reason", "GPU3 hot", "--failure", "--yes")
        assert result.exit_code == 0, result.output
        await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", DRAINED_S, f"{name} drained")
        result = await asyncio.to_thread(cli, "node", "rma", name, "--reason", "GPU3 overheats")
        assert result.exit_code == 0, result.output
        await wait_for(lambda: db.rma_records(engine, node_name=name), RMA_OPENED_S, f"{name}'s RMA record")
        (record,) = db.rma_records(engine, node_name=name)
        listed = json.loads((await asyncio.to_thread(cli, "rma", "list", "--node", name, "-o", "json")).stdout)
        assert [r["outcome"] for r in listed] == ["open"]

        result = await asyncio.to_thread(cli, "rma", "close", str(record.id), "--no-fault-found")
        assert result.exit_code == 0, result.output
        assert f"RMA {record.id} closed (no fault found)" in result.output
        listed = json.loads((await asyncio.to_thread(cli, "rma", "list", "--node", name, "-o", "json")).stdout)
        assert [(r["status"], r["outcome"], r["replaced"]) for r in listed] == [("closed", "no_fault_found", None)]

        # The removal was the operator's, no rule's; its RMA's outcome is what the metrics read.
        from fleetctl.reliability.metrics_store import load_history

        (history,) = [h for h in load_history(engine, utcnow() - timedelta(days=1)).nodes if h.node.name == name]
        assert [r.outcome for r in history.rmas] == ["no_fault_found"]
    finally:
        worker.stop()
