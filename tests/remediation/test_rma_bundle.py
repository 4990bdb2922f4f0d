"""Evidence bundles keep secrets out; the webhook carries the token only in its header."""

from __future__ import annotations

import json
import logging
import os
import uuid

from temporalio.testing import ActivityEnvironment

from fleetctl.config import load_settings
from fleetctl.connections.webhook_client import post_webhook
from fleetctl.db import queries
from fleetctl.db import remediation as rma_db
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun
from fleetctl.inventory.parse import parse_inventory
from fleetctl.remediation.rma import MASK, redact
from fleetctl.workflows.activities.remediation import RemediationActivities
from fleetctl.workflows.api import RmaRequest
from tests.support.webhook import WebhookReceiver


def test_redact_masks_credentials_everywhere() -> None:
    bundle = {
        "labels": {"note": "bmc password=hunter2 ok"},
        "out": ["curl https://admin:s3cret@bmc.example/redfish", "Authorization: Bearer abc.def"],
        "raw": "the configured token TOKEN-123 leaked",
    }
    clean = json.dumps(redact(bundle, ["TOKEN-123"]))
    for secret in ("hunter2", "s3cret", "abc.def", "TOKEN-123"):
        assert secret not in clean
    assert "https://admin:***@bmc.example/redfish" in clean


def test_webhook_posts_json_with_bearer_token_and_never_logs_it(caplog) -> None:
    receiver = WebhookReceiver(status=201)
    try:
        url = receiver.url + "?token=SECRET-T"
        with caplog.at_level(logging.DEBUG):
            status = post_webhook(url, "SECRET-T", {"kind": "rma", "rma_id": 7})
    finally:
        receiver.shutdown()
    assert status == "delivered: HTTP 201"
    assert [(auth, json.loads(body)) for auth, body in receiver.requests] == [
        ("Bearer SECRET-T", {"kind": "rma", "rma_id": 7})
    ]
    assert "SECRET-T" not in caplog.text and "delivered" in caplog.text


def test_webhook_failure_is_a_status_not_an_exception() -> None:
    assert post_webhook("http://127.0.0.1:9/nowhere", "T", {}, timeout_s=2).startswith("failed:")


def test_configured_secrets_in_a_checks_raw_output_reach_no_bundle_markdown_or_webhook(sqlite_url) -> None:
    """A failing check echoed the BMC password and the webhook token in shapes no generic
    pattern knows (`-P <password>`, `X-Hook: <token>`): only masking the configured values
    keeps them out of what the RMA activity stores and sends."""
    password, token = f"bmc-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    receiver = WebhookReceiver()
    settings = load_settings(
        flags={
            "db_url": sqlite_url,
            "bmc_username": "fleet-svc",
            "bmc_password": password,
            "webhook_url": receiver.url,
            "webhook_token": token,
        },
        env={},
        config_file=os.devnull,
    )
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(
        engine,
        parse_inventory("nodes:\n  - {name: real-01, address: 10.0.0.1, bmc: 'https://10.0.1.1', profile: h100-sxm}\n"),
    )
    raw = (
        f"+ ipmitool -I lanplus -H 10.0.1.1 -U fleet-svc -P {password} sel list\n"
        f"+ curl -H 'X-Hook: {token}' https://hooks.example/ping\n"
        "GPU 3: Xid 79, GPU has fallen off the bus\n"
    )
    queries.insert_once(
        engine,
        CheckRun(
            node_name="real-01",
            check_name="dcgm-diag",
            kind="dcgm",
            status="fail",
            reason="GPU 3 fell off the bus",
            findings=[{"what": f"SEL read with -P {password}", "where": "GPU 3", "severity": "fail"}],
            raw_output=raw,
            idempotency_key="k1",
        ),
        CheckRun.idempotency_key,
        "k1",
    )
    try:
        opened = ActivityEnvironment().run(
            RemediationActivities(settings, executors=None).open_rma,
            RmaRequest(node="real-01", reason="XID 79", actor="tester"),
        )
    finally:
        receiver.shutdown()

    record = rma_db.get_rma(engine, opened.rma_id)
    assert opened.webhook_status == "delivered: HTTP 204"
    [(auth, body)] = receiver.requests
    assert auth == f"Bearer {token}"  # the token was used, in the header only
    sent = json.loads(body)
    # The failing output did go into the bundle, the markdown and the webhook, masked.
    excerpt = f"-U fleet-svc -P {MASK} sel list"
    assert excerpt in record.evidence["failing_checks"][0]["raw_output_excerpt"]
    assert excerpt in record.evidence_markdown
    assert excerpt in sent["evidence"]["failing_checks"][0]["raw_output_excerpt"]
    places = {
        "bundle": json.dumps(record.evidence),
        "markdown": record.evidence_markdown,
        "webhook body": body.decode(),
    }
    for secret in (password, token):
        leaked = [where for where, text in places.items() if secret in text]
        assert not leaked, f"configured secret found in {leaked}"


def test_rma_show_gives_each_remediation_run_as_it_ended_not_as_it_was_when_opened(sqlite_url) -> None:
    """The run that opens an RMA is still going when the bundle is written: its entry said
    `running` (and lacked its last steps) in `rma show` long after it ended."""
    from datetime import timedelta

    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.db.models import utcnow

    settings = load_settings(flags={"db_url": sqlite_url}, env={}, config_file=os.devnull)
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(engine, parse_inventory("nodes:\n  - {name: n1, address: sim://n1, profile: h100-sxm}\n"))
    began = utcnow() - timedelta(minutes=20)
    rma_db.start_run(
        engine,
        run_key="r1",
        node_name="n1",
        runbook="escalation-ladder",
        event={},
        mode="live",
        actor="t",
        started_at=began,
    )
    rma_db.record_step(
        engine,
        run_key="r1",
        node_name="n1",
        step_index=0,
        name="drain",
        action="drain",
        status="passed",
        params={},
        detail="drained",
        started_at=began,
        finished_at=began,
    )
    opened = ActivityEnvironment().run(
        RemediationActivities(settings, executors=None).open_rma,
        RmaRequest(node="n1", reason="lemon", actor="t", remediation_run="r1"),
    )
    assert rma_db.get_rma(engine, opened.rma_id).evidence["remediation"][0]["status"] == "running"  # as opened
    rma_db.record_step(
        engine,
        run_key="r1",
        node_name="n1",
        step_index=1,
        name="rma",
        action="rma",
        status="passed",
        params={},
        detail="sent to RMA",
        started_at=began,
        finished_at=utcnow(),
    )
    rma_db.finish_run(engine, "r1", "escalated", "sent to RMA", utcnow())

    runner = CliRunner()
    shown = runner.invoke(app, ["--db-url", sqlite_url, "rma", "show", str(opened.rma_id), "-o", "json"])
    assert shown.exit_code == 0, shown.output
    (run,) = json.loads(shown.stdout)["evidence"]["remediation"]
    assert (run["status"], run["outcome"], [s["name"] for s in run["steps"]]) == (
        "escalated",
        "sent to RMA",
        ["drain", "rma"],
    )
    assert run["finished_at"]
    table = runner.invoke(app, ["--db-url", sqlite_url, "rma", "show", str(opened.rma_id)], env={"COLUMNS": "200"})
    assert table.exit_code == 0, table.output
    assert "live, escalated," in table.stdout and "running" not in table.stdout
    assert f"RMA {opened.rma_id}: n1" in table.stdout


def test_an_rma_recorded_without_a_bundle_is_shown_saying_so(sqlite_url) -> None:
    """A record opened by hand (or before bundles were kept) has no evidence: `rma show` says
    so, with its status first, not an internal error on the bundle's missing parts."""
    from sqlmodel import Session
    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import RmaRecord

    with Session(get_engine(sqlite_url)) as session:
        record = RmaRecord(
            node_name="n1", reason="sent by hand", evidence={}, opened_by="me", idempotency_key="k", status="open"
        )
        session.add(record)
        session.commit()
        session.refresh(record)
    shown = CliRunner().invoke(app, ["--db-url", sqlite_url, "rma", "show", str(record.id)], env={"COLUMNS": "120"})
    assert shown.exit_code == 0, shown.output
    assert shown.stdout.splitlines()[0] == "status: open" and "No evidence bundle was recorded" in shown.stdout
