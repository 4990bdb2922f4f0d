"""`fleetctl events serve` and `fleetctl agent` as operators run them, over https with a
CA made in the test and each agent holding its own node's credential: one node's
credential cannot speak for another, and 200 connections that never finish their headers,
under a low open-file limit, keep no real heartbeat out."""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import ssl
import subprocess
import sys
import time

import pytest
import yaml

from fleetctl.connections.temporal_server import free_port
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from tests.intake.test_server import TOKEN
from tests.production.mtls_proxy import Authority

CLI = [sys.executable, "-m", "fleetctl.cli.main"]
STARTUP_S = 60  # an interpreter starting on a loaded machine


@pytest.fixture
def fleet(tmp_path, sqlite_url):
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(
        engine,
        parse_inventory(
            yaml.safe_dump(
                {
                    "nodes": [
                        {"name": name, "address": f"sim://{name}", "profile": "h100-sxm"} for name in ("gpu-a", "gpu-b")
                    ]
                }
            )
        ),
    )
    ca = Authority(tmp_path, "intake-ca")
    env = {
        **os.environ,
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_DB_URL": sqlite_url,
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
    }
    env.pop("FLEETCTL_INTAKE_TOKEN", None)
    return engine, ca, env


def issue(env, node: str, hashes, tmp_path):
    done = subprocess.run(
        [*CLI, "events", "credential", "issue", node, "--credentials", str(hashes)],
        env=env,
        capture_output=True,
        text=True,
        timeout=STARTUP_S,
    )
    assert done.returncode == 0, done.stderr
    path = tmp_path / f"{node}.credential"
    path.write_text(done.stdout)
    return path


def start_intake(env, ca, tmp_path, *extra, preexec_fn=None):
    port = free_port()
    cert, key = ca.server("intake")
    (tmp_path / "operator-token").write_text(TOKEN + "\n")
    proc = subprocess.Popen(
        [
            *CLI,
            "events",
            "serve",
            "--port",
            str(port),
            "--spool",
            str(tmp_path / "spool"),
            "--token-file",
            str(tmp_path / "operator-token"),
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(key),
            *extra,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "intake.log", "wb"),
        preexec_fn=preexec_fn,
    )
    context = ssl.create_default_context(cafile=ca.cert_path)
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            with context.wrap_socket(
                socket.create_connection(("127.0.0.1", port), timeout=5), server_hostname="127.0.0.1"
            ):
                break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "intake.log").read_text()[-500:]
            time.sleep(0.2)
    return proc, port, context


def stop(*procs) -> list[int]:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    return [proc.wait(30) for proc in procs]


def seen(engine, node: str):
    return queries.get_node(engine, node).agent_seen_at


def test_each_agent_is_heard_for_its_own_node_and_refused_for_another(fleet, tmp_path) -> None:
    """Two agent processes, gpu-a's and gpu-b's, both holding gpu-a's credential, both
    sending heartbeats and (--events-to-intake) an XID 79: the intake takes gpu-a's and
    refuses every word for gpu-b."""
    engine, ca, env = fleet
    hashes = tmp_path / "agents.hashes"
    mine = issue(env, "gpu-a", hashes, tmp_path)
    intake, port, _ = start_intake(env, ca, tmp_path, "--credentials", str(hashes))
    log = tmp_path / "kern.log"
    log.write_text(
        "2026-11-30T20:00:01+00:00 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, "
        "GPU has fallen off the bus.\n"
    )
    agents = []
    try:
        for node in ("gpu-a", "gpu-b"):  # gpu-b's agent holds gpu-a's credential
            agents.append(
                subprocess.Popen(
                    [
                        *CLI,
                        "agent",
                        node,
                        "--file",
                        str(log),
                        "--spool",
                        str(tmp_path / f"agent-{node}"),
                        "--metrics-port",
                        "0",
                        "--sample-interval",
                        "0",
                        "--heartbeat-url",
                        f"https://127.0.0.1:{port}",
                        "--heartbeat-token-file",
                        str(mine),
                        "--heartbeat-ca",
                        str(ca.cert_path),
                        "--heartbeat-interval",
                        "1",
                        "--events-to-intake",
                    ],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=open(tmp_path / f"agent-{node}.log", "wb"),
                )
            )
        deadline = time.monotonic() + STARTUP_S
        while seen(engine, "gpu-a") is None:
            assert all(a.poll() is None for a in agents) and time.monotonic() < deadline
            time.sleep(0.2)
        # gpu-b's agent beats every second as long as gpu-a's did: five more of its beats
        # (and the intake's writes, one a second) are time enough to have been heard.
        time.sleep(5)
    finally:
        codes = stop(*agents, intake)
    assert codes == [0, 0, 0], (tmp_path / "intake.log").read_text()[-500:]
    assert seen(engine, "gpu-a") is not None and seen(engine, "gpu-b") is None
    from fleetctl.agent.spool import Spool

    # Temporal is away: what the intake took waits in its spool. gpu-a's XID 79 only.
    taken = [(e["node"], e["code"], e["source"]) for e in Spool(tmp_path / "spool", 10).pending(10)]
    assert taken == [("gpu-a", 79, "agent")]
    assert "speaks for that node only, not gpu-b" in (tmp_path / "agent-gpu-b.log").read_text()
    secret = mine.read_text().strip()
    logs = "".join((tmp_path / name).read_text() for name in ("intake.log", "agent-gpu-a.log", "agent-gpu-b.log"))
    assert secret not in logs and secret not in hashes.read_text()


def test_slow_clients_under_a_low_file_limit_keep_no_real_heartbeat_out(fleet, tmp_path) -> None:
    """The intake at 128 open files (its cap lowered to fit, said at start); 200 connections
    that start a TLS hello and send nothing more; a real heartbeat is answered at once, long
    before the header timeout (30 s) would have closed any of them: past the cap, the
    longest-waiting slow client is closed for each newcomer, and no accept fails for want
    of a file."""
    _engine, ca, env = fleet

    def low_file_limit():
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))

    intake, port, context = start_intake(env, ca, tmp_path, "--header-timeout", "30", preexec_fn=low_file_limit)
    slow = []
    try:
        for _ in range(200):
            sock = socket.create_connection(("127.0.0.1", port), timeout=30)
            sock.sendall(b"\x16\x03\x01")  # the start of a TLS hello, and nothing more
            slow.append(sock)
        import http.client

        for node in ("gpu-a", "gpu-b"):
            started = time.monotonic()
            conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
            conn.request(
                "POST",
                "/heartbeat",
                body=json.dumps({"node": node}),
                headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
            )
            answer = conn.getresponse()
            assert (answer.status, json.loads(answer.read())) == (202, {"heard": node})
            assert time.monotonic() - started < 5
            conn.close()
    finally:
        for sock in slow:
            sock.close()
        codes = stop(intake)
    text = (tmp_path / "intake.log").read_text()
    assert codes == [0] and "lowered to 64: the open-file limit is 128" in text, text[-500:]
    assert "Traceback" not in text and "Too many open files" not in text
