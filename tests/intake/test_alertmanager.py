"""A real Alertmanager (Debian's prometheus-alertmanager) fires an alert into the intake,
which signals a real worker's node workflow: the node is drained, the event recorded once."""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
import threading
import urllib.request
from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.agent.transport import NodeRefused, TemporalTransport
from fleetctl.connections.temporal_server import free_port
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.intake.delivery import Intake
from fleetctl.intake.server import KnownNodes, serve_http
from fleetctl.intake.signals import WorkflowSignals
from fleetctl.workflows.client import connect
from tests.support.fleet import wait_for
from tests.support.services import missing_service, wait_ready
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = [pytest.mark.temporal, pytest.mark.slow]
TOKEN = "alertmanager-to-intake-token-0123"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


@contextlib.contextmanager
def alertmanager(tmp_path, intake_port: int, group_by: str):
    """A real Alertmanager sending its groups (by `group_by`) to the intake; its API's address."""
    if ALERTMANAGER is None:
        missing_service("Alertmanager", "prometheus-alertmanager is not installed (Makefile APT_PACKAGES)")
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "alertmanager.yml").write_text(f"""
route:
  receiver: fleetctl
  group_by: [{group_by}]
  group_wait: 100ms
  group_interval: 1s
receivers:
  - name: fleetctl
    webhook_configs:
      - url: http://127.0.0.1:{intake_port}/alertmanager
        send_resolved: false
        http_config:
          authorization:
            credentials_file: {tmp_path / "token"}
""")
    port = free_port()
    am = subprocess.Popen(
        [
            ALERTMANAGER,
            f"--config.file={tmp_path / 'alertmanager.yml'}",
            f"--storage.path={tmp_path / 'am'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "alertmanager.log", "wb"),
    )
    try:
        wait_ready(f"http://127.0.0.1:{port}/-/ready", am)
        yield f"http://127.0.0.1:{port}"
    finally:
        am.terminate()
        am.wait(10)


def xid_alert(node: str, gpu: int = 3) -> dict:
    """What Prometheus sends for DCGM exporter's rule `DCGM_FI_DEV_XID_ERRORS > 0`, the value
    templated into an annotation."""
    now = datetime.now(UTC)
    return {
        "labels": {"alertname": "GpuXidError", "Hostname": node, "gpu": str(gpu), "severity": "critical"},
        "annotations": {"summary": f"GPU {gpu} on {node} reported Xid 79", "value": "79"},
        "startsAt": now.isoformat(),
        "endsAt": (now + timedelta(minutes=5)).isoformat(),
    }


async def fire(api: str, alerts: list[dict]) -> None:
    post = urllib.request.Request(
        f"{api}/api/v2/alerts", data=json.dumps(alerts).encode(), headers={"Content-Type": "application/json"}
    )
    await asyncio.to_thread(urllib.request.urlopen, post, None, 10)


async def test_a_real_alertmanager_drains_the_node_through_the_intake(
    make_settings, sqlite_url, tmp_path, request
) -> None:
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    await start_in_production(await connect(settings), settings, node)

    intake = Intake(tmp_path / "spool", TemporalTransport(settings))
    http = serve_http(intake, TOKEN, "127.0.0.1", 0)
    stop = threading.Event()
    delivery = asyncio.create_task(intake.deliver_until(stop))
    try:
        with alertmanager(tmp_path, http.server_port, "alertname, Hostname") as api:
            await fire(api, [xid_alert(node)])
            await wait_for(
                lambda: queries.get_node(engine, node).state != "production", 60, "the alert to drain the node"
            )
            await fire(api, [xid_alert(node)])  # Prometheus re-sends a firing alert
            await asyncio.sleep(2.5)  # past group_interval: a re-notification would have come by now
    finally:
        stop.set()
        await delivery
        http.shutdown()
    assert intake.accepted == 1 and intake.sent == 1
    (event,) = queries.health_events(engine, node)
    assert event.code == 79 and "GpuXidError" in event.message


async def test_a_group_with_a_node_outside_the_inventory_still_drains_the_known_node(
    make_settings, sqlite_url, tmp_path, request
) -> None:
    """One group (by alertname) holds a known node's XID 79 and an alert of a node fleetctl
    does not manage: the known node's is taken and drains it, the other's counted. Refused
    whole (a 4xx), the group's XID 79 would be gone: Alertmanager does not send it again."""
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    await start_in_production(await connect(settings), settings, node)

    intake = Intake(tmp_path / "spool", WorkflowSignals(settings))
    known = KnownNodes(lambda names: queries.existing_names(engine, names))
    http = serve_http(intake, TOKEN, "127.0.0.1", 0, known=known)
    stop = threading.Event()
    delivery = asyncio.create_task(intake.deliver_until(stop))
    try:
        with alertmanager(tmp_path, http.server_port, "alertname") as api:
            await fire(api, [xid_alert("cpu-login-1", gpu=0), xid_alert(node)])
            await wait_for(
                lambda: queries.get_node(engine, node).state != "production", 60, "the alert to drain the node"
            )
    finally:
        stop.set()
        await delivery
        http.shutdown()
        intake.close()
    assert intake.accepted == 1 and intake.not_in_inventory >= 1
    assert [e.code for e in queries.health_events(engine, node)] == [79]


async def test_an_unknown_node_is_refused_not_unreachable(make_settings, sqlite_url) -> None:
    transport = TemporalTransport(make_settings(sqlite_url))
    with pytest.raises(NodeRefused):
        await transport.send(
            "no-such-node", [{"node": "no-such-node", "source": "intake", "code": 13, "event_id": "x"}]
        )
