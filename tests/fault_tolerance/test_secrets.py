"""Secrets (BMC password, webhook token, the database password) are used where they are
needed and appear nowhere else: not in the database, not in any workflow history (the
payload bytes Temporal stores), not in the logs, not in what the CLI prints."""

from __future__ import annotations

import asyncio
import json
import logging
import uuid

import pytest
from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.client import connect, ensure_node_workflows, request_transition, send_health_events
from tests.support.fleet import Cli, db_snapshot, wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.webhook import WebhookReceiver
from tests.support.worker import WorkerThread

RUNBOOK = """
name: xid79-notify-and-rma
match: {xid: [79]}
steps:
  - action: drain
  - action: notify
    with: {message: "XID 79 on {{ node.name }}"}
  - action: rma
    with: {reason: "XID 79 on {{ node.name }}"}
"""


def test_config_never_prints_secrets(sqlite_url) -> None:
    password, token = f"bmc-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    result = CliRunner().invoke(
        app,
        ["--db-url", "postgresql://fleetctl:dbpass-7f3a@db.example:5432/fleet", "config", "-o", "json"],
        env={"FLEETCTL_BMC_PASSWORD": password, "FLEETCTL_WEBHOOK_TOKEN": token, "FLEETCTL_CONFIG": "/dev/null"},
    )
    assert result.exit_code == 0, result.output
    shown = {row["setting"]: row["value"] for row in json.loads(result.stdout)}
    for secret in (password, token, "dbpass-7f3a"):
        assert secret not in result.output
    assert shown["bmc_password"] and shown["webhook_token"]  # says one is set, without showing it


@pytest.mark.temporal
async def test_secrets_stay_out_of_the_database_histories_and_logs(make_settings, sqlite_url, tmp_path, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    receiver = WebhookReceiver()
    password, token = f"bmc-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    settings = make_settings(sqlite_url)
    settings.bmc_username, settings.bmc_password = "fleet-svc", password
    settings.webhook_url, settings.webhook_token = receiver.url, token
    (tmp_path / "runbooks").mkdir()
    (tmp_path / "runbooks" / "rb.yaml").write_text(RUNBOOK)
    settings.runbooks_dir = str(tmp_path / "runbooks")
    worker = WorkerThread(settings).start()
    try:
        (node,) = make_fleet(settings, 1)
        engine = get_engine(settings.db_url)
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(node, "new", 0)])
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(client, node, trigger, "setup", actor_kind="automation")
        await send_health_events(client, node, [HealthEventInput(node, "xid", 79, "fell off", "dmesg", "s-79", 0.0)])
        await wait_for(lambda: queries.get_node(engine, node).state == "rma", 60, "the runbook to send the node to RMA")
        await wait_for(lambda: len(receiver.requests) >= 2, 30, "the notification and the RMA bundle")
        assert {auth for auth, _ in receiver.requests} == {f"Bearer {token}"}  # used, in the header only

        histories = []
        async for execution in client.list_workflows(f"TaskQueue = '{settings.task_queue}'"):
            history = await client.get_workflow_handle(execution.id, run_id=execution.run_id).fetch_history()
            histories.append(history.to_json())
        assert len(histories) >= 3  # the node, the capacity guard, the remediation at least
        # In a thread: the CLI runs its own event loop (asyncio.run), which cannot nest in this one.
        results = [
            await asyncio.to_thread(Cli(settings), *args)
            for args in (
                ("fleet", "status", "-o", "json"),
                ("node", "show", node, "-o", "json"),
                ("report", "-o", "json"),
                ("rma", "list", "-o", "json"),
            )
        ]
        assert all(r.exit_code == 0 for r in results), [r.output for r in results]
        assert json.loads(results[0].stdout)["automation"]["reachable"] is True  # the guard itself answered
        outputs = [r.output for r in results]
    finally:
        worker.stop()
        receiver.shutdown()
    places = {
        "database": repr(db_snapshot(settings.db_url)),
        "histories": "\n".join(histories),
        "logs": caplog.text,
        "cli": "\n".join(outputs),
        "webhook bodies": b"".join(body for _, body in receiver.requests).decode(),
    }
    for secret in (password, token):
        leaked = [where for where, text in places.items() if secret in text]
        assert not leaked, f"secret found in {leaked}"
