"""A real Prometheus (Debian's `prometheus`) on 127.0.0.1, scraping what a test serves, and
the one way a test asks it something."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleetctl.connections.temporal_server import free_port
from tests.support.services import missing_service, wait_ready

PROMTOOL, PROMETHEUS = shutil.which("promtool"), shutil.which("prometheus")
SCRAPE_INTERVAL_S = 1


def require_prometheus() -> None:
    if PROMTOOL is None or PROMETHEUS is None:
        missing_service("Prometheus", "Debian's prometheus (with promtool) is not installed (Makefile APT_PACKAGES)")


@pytest.fixture
def needs_prometheus() -> None:
    """For a test module that imports it: the test needs promtool and prometheus."""
    require_prometheus()


@contextmanager
def running_prometheus(directory: Path, targets: Sequence[str], job: str = "fleetctl") -> Iterator[str]:
    """A Prometheus scraping `targets` (host:port) every SCRAPE_INTERVAL_S; yields its URL."""
    require_prometheus()
    port = free_port()
    config = directory / "prometheus.yml"
    config.write_text(
        json.dumps(
            {  # JSON is YAML
                "global": {"scrape_interval": f"{SCRAPE_INTERVAL_S}s", "evaluation_interval": f"{SCRAPE_INTERVAL_S}s"},
                "scrape_configs": [{"job_name": job, "static_configs": [{"targets": list(targets)}]}],
            }
        )
    )
    with open(directory / "prometheus.log", "wb") as log:
        proc = subprocess.Popen(
            [
                PROMETHEUS,
                f"--config.file={config}",
                f"--storage.tsdb.path={directory / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_ready(f"{url}/-/ready", proc)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def query(url: str, expr: str) -> dict:
    with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": expr}), timeout=10) as r:
        return json.loads(r.read())


def wait_for_result(url: str, expr: str, done, timeout_s: float = 30) -> list:
    """The query's result once `done(result)` holds: the first scrapes come within a scrape
    interval or two; the bound is many of them."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = query(url, expr)["data"]["result"]
        if done(result):
            return result
        assert time.monotonic() < deadline, f"Prometheus: {expr} never gave what was waited for: {result}"
        time.sleep(SCRAPE_INTERVAL_S / 5)
