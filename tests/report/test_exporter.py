"""The Prometheus exporter served on 127.0.0.1, scraped over HTTP, on the hand-worked history;
and the Grafana dashboard only asks for what the exporter exports."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetctl import metrics_exporter
from fleetctl.db.engine import get_engine
from fleetctl.temporal_server import free_port
from tests.report import history

DASHBOARD = Path(metrics_exporter.__file__).parent / "report" / "grafana-dashboard.json"
NOW = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def scrape(port: int) -> dict[tuple[str, frozenset], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: dict, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@pytest.fixture
def served(db_url):
    engine = get_engine(db_url)
    history.seed(engine, NOW)
    server = metrics_exporter.serve(engine, 0, "127.0.0.1")
    yield server.server_port
    server.shutdown()


def test_exporter_serves_the_fleet(served) -> None:
    samples = scrape(served)

    nodes = {dict(labels)["state"]: value for (name, labels), value in samples.items() if name == "fleetctl_nodes"}
    assert nodes == {"new": 0, "firmware": 0, "burn_in": 0, "admission": 0, "production": 9, "draining": 0,
                     "maintenance": 1, "rma": 1, "retired": 1}
    assert sample(samples, "fleetctl_nodes_by_rack", rack="r2", profile="h100-sxm", state="rma") == 1
    assert sample(samples, "fleetctl_nodes_by_rack", rack="r3", profile="a100-sxm-80gb", state="retired") == 1

    assert sample(samples, "fleetctl_check_runs_total", check="nccl-allreduce", status="pass") == 11
    assert sample(samples, "fleetctl_check_runs_total", check="nccl-allreduce", status="fail") == 2
    # Every NCCL run took 90 s, every HPL run 600 s.
    assert sample(samples, "fleetctl_check_duration_seconds_bucket", check="nccl-allreduce", le="60.0") == 0
    assert sample(samples, "fleetctl_check_duration_seconds_bucket", check="nccl-allreduce", le="120.0") == 13
    assert sample(samples, "fleetctl_check_duration_seconds_sum", check="nccl-allreduce") == 13 * 90
    assert sample(samples, "fleetctl_check_duration_seconds_count", check="hpl") == 12
    assert sample(samples, "fleetctl_check_duration_seconds_bucket", check="hpl", le="300.0") == 0
    assert sample(samples, "fleetctl_check_duration_seconds_bucket", check="hpl", le="+Inf") == 12

    assert sample(samples, "fleetctl_drains_total", actor_kind="automation") == 5
    assert sample(samples, "fleetctl_drains_total", actor_kind="operator") == 1
    failures = {dict(labels)["cause"]: value for (name, labels), value in samples.items()
                if name == "fleetctl_node_failures_total"}
    assert failures == {"xid 48": 3, "xid 79": 1, "check nccl-allreduce": 1}

    assert sample(samples, "fleetctl_job_restarts_total", status="succeeded") == 2
    assert sample(samples, "fleetctl_job_restarts_total", status="failed") == 1
    assert sample(samples, "fleetctl_job_restart_latency_seconds_count") == 2
    assert sample(samples, "fleetctl_job_restart_latency_seconds_sum") == 210
    assert [sample(samples, "fleetctl_job_restart_latency_seconds_bucket", le=le) for le in ("60.0", "90.0", "120.0")] \
        == [0, 1, 2]

    assert sample(samples, "fleetctl_guard_decisions_total", fleet="default", decision="grant") == 4
    assert sample(samples, "fleetctl_guard_decisions_total", fleet="default", decision="deny") == 1
    # default: opened, then closed by an operator; blue: open.
    assert sample(samples, "fleetctl_breaker_open", fleet="default") == 0
    assert sample(samples, "fleetctl_breaker_open", fleet="blue") == 1


def test_grafana_dashboard_only_uses_exported_metrics(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    history.seed(engine, NOW)
    server = metrics_exporter.serve(engine, 0, "127.0.0.1")
    try:
        exported = {name for name, _ in scrape(server.server_port)}
    finally:
        server.shutdown()
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    used = {name for expr in exprs for name in re.findall(r"\bfleetctl_\w+", expr)}
    assert exprs and used <= exported, used - exported
    # Each of the exporter's families appears on the dashboard.
    families = {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in exported}
    assert families <= {re.sub(r"_(total|bucket|count|sum)$", "", n) for n in used}, families


def test_metrics_serve_command(sqlite_url) -> None:
    history.seed(get_engine(sqlite_url), NOW)
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "fleetctl.cli.main", "--db-url", sqlite_url, "metrics", "serve",
                             "--port", str(port), "--address", "127.0.0.1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                samples = scrape(port)
                break
            except OSError:
                assert proc.poll() is None, proc.communicate()
                assert time.monotonic() < deadline, "fleetctl metrics serve did not answer"
                time.sleep(0.1)
        assert sample(samples, "fleetctl_nodes", state="production") == 9
    finally:
        proc.terminate()
        _, stderr = proc.communicate(timeout=10)
    assert f"http://127.0.0.1:{port}/metrics" in stderr
