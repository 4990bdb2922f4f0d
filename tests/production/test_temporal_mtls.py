"""A worker and the CLI reach Temporal through an mTLS proxy (nginx verifying client
certificates), configured only through the `temporal` CLI's TEMPORAL_* variables; a client
certificate from another CA, or none, fails with one line."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from fleetctl.db import queries
from fleetctl.db.engine import dispose_all, get_engine
from tests.production.mtls_proxy import SERVER_NAME, Authority, nginx_binary, start_proxy
from tests.support.services import missing_service

pytestmark = pytest.mark.temporal
FLEETCTL = str(Path(sys.executable).parent / "fleetctl")
# A sim node's burn-in and admission run instantly (sim_time_scale 0); this bounds the whole
# walk new -> production through the proxy on a loaded machine.
PRODUCTION_WITHIN_S = 120


@pytest.fixture(scope="module")
def proxy(tmp_path_factory, temporal_address):
    if not nginx_binary():
        missing_service("nginx", "not installed (Debian package nginx; make system-deps)")
    directory = tmp_path_factory.mktemp("mtls")
    ca = Authority(directory, "fleet-ca")
    proxy = start_proxy(directory, temporal_address, ca)
    yield proxy, ca
    proxy.stop()


def environment(tmp_path: Path, address: str, ca_path: Path, client: tuple[Path, Path] | None) -> dict[str, str]:
    (tmp_path / "temporal.toml").write_text("")  # no profile of this machine's user leaks in
    queue = f"mtls-{uuid.uuid4().hex[:8]}"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path / "home"),
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "temporal.toml"),
        "TEMPORAL_ADDRESS": address,
        "TEMPORAL_TLS_SERVER_CA_CERT_PATH": str(ca_path),
        "TEMPORAL_TLS_SERVER_NAME": SERVER_NAME,
        "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
        "FLEETCTL_TASK_QUEUE": queue,
        "FLEETCTL_FLEET": queue,
        "FLEETCTL_OPERATOR": "tester@ci",
    }
    if client:
        env["TEMPORAL_TLS_CLIENT_CERT_PATH"], env["TEMPORAL_TLS_CLIENT_KEY_PATH"] = map(str, client)
    return env


def fleetctl(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([FLEETCTL, *args], env=env, capture_output=True, text=True, timeout=120)


def test_worker_and_cli_work_through_the_mtls_proxy(proxy, tmp_path):
    proxy, ca = proxy
    env = environment(tmp_path, proxy.address, ca.cert_path, ca.client("fleet-worker"))
    name = f"mtls-{uuid.uuid4().hex[:6]}"
    inventory = tmp_path / "inventory.yaml"
    # Two more nodes, new and idle: the admitted one's partners in burn-in's all-reduce pairs.
    inventory.write_text(
        "nodes:\n"
        + "".join(
            f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm, rack: r1, scheduler: sim}}\n"
            for n in (name, f"{name}-p1", f"{name}-p2")
        )
    )
    worker = subprocess.Popen(
        [FLEETCTL, "worker"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    try:
        started = worker.stdout.readline()
        assert f"Temporal {proxy.address} namespace default, mTLS (CA {ca.cert_path})" in started, started
        imported = fleetctl(env, "node", "import", str(inventory))
        assert imported.returncode == 0, imported.stderr
        admitted = fleetctl(env, "node", "admit", name)
        assert admitted.returncode == 0, admitted.stderr
        # Production is reached only if the worker, behind the same proxy, ran the burn-in.
        engine = get_engine(env["FLEETCTL_DB_URL"])
        deadline = time.monotonic() + PRODUCTION_WITHIN_S
        while queries.get_node(engine, name).state != "production" and time.monotonic() < deadline:
            assert worker.poll() is None, "the worker died"
            time.sleep(0.5)
        assert queries.get_node(engine, name).state == "production"
    finally:
        worker.terminate()
        worker.wait(30)
        dispose_all()


@pytest.mark.parametrize("client", ["another CA's certificate", "no certificate"])
def test_a_wrong_or_missing_client_certificate_fails_in_one_line(proxy, tmp_path, client):
    proxy, ca = proxy
    rogue = Authority(tmp_path, "rogue-ca").client("intruder") if client == "another CA's certificate" else None
    env = environment(tmp_path, proxy.address, ca.cert_path, rogue)
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "nodes:\n  - {name: refused, address: sim://refused, profile: h100-sxm, rack: r1, scheduler: sim}\n"
    )
    result = fleetctl(env, "node", "import", str(inventory))
    lines = result.stderr.strip().splitlines()
    assert result.returncode != 0 and len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: cannot reach Temporal at {proxy.address}"), lines[0]
    assert "check the client certificate and key" in lines[0]
