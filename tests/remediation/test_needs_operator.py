"""A runbook that cannot finish leaves its node waiting for an operator, and every view says so:
an XID 79 on a node imported without a BMC (the import warned) drains it and starts the XID 79
runbook, whose reboot step fails; `node show`, `node list`, `fleet status` and the exporter
say the node needs an operator, and `fleetctl runbook runs --node` shows the failed step. The
real worker on the Temporal dev server, a simulated fleet, the CLI as an operator runs it."""

from __future__ import annotations

import asyncio
import json
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio.client import Client

from fleetctl.db import queries
from fleetctl.db import remediation as runs_db
from fleetctl.db.engine import get_engine
from fleetctl.reliability.exporter_server import FleetCollector
from fleetctl.workflows.definitions.shared import QUICK, SCHEDULER
from fleetctl.workflows.worker import build_worker
from tests.support.fleet import Cli, wait_for
from tests.support.worker import until_polled

pytestmark = pytest.mark.temporal

# The XID 79 drains the node, its runbook starts and runs to the failed reboot: about a dozen
# activities (the run's record, each step prepared and recorded, the node's state, its jobs),
# QUICK each, and the scheduler's call for the node's jobs.
RUN_FAILS_WITHIN_S = (12 * QUICK["start_to_close_timeout"] + SCHEDULER["start_to_close_timeout"]).total_seconds()
NO_BMC = "the node has no BMC address in the inventory"


async def test_an_xid79_runbook_that_cannot_reboot_leaves_the_node_needing_an_operator(
    make_settings, sqlite_url, tmp_path
) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    node, partner = (f"nb-{uuid.uuid4().hex[:6]}-{i}" for i in range(2))
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(
        "nodes:\n"
        f"  - {{name: {node}, address: sim://{node}, rack: r1, profile: h100-sxm, scheduler: sim}}\n"
        f"  - {{name: {partner}, address: sim://{partner}, bmc: sim://{partner}-bmc, rack: r1, profile: h100-sxm, "
        "scheduler: sim}\n"
    )
    client = await Client.connect(settings.temporal_address)
    cli = Cli(settings)
    with ThreadPoolExecutor(16) as pool:
        async with build_worker(client, settings, pool):
            await until_polled(settings)  # else the import also warns that nobody polls the queue
            imported = await asyncio.to_thread(cli, "node", "import", "--adopt", str(inventory))
            assert imported.exit_code == 0, imported.output
            (warning,) = imported.stderr.strip().splitlines()
            assert warning.startswith(f"warning: {node} has no BMC (inventory field 'bmc'): the reboot step of ")
            assert "xid-79-fallen-off-bus" in warning

            sent = await asyncio.to_thread(cli, "node", "event", node, "--xid", "79", "--message", "fallen off the bus")
            assert sent.exit_code == 0, sent.output

            def failed_run():
                return next((r for r in runs_db.runs(engine, node) if r.status == "failed"), None)

            await wait_for(failed_run, RUN_FAILS_WITHIN_S, "the XID 79 runbook's failure")
            run = failed_run()
            assert run.runbook == "xid-79-fallen-off-bus"
            assert queries.get_node(engine, node).state == "maintenance"

            shown = await asyncio.to_thread(cli, "node", "show", node)
            assert shown.exit_code == 0, shown.output
            assert "needs an operator: RemediationFailed: runbook xid-79-fallen-off-bus" in shown.stdout
            assert f"failed at step reboot: {NO_BMC}" in " ".join(shown.stdout.split())
            detail = json.loads((await asyncio.to_thread(cli, "node", "show", node, "-o", "json")).stdout)
            assert detail["needs_operator"]["type"] == "RemediationFailed"
            assert run.run_key in detail["needs_operator"]["reason"]
            listed = json.loads((await asyncio.to_thread(cli, "node", "list", "-o", "json")).stdout)
            assert {r["name"]: r["health"] for r in listed}[node] == "Maintenance,RemediationFailed"

            status = await asyncio.to_thread(cli, "fleet", "status")
            assert status.exit_code == 0, status.output
            assert "needs an operator: 1 node whose runbook failed or is stuck" in status.stdout
            assert node in status.stdout.split("needs an operator", 1)[1]
            waiting = json.loads((await asyncio.to_thread(cli, "fleet", "status", "-o", "json")).stdout)
            assert [(w["node"], w["condition"]) for w in waiting["needs_operator"]] == [(node, "RemediationFailed")]

            runs = await asyncio.to_thread(cli, "runbook", "runs", "--node", node)
            assert runs.exit_code == 0, runs.output
            (row,) = [line for line in runs.stdout.splitlines() if line.startswith(node)]
            assert "xid-79-fallen-off-bus" in row and "failed" in row and f"#2 reboot failed: {NO_BMC}" in row
            (as_json,) = json.loads(
                (await asyncio.to_thread(cli, "runbook", "runs", "--node", node, "-o", "json")).stdout
            )
            assert as_json["run"] == run.run_key
            assert as_json["stopped_at"]["name"] == "reboot" and as_json["stopped_at"]["detail"] == NO_BMC
            assert [s["name"] for s in as_json["steps"]] == [s.name for s in runs_db.steps(engine, run.run_key)]
            failed_only = await asyncio.to_thread(cli, "runbook", "runs", "--status", "failed", "-o", "json")
            assert [r["node"] for r in json.loads(failed_only.stdout)] == [node]

            family = next(
                f
                for f in FleetCollector(engine).collect()
                if f.name == "fleetctl_node_needs_operator_since_timestamp_seconds"
            )
            assert [(s.labels["node"], s.labels["condition"]) for s in family.samples] == [(node, "RemediationFailed")]


def test_runbook_runs_refuses_an_unknown_status_or_node_in_one_line(make_settings, sqlite_url) -> None:
    from tests.support.fleet import one_line_error

    cli = Cli(make_settings(sqlite_url))
    refused = cli("runbook", "runs", "--status", "broken")
    assert refused.exit_code == 2
    assert one_line_error(refused) == (
        "error: unknown run status 'broken' (one of: running, succeeded, failed, escalated, interrupted, dry_run)"
    )
    unknown = cli("runbook", "runs", "--node", "nope")
    assert unknown.exit_code == 1 and one_line_error(unknown) == "error: unknown node: nope"
