"""CLI misuse: an unknown node, an illegal transition, conflicting flags, a bad selector, a
suite that does not exist. Each gives one line on stderr, exit 2 (usage) or 1 (refused),
and leaves every table of the database exactly as it was."""

from __future__ import annotations

import uuid

import pytest
from temporalio.client import WorkflowExecutionStatus

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect, request_phase, request_transition
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.support.fleet import Cli, db_snapshot, inventory_file, one_line_error, wait_for
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal


@pytest.fixture
def fleet_cli(make_settings, sqlite_url, tmp_path):
    settings = make_settings(sqlite_url)
    worker = WorkerThread(settings).start()
    cli = Cli(settings)
    cli.names = [f"mis-{uuid.uuid4().hex[:6]}-{i}" for i in range(2)]
    result = cli("node", "import", str(inventory_file(tmp_path, cli.names)))
    assert result.exit_code == 0, result.output
    yield cli
    worker.stop()


def misuses(node: str, log: str) -> list[tuple[list[str], int, str]]:
    """(arguments, exit code, text the error line must contain)."""
    return [
        (["node", "drain", "no-such-node", "--reason", "x"], 1, "unknown node: no-such-node"),
        (["node", "show", "no-such-node"], 1, "unknown node"),
        (["node", "undrain", node], 1, "cannot undrain a node in new"),
        (["node", "rma", node, "--reason", "x"], 1, "cannot send to rma a node in new"),
        (["node", "recheck", node, "--suite", "no-such-suite"], 2, "unknown suite 'no-such-suite'"),
        (["node", "admit", node, "--suite", "no-such-suite"], 2, "unknown suite 'no-such-suite'"),
        (["node", "event", node, "--xid", "79", "--from-log", log], 2, "at most one of --xid or --from-log"),
        (["node", "event", node], 2, "give --xid, --from-log, or --message with --severity"),
        (["node", "event", node, "--message", "SXid 24007"], 2, "--message with --severity"),
        (
            ["node", "event", node, "--xid", "79", "--severity", "urgent"],
            2,
            "--severity must be one of info, warning, critical",
        ),
        (["node", "event", node, "--message", "x", "--severity", "CRITICAL"], 2, "--severity must be one of"),
        (["node", "event", node, "--xid", "-3"], 2, "positive XID"),
        (["node", "list", "-l", "pool"], 2, "bad label selector"),
        (["node", "list", "-l", "pool=a=b"], 2, "bad label selector"),
        (["node", "list", "-l", "$(id)=x"], 2, "bad label selector"),
        (["node", "list", "--state", "sideways"], 2, "unknown state 'sideways'"),
        (["node", "drain", node], 2, "Missing option '--reason'"),
        # Free text no record can hold, or a reason that says nothing.
        (
            ["node", "drain", node, "--reason", "PSU\x00smoke", "--yes"],
            2,
            "--reason: a NUL character cannot be recorded",
        ),
        (["node", "drain", node, "--reason", " \t ", "--yes"], 2, "--reason must say why"),
        (["node", "rma", node, "--reason", ""], 2, "--reason must say why"),
        (["node", "event", node, "--message", "fan\x00", "--severity", "warning"], 2, "--message: a NUL character"),
        (["node", "transmogrify", node], 2, "No such command"),
        (["schedule", "create", "active-checks", "--every", "soon"], 2, "bad duration"),
        (["schedule", "create", "active-checks", "--suite", "no-such-suite"], 2, "unknown suite"),
    ]


def test_misuse_is_one_line_an_exit_code_and_no_change(fleet_cli, tmp_path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.\n")
    node = fleet_cli.names[0]
    before = state_tables(fleet_cli.settings.db_url)
    for args, code, text in misuses(node, str(log)):
        result = fleet_cli(*args)
        assert result.exit_code == code, (args, result.exit_code, result.output)
        if (code == 2 and "Missing option" in text) or "No such command" in text:
            assert text in result.output  # click's own usage error, with its usage line
        else:
            assert text in one_line_error(result), (args, result.stderr)
        assert state_tables(fleet_cli.settings.db_url) == before, args
    refused = [(e.kind, e.node_name, e.actor) for e in queries.automation_events(get_engine(fleet_cli.settings.db_url))]
    assert refused == [("rejected", node, "alice@console")] * 2  # the illegal undrain and rma, audited


def state_tables(db_url: str) -> dict:
    """Everything but the audit rows of refused commands (those are written on purpose)."""
    snapshot = db_snapshot(db_url)
    snapshot.pop("automation_events")
    return snapshot


async def test_a_bad_suite_never_stops_the_nodes_own_workflow(fleet_cli) -> None:
    """The lifecycle workflow is the node's only writer: a suite it cannot run (a typo past
    the CLI, a suites directory the worker lacks) must not end it."""
    node = fleet_cli.names[1]
    client = await connect(fleet_cli.settings)
    for kind in ("recheck", "admit"):
        assert (await request_phase(client, node, kind, "tester", "no-such-suite"))[1]
    handle = client.get_workflow_handle(node_workflow_id(node))
    await wait_for(lambda: _idle(handle), 30, "the requests to be handled")
    assert (await handle.describe()).status is WorkflowExecutionStatus.RUNNING
    assert "cannot run suite no-such-suite" in (await handle.query(NodeLifecycle.current)).last_outcome
    result = await request_transition(client, node, "retire", "alice@console")
    assert result.to_state == "retired"


async def _idle(handle) -> bool:
    state = await handle.query(NodeLifecycle.current)
    return not state.work and not state.activity
