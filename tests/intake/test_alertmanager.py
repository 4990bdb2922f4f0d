"""A real Alertmanager (Debian's prometheus-alertmanager) fires an alert into the intake,
which signals a real worker's node workflow: the node is drained, the event recorded once."""

from __future__ import annotations

import asyncio
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
from fleetctl.intake.server import serve_http
from tests.lifecycle.conftest import make_fleet
from tests.reliability.support import wait_for
from tests.support.services import missing_service, wait_ready
from tests.support.worker import WorkerThread, start_in_production
from workflows.client import connect

pytestmark = [pytest.mark.temporal, pytest.mark.slow]
TOKEN = "alertmanager-to-intake-token-0123"
ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")


async def test_a_real_alertmanager_drains_the_node_through_the_intake(
    make_settings, sqlite_url, tmp_path, request
) -> None:
    if ALERTMANAGER is None:
        missing_service("Alertmanager", "prometheus-alertmanager is not installed (Makefile APT_PACKAGES)")
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
    (tmp_path / "token").write_text(TOKEN)
    (tmp_path / "alertmanager.yml").write_text(f"""
route:
  receiver: fleetctl
  group_by: [alertname, Hostname]
  group_wait: 100ms
  group_interval: 1s
receivers:
  - name: fleetctl
    webhook_configs:
      - url: http://127.0.0.1:{http.server_port}/alertmanager
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
        await asyncio.to_thread(wait_ready, f"http://127.0.0.1:{port}/-/ready", am)
        # What Prometheus sends for DCGM exporter's rule `DCGM_FI_DEV_XID_ERRORS > 0`, the
        # value templated into an annotation.
        now = datetime.now(UTC)
        alert = [
            {
                "labels": {"alertname": "GpuXidError", "Hostname": node, "gpu": "3", "severity": "critical"},
                "annotations": {"summary": f"GPU 3 on {node} reported Xid 79", "value": "79"},
                "startsAt": now.isoformat(),
                "endsAt": (now + timedelta(minutes=5)).isoformat(),
            }
        ]
        post = urllib.request.Request(
            f"http://127.0.0.1:{port}/api/v2/alerts",
            data=json.dumps(alert).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        await asyncio.to_thread(urllib.request.urlopen, post, None, 10)
        await wait_for(lambda: queries.get_node(engine, node).state != "production", 60, "the alert to drain the node")
        await asyncio.to_thread(urllib.request.urlopen, post, None, 10)  # Prometheus re-sends a firing alert
        await asyncio.sleep(2.5)  # past group_interval: a re-notification would have come by now
    finally:
        am.terminate()
        am.wait(10)
        stop.set()
        await delivery
        http.shutdown()
    assert intake.accepted == 1 and intake.sent == 1
    (event,) = queries.health_events(engine, node)
    assert event.code == 79 and "GpuXidError" in event.message


async def test_an_unknown_node_is_refused_not_unreachable(make_settings, sqlite_url) -> None:
    transport = TemporalTransport(make_settings(sqlite_url))
    with pytest.raises(NodeRefused):
        await transport.send(
            "no-such-node", [{"node": "no-such-node", "source": "intake", "code": 13, "event_id": "x"}]
        )
