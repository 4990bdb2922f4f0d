"""The intake over real HTTP: the token, bounded bodies, one-line refusals that change
nothing, de-duplication, batching per node, and a Temporal that is down for a while.
Delivery here goes to a recording transport; tests/intake/test_alertmanager.py delivers
to a real worker."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import threading

import pytest

from fleetctl.agent.transport import NodeRefused, SendFailed
from fleetctl.intake import queue as intake_queue
from fleetctl.intake import server as intake_server
from fleetctl.intake.delivery import Intake
from fleetctl.intake.server import poll_node_conditions, serve_http
from fleetctl.text import MAX_TEXT
from tests.conftest import FIXTURES
from tests.schedulers.kube_emulator import NODES, KubeEmulator

TOKEN = "s3cret-token-for-tests-0123456789"


class Recorder:
    """Stands in for the node workflows: records each send, or fails while `down`."""

    def __init__(self) -> None:
        self.sends: list[tuple[str, list[dict]]] = []
        self.down, self.refuse = False, set()

    async def send(self, node: str, events: list[dict]) -> None:
        if self.down:
            raise SendFailed("Temporal unreachable")
        if node in self.refuse:
            raise NodeRefused(f"{node}: workflow not found")
        self.sends.append((node, events))


@pytest.fixture
def intake(tmp_path):
    recorder = Recorder()
    it = Intake(tmp_path / "spool", recorder)
    srv = serve_http(it, TOKEN, "127.0.0.1", 0)
    it.port, it.recorder = srv.server_port, recorder
    yield it
    srv.shutdown()
    it.close()


def post(port: int, path: str, body: bytes | str | dict, token: str | None = TOKEN, headers: dict | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    data = json.dumps(body).encode() if isinstance(body, dict) else body.encode() if isinstance(body, str) else body
    h = {
        "Content-Type": "application/json",
        **({"Authorization": f"Bearer {token}"} if token else {}),
        **(headers or {}),
    }
    conn.request("POST", path, body=data, headers=h)
    resp = conn.getresponse()
    out = resp.status, resp.read().decode()
    conn.close()
    return out


@pytest.mark.parametrize("token", [None, "wrong", TOKEN + "x", TOKEN[:-1]])
def test_without_the_token_nothing_is_accepted(intake, token) -> None:
    status, text = post(intake.port, "/events", {"node": "n1", "code": 79}, token)
    assert status == 401 and text == "a bearer token is required\n"
    assert intake.spool.depth == 0


@pytest.mark.parametrize(
    "body, words",
    [
        ("{not json", "not JSON"),
        ({"node": "n1"}, "a code or a message"),
        ({"events": [{"node": "n1", "code": 79}, {"node": "n2", "code": 2**40}]}, "integer"),
    ],
)
def test_a_bad_body_gets_400_and_one_line_and_changes_nothing(intake, body, words) -> None:
    status, text = post(intake.port, "/events", body)
    assert status == 400 and words in text and text.count("\n") == 1
    assert intake.spool.depth == 0 and intake.accepted == 0


def test_a_body_past_the_bound_is_refused_before_it_is_read(intake) -> None:
    status, text = post(intake.port, "/events", b"", headers={"Content-Length": str(intake_server.MAX_BODY + 1)})
    assert status == 413 and "bytes" in text
    assert intake.spool.depth == 0


def test_a_webhook_is_accepted_once_and_each_nodes_events_are_sent_in_order(intake) -> None:
    webhook = json.loads((FIXTURES / "intake" / "alertmanager_dcgm_xid.json").read_text())
    first = json.loads(post(intake.port, "/alertmanager", webhook)[1])
    assert (first["accepted"], first["duplicates"], first["nodes"]) == (
        1,
        0,
        {"gpu-node-07": {"accepted": 1, "duplicates": 0, "dropped": 0}},
    )
    assert json.loads(post(intake.port, "/alertmanager", webhook)[1])["duplicates"] == 1
    events = {
        "events": [{"node": "n1", "message": f"m{i}", "id": str(i)} for i in range(5)]
        + [{"node": "n2", "code": 31, "id": "x"}]
    }
    assert post(intake.port, "/events", events)[0] == 202
    asyncio.run(intake.deliver_once())
    sent: dict[str, list[str]] = {}
    for node, (event,) in intake.recorder.sends:  # one signal an event
        sent.setdefault(node, []).append(event["message"])
    assert sorted(sent) == ["gpu-node-07", "n1", "n2"] and sent["n1"] == [f"m{i}" for i in range(5)]
    assert intake.spool.depth == 0 and intake.sent == 7


def test_an_outage_keeps_the_events_and_one_refusing_node_blocks_no_other(intake, monkeypatch) -> None:
    monkeypatch.setattr(intake_queue, "MAX_ATTEMPTS", 2)
    monkeypatch.setattr(intake_queue, "FIRST_BACKOFF_S", 0.0)  # a refusing node is tried again at once
    intake.recorder.down = True
    post(
        intake.port,
        "/events",
        {"events": [{"node": "n1", "code": 13, "id": "a"}, {"node": "n2", "code": 13, "id": "b"}]},
    )
    assert asyncio.run(intake.deliver_once()) is False and intake.spool.depth == 2
    intake.recorder.down, intake.recorder.refuse = False, {"n2"}
    assert asyncio.run(intake.deliver_once()) is True
    assert [n for n, _ in intake.recorder.sends] == ["n1"] and intake.depth == 1
    asyncio.run(intake.deliver_once())  # n2's second refusal: given up, counted
    assert intake.depth == 0 and intake.spool.depth == 0 and intake.undeliverable == 1


def test_the_token_is_never_logged(intake, caplog) -> None:
    caplog.set_level(logging.DEBUG)
    post(intake.port, "/events", {"node": "n1", "code": 13})
    post(intake.port, "/events", {"node": "n1", "code": 13}, token="wrong-" + TOKEN)
    assert caplog.records and not any(TOKEN in r.getMessage() for r in caplog.records)


def test_npd_conditions_are_polled_through_the_api(intake, tmp_path) -> None:
    from kubernetes import client, config

    with KubeEmulator() as emu:
        emu.add_node("gpu-node-07")
        emu.add_node("gpu-node-08")
        emu.handler.objects[NODES, None, "gpu-node-07"]["status"]["conditions"].append(
            {
                "type": "XidError",
                "status": "True",
                "reason": "XidCritical",
                "lastTransitionTime": "2026-11-30T20:00:00Z",
                "message": "NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
            }
        )
        api = client.CoreV1Api(
            config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
        )
        stop = threading.Event()
        poller = threading.Thread(target=poll_node_conditions, args=(intake, api, ("XidError",), stop, 0.05))
        poller.start()
        try:
            deadline = threading.Event()
            for _ in range(200):  # polls 50 ms apart: at least two in 10 s under any load we expect
                if intake.duplicates >= 1:
                    break
                deadline.wait(0.05)
        finally:
            stop.set()
            poller.join(10)
    assert intake.accepted == 1 and intake.duplicates >= 1  # seen on every poll, accepted once
    (ev,) = intake.spool.pending(10)
    assert (ev["node"], ev["code"], ev["source"]) == ("gpu-node-07", 79, "npd")


def _serve(tmp_path, *args, env=None):
    import os
    import subprocess
    import sys

    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "--temporal-address",
            "127.0.0.1:1",
            "events",
            "serve",
            "--spool",
            str(tmp_path / "spool"),
            *args,
        ],
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("token", ["", "short", "has a space in it 0123456789"])
def test_serve_refuses_a_missing_or_weak_token_in_one_line(tmp_path, token) -> None:
    proc = _serve(tmp_path, env={"FLEETCTL_INTAKE_TOKEN": token})
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "bearer token" in err and len(err.strip().splitlines()) == 1, err


def test_serve_as_a_process_accepts_and_keeps_events_while_temporal_is_down(tmp_path, sqlite_url) -> None:
    import signal
    import time
    import urllib.request

    import yaml

    from fleetctl.connections.temporal_server import free_port
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.inventory.parse import parse_inventory

    queries.upsert_nodes(
        get_engine(sqlite_url),
        parse_inventory(
            yaml.safe_dump(  # the intake takes inventory nodes only
                {"nodes": [{"name": "n1", "address": "sim://n1", "profile": "h100-sxm"}]}
            )
        ),
    )
    port = free_port()
    proc = _serve(tmp_path, "--port", str(port), env={"FLEETCTL_INTAKE_TOKEN": TOKEN, "FLEETCTL_DB_URL": sqlite_url})
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _ = post(port, "/events", {"node": "n1", "code": 79, "id": "one"})
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, (
                    proc.stderr.read() if proc.poll() is not None else "not up"
                )
                time.sleep(0.1)
        assert status == 202
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            assert json.load(r)["spool_depth"] == 1
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and TOKEN not in err, err
    from fleetctl.agent.spool import Spool

    assert [e["event_id"] for e in Spool(tmp_path / "spool", 10).pending(10)] != []  # still there for the next start


def test_one_nodes_garbled_conditions_never_block_another_nodes(intake, tmp_path) -> None:
    """Through the real Kubernetes client against the emulator: gpu-node-01's conditions are
    garbled (an unreadable time, which the client's models fail the whole list on; wrong
    types; a 1 MB reason; an Xid line the parser cannot read; a lone surrogate), gpu-node-02
    has an XID 79, gpu-node-03 one garbled condition beside a good one. Each good condition
    is accepted, each garbled one counted and skipped."""
    from kubernetes import client, config

    xid79 = "NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, GPU has fallen off the bus."
    with KubeEmulator() as emu:
        for name in ("gpu-node-01", "gpu-node-02", "gpu-node-03"):
            emu.add_node(name)

        def conditions(name):
            return emu.handler.objects[NODES, None, name]["status"]["conditions"]

        conditions("gpu-node-01").extend(
            [
                {
                    "type": "XidError",
                    "status": "True",
                    "reason": "XidCritical",
                    "lastTransitionTime": "yesterday at noon",
                    "message": xid79,
                },
                {"type": "XidError", "status": "True", "reason": {"not": "a string"}, "message": xid79},
                {"type": ["XidError"], "status": "True", "message": xid79},
                {"type": "XidError", "status": "True", "message": 79},
                "not an object",
            ]
        )
        conditions("gpu-node-02").append(
            {
                "type": "XidError",
                "status": "True",
                "reason": "XidCritical",
                "lastTransitionTime": "2026-11-30T20:00:00Z",
                "message": xid79,
            }
        )
        conditions("gpu-node-03").extend(
            [
                {"type": "XidError", "status": "True", "lastTransitionTime": 1_700_000_000, "message": xid79},
                {
                    "type": "KernelDeadlock",
                    "status": "True",
                    "reason": "R" * 1_000_000 + "\ud800",
                    "lastTransitionTime": "2026-11-30T20:00:01Z",
                    "message": "NVRM: Xid (PCI:0000:2b:00) unreadable \ud800",
                },
            ]
        )
        api = client.CoreV1Api(
            config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kubeconfig")))
        )
        stop = threading.Event()
        poller = threading.Thread(
            target=poll_node_conditions, args=(intake, api, ("XidError", "KernelDeadlock"), stop, 0.05)
        )
        poller.start()
        try:
            deadline = threading.Event()
            for _ in range(200):  # polls 50 ms apart: at least two in 10 s under any load we expect
                if intake.duplicates >= 2:
                    break
                deadline.wait(0.05)
        finally:
            stop.set()
            poller.join(10)
    events = {ev["node"]: ev for ev in intake.spool.pending(10)}
    assert sorted(events) == ["gpu-node-02", "gpu-node-03"] and intake.accepted == 2
    assert (events["gpu-node-02"]["code"], events["gpu-node-02"]["severity"]) == (79, "critical")
    deadlock = events["gpu-node-03"]["message"]
    assert deadlock.startswith("KernelDeadlock: RRR") and len(deadlock) <= MAX_TEXT
    deadlock.encode("utf-8")  # the surrogate replaced: nothing unencodable goes on
    polls = intake.duplicates // 2 + 1  # the first accepted both, each later one saw both again
    assert intake.npd_skipped == 6 * polls  # five on gpu-node-01, one on gpu-node-03, on every poll


@pytest.mark.parametrize(
    "body, words",
    [
        (b'{"node": "n1", "code": 1' + b"0" * 5000 + b"}", "events[0].code: the code must be an integer"),
        (
            b'{"events": [{"node": "n1", "code": 79}, {"node": "n2", "code": 18446744073709551616}]}',
            "events[1].code: the code must be an integer",
        ),
        (b'{"node": "n1", "message": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "nested deeper than"),
        (b'{"node": "n1", "message": "bad \xff byte", "severity": "warning"}', "not UTF-8 JSON"),
        (b'{"node": "n1", "code": 79, "\xed\xa0\x80": 1}', "unknown field '\\ud800'"),
    ],
)
def test_numbers_nesting_and_bytes_are_refused_with_one_line_naming_the_field(intake, body, words) -> None:
    status, text = post(intake.port, "/events", body)
    assert status == 400 and words in text and text.count("\n") == 1, text
    assert intake.spool.depth == 0 and intake.accepted == 0


def test_text_that_cannot_be_encoded_is_accepted_replaced_and_bounded(intake) -> None:
    """A lone surrogate (JSON's escape) reaches the node's workflow as U+FFFD: recorded, it
    failed the record activity for ever and held up every later event of the node."""
    body = '{"node": "n1", "id": "s1", "message": "GPU \\ud800 %s", "severity": "warning"}' % ("x" * 100_000)
    assert post(intake.port, "/events", body)[0] == 202
    asyncio.run(intake.deliver_once())
    ((_node, (event,)),) = intake.recorder.sends
    assert event["message"].startswith("GPU \ufffd xxx") and len(event["message"]) == 2048
    event["message"].encode("utf-8")
