"""The intake on a hostile network, over real sockets on 127.0.0.1: clients that never
finish their headers or bodies, more connections than the cap, clients that vanish
mid-request, ghost node names, replayed POSTs without an id, one node's credential speaking
for another, and TLS (with and without client certificates)."""

from __future__ import annotations

import http.client
import json
import logging
import os
import socket
import ssl
import struct
import subprocess
import time

import pytest

from fleetctl.intake.credentials import Credentials, new_credential, token_hash
from fleetctl.intake.delivery import Intake
from fleetctl.intake.server import KnownNodes, Limits, serve_http
from fleetctl.server_tls import tls_context
from tests.intake.test_server import TOKEN, Recorder, _serve, post
from tests.production.mtls_proxy import Authority
from tests.support.tls_renewal import renewal_served_and_a_broken_one_not

HEADER_TIMEOUT_S = 0.5
INVENTORY = {"n1", "n2", "n3"}
# A refusal at start-up comes before the intake binds: the interpreter's start, as for a weak token.
SERVE_REFUSES_S = 60


@pytest.fixture
def hashes(tmp_path):
    return tmp_path / "agents.hashes"


@pytest.fixture
def make_intake(tmp_path, hashes):
    servers = []

    def make(
        limits: Limits = Limits(header_timeout_s=HEADER_TIMEOUT_S, body_timeout_s=HEADER_TIMEOUT_S),
        tls=None,
        heartbeats=None,
    ):
        from fleetctl.intake.heartbeats import Heartbeats

        it = Intake(tmp_path / f"spool-{len(servers)}", Recorder())
        it.beats = heartbeats or Heartbeats(len)
        if not hashes.exists():
            hashes.write_text("")
        srv = serve_http(
            it,
            Credentials(TOKEN, hashes),
            "127.0.0.1",
            0,
            it.beats,
            limits=limits,
            known=KnownNodes(lambda names: names & INVENTORY),
            tls=tls,
        )
        it.port, it.server = srv.server_port, srv
        servers.append((srv, it))
        return it

    yield make
    for srv, it in servers:
        srv.shutdown()
        srv.server_close()
        it.close()


def heartbeat(port: int, node: str, token: str = TOKEN) -> tuple[int, str]:
    return post(port, "/heartbeat", {"node": node}, token)


def slow_client(port: int) -> socket.socket:
    """A connection that sends half a request line and then nothing."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(b"POST /heartbeat HTTP/1.1\r\nHost: x\r\n")
    return sock


def closed_after(sock: socket.socket, trickle: bool = False) -> float:
    """Seconds until the server closes `sock` (a read gives EOF or a reset); with `trickle`,
    a header byte is sent every 0.1 s meanwhile (each read is quick, the whole never ends)."""
    start = time.monotonic()
    sock.settimeout(0.1)
    while time.monotonic() - start < 30:
        try:
            if trickle:
                sock.sendall(b"X")
            if sock.recv(4096) == b"":
                break
        except TimeoutError:
            continue
        except OSError:  # reset, or a send on a connection the server shut
            break
    return time.monotonic() - start


@pytest.mark.parametrize("trickle", [False, True])
def test_a_client_that_never_finishes_its_headers_is_closed_within_the_header_timeout(make_intake, trickle) -> None:
    intake = make_intake()
    took = closed_after(slow_client(intake.port), trickle)
    # The watcher looks every quarter of the bound: closed between the bound and 1.25 times
    # it, plus scheduling on a loaded machine.
    assert HEADER_TIMEOUT_S <= took < HEADER_TIMEOUT_S * 1.25 + 2, took
    assert heartbeat(intake.port, "n1")[0] == 202


def test_a_body_that_never_ends_is_closed_within_the_body_timeout(make_intake) -> None:
    intake = make_intake(Limits(header_timeout_s=30, body_timeout_s=HEADER_TIMEOUT_S))
    sock = socket.create_connection(("127.0.0.1", intake.port), timeout=30)
    sock.sendall(
        f"POST /heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        "Content-Length: 100\r\n\r\n{".encode()
    )
    took = closed_after(sock, trickle=True)
    assert HEADER_TIMEOUT_S <= took < HEADER_TIMEOUT_S * 1.25 + 2, took
    assert intake.beats.heard == 0


def test_past_the_connection_cap_slow_clients_make_room_and_real_heartbeats_are_served(make_intake) -> None:
    """200 connections that never finish their headers, against a cap of 20: the intake holds
    at most 20 (the oldest waiting one closed for each newcomer), and every real heartbeat
    sent meanwhile is answered at once."""
    intake = make_intake(Limits(header_timeout_s=60, body_timeout_s=60, max_connections=20))
    slow = [slow_client(intake.port) for _ in range(200)]
    try:
        for node in ("n1", "n2", "n3"):
            started = time.monotonic()
            assert heartbeat(intake.port, node) == (202, json.dumps({"heard": node}))
            assert time.monotonic() - started < 5  # not behind the 60 s header timeout
        assert intake.server.evicted >= 180 and len(intake.server._open) <= 20
    finally:
        for sock in slow:
            sock.close()


def test_past_the_cap_with_every_connection_busy_a_newcomer_is_refused_at_once(make_intake) -> None:
    intake = make_intake(Limits(header_timeout_s=60, body_timeout_s=60, max_connections=3))
    busy = []
    for _ in range(3):  # past their headers, waiting for a body that does not come
        sock = socket.create_connection(("127.0.0.1", intake.port), timeout=30)
        sock.sendall(
            f"POST /heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Length: 100\r\n\r\n".encode()
        )
        busy.append(sock)
    deadline = time.monotonic() + 10
    while sum(phase == "body" for phase, _ in intake.server._open.values()) < 3:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    started = time.monotonic()
    newcomer = socket.create_connection(("127.0.0.1", intake.port), timeout=30)
    answer = newcomer.makefile("rb").read()  # answered before it says anything, then closed
    assert answer.startswith(b"HTTP/1.1 503 ") and answer.endswith(b"too many connections; try again\n")
    assert time.monotonic() - started < 5
    assert intake.server.refused == 1 and intake.beats.heard == 0
    for sock in busy:
        sock.close()


@pytest.mark.parametrize("sent", ["headers", "part of the body", "the whole request"])
def test_a_client_that_vanishes_mid_request_is_one_debug_line_not_a_traceback(make_intake, caplog, capfd, sent) -> None:
    intake = make_intake(Limits(header_timeout_s=30, body_timeout_s=30))
    caplog.set_level(logging.DEBUG, logger="fleetctl.intake")
    body = json.dumps({"node": "n1"}).encode()
    request = (
        f"POST /heartbeat HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n".encode()
    )
    request += {"headers": b"", "part of the body": body[:3], "the whole request": body}[sent]
    for _ in range(20):  # a reset before, during or after the intake reads: each is a client gone
        sock = socket.create_connection(("127.0.0.1", intake.port), timeout=30)
        sock.sendall(request)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()  # a reset
    deadline = time.monotonic() + 10
    while intake.server._open:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert heartbeat(intake.port, "n1")[0] == 202
    assert "Traceback" not in capfd.readouterr().err
    assert not [r for r in caplog.records if r.levelno > logging.INFO or r.exc_info]


def test_unknown_nodes_events_are_counted_and_never_spooled_and_cost_the_known_node_nothing(make_intake) -> None:
    """A batch with a known node's XID 79 and seven ghosts' events: the XID 79 is taken, the
    ghosts' counted (each named in the answer); a batch of ghosts alone is refused, naming them."""
    intake = make_intake()
    body = {"events": [{"node": "n1", "code": 79, "id": "a"}] + [{"node": f"ghost-{i}", "code": 79} for i in range(7)]}
    status, text = post(intake.port, "/events", body)
    answer = json.loads(text)
    assert (status, answer["accepted"], answer["not_in_inventory"]) == (202, 1, 7), text
    assert answer["nodes"]["n1"]["accepted"] == 1 and answer["nodes"]["ghost-3"] == {"not_in_inventory": 1}
    assert [e["node"] for e in intake.spool.pending(10)] == ["n1"] and intake.not_in_inventory == 7
    ghosts = {"events": [{"node": f"ghost-{i}", "code": 79} for i in range(7)]}
    assert post(intake.port, "/events", ghosts) == (
        422,
        "not in the inventory: ghost-0, ghost-1, ghost-2, ghost-3, ghost-4 and 2 more\n",
    )
    assert heartbeat(intake.port, "ghost-0") == (422, "not in the inventory: ghost-0\n")
    assert intake.spool.depth == 1 and intake.not_in_inventory == 14 and intake.beats.heard == 0


def test_a_node_name_with_a_trailing_newline_is_no_node_name(make_intake) -> None:
    intake = make_intake()
    status, text = post(intake.port, "/events", {"node": "n1\n", "code": 79})
    assert status == 400 and "events[0].node: not a node name" in text
    assert intake.spool.depth == 0


def test_a_replayed_post_without_an_id_counts_once_within_the_window(make_intake, monkeypatch) -> None:
    from fleetctl.intake import delivery

    def taken(body) -> tuple[int, int, int]:
        status, text = post(intake.port, "/events", body)
        answer = json.loads(text)
        return status, answer["accepted"], answer["duplicates"]

    intake = make_intake()
    body = {"node": "n1", "code": 48, "message": "DBE"}
    assert taken(body) == (202, 1, 0)
    assert taken(body) == (202, 0, 1)
    assert taken({**body, "code": 63}) == (202, 1, 0)  # another fault is another event
    monkeypatch.setattr(delivery, "CONTENT_WINDOW_S", 0.0)  # the window past: the same fault again is new
    assert taken(body) == (202, 1, 0)
    ids = [e["event_id"] for e in intake.spool.pending(10)]
    assert len(ids) == 3 and len(set(ids)) == 3  # each its own id: the workflow keeps all three


def test_a_nodes_credential_speaks_for_that_node_only(make_intake, hashes) -> None:
    mine, other = new_credential(), new_credential()
    hashes.write_text(f"n1 {token_hash(mine)}\nn2 {token_hash(other)}\n")
    intake = make_intake()
    assert heartbeat(intake.port, "n1", mine) == (202, json.dumps({"heard": "n1"}))
    assert heartbeat(intake.port, "n2", mine) == (403, "the credential of n1 speaks for that node only, not n2\n")
    assert post(intake.port, "/events", {"node": "n1", "code": 79, "id": "x"}, mine)[0] == 202
    for body in ({"node": "n2", "code": 79}, {"events": [{"node": "n1", "code": 79}, {"node": "n3", "code": 79}]}):
        status, text = post(intake.port, "/events", body, mine)
        assert status == 403 and "speaks for that node only" in text
    webhook = {"version": "4", "status": "firing", "alerts": []}
    assert post(intake.port, "/alertmanager", webhook, mine)[0] == 403
    assert post(intake.port, "/events", {"node": "n3", "code": 79, "id": "y"})[0] == 202  # the operator: any node
    assert heartbeat(intake.port, "n1", token_hash(mine))[0] == 401  # the hash is no credential
    assert [e["node"] for e in intake.spool.pending(10)] == ["n1", "n3"] and intake.beats.heard == 1


def test_a_revoked_credential_is_refused_without_a_restart(make_intake, hashes, tmp_path) -> None:
    from fleetctl.intake import credentials

    secret = new_credential()
    hashes.write_text(f"n1 {token_hash(secret)}\n")
    intake = make_intake()
    assert heartbeat(intake.port, "n1", secret)[0] == 202
    hashes.write_text("# n1 revoked\n")
    deadline = time.monotonic() + credentials.RELOAD_CHECK_S + 10
    while heartbeat(intake.port, "n1", secret)[0] != 401:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    hashes.write_text("garbage\n")  # a broken file changes nothing: the last good one holds
    time.sleep(credentials.RELOAD_CHECK_S * 1.5)
    assert heartbeat(intake.port, "n1", secret)[0] == 401


def test_removing_the_credentials_file_revokes_every_agent_credential(make_intake, hashes) -> None:
    """Deleting the file is how a site takes every credential back: what is gone cannot still
    grant (a malformed file, by contrast, keeps the last good one). Written again, it grants."""
    from fleetctl.intake import credentials

    secret = new_credential()
    hashes.write_text(f"n1 {token_hash(secret)}\n")
    intake = make_intake()
    assert heartbeat(intake.port, "n1", secret)[0] == 202
    hashes.unlink()
    deadline = time.monotonic() + credentials.RELOAD_CHECK_S + 10
    while heartbeat(intake.port, "n1", secret)[0] != 401:
        assert time.monotonic() < deadline, "the removed file's credential still heard"
        time.sleep(0.1)
    hashes.write_text(f"n1 {token_hash(secret)}\n")
    deadline = time.monotonic() + credentials.RELOAD_CHECK_S + 10
    while heartbeat(intake.port, "n1", secret)[0] != 202:
        assert time.monotonic() < deadline, "the file written again was not read"
        time.sleep(0.1)


def test_a_running_intake_keeps_its_credentials_when_the_file_names_a_node_twice(make_intake, hashes, caplog) -> None:
    """One credential a node: a file naming n1 twice (a second line added instead of the
    first replaced) is refused whole at the reload, said once, and n1's second credential is
    never heard, so revoking "n1's credential" cannot leave one behind."""
    from fleetctl.intake import credentials

    first, second = new_credential(), new_credential()
    hashes.write_text(f"n1 {token_hash(first)}\n")
    intake = make_intake()
    assert heartbeat(intake.port, "n1", first)[0] == 202
    caplog.set_level(logging.WARNING, "fleetctl.intake")
    hashes.write_text(f"n1 {token_hash(first)}\nn2 {token_hash(new_credential())}\nn1 {token_hash(second)}\n")
    deadline = time.monotonic() + credentials.RELOAD_CHECK_S + 10
    while not [r for r in caplog.records if "has a credential already" in r.getMessage()]:
        assert time.monotonic() < deadline, "the reload never refused the file"
        heartbeat(intake.port, "n1", first)  # a request is what rereads a changed file
        time.sleep(0.1)
    (said,) = [r.getMessage() for r in caplog.records if r.name == "fleetctl.intake"]
    assert said == f"{hashes}:3: n1 has a credential already (the credentials read before still hold)"
    assert heartbeat(intake.port, "n1", second)[0] == 401 and heartbeat(intake.port, "n1", first)[0] == 202


def _tls_client(authority: Authority, client: tuple | None = None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=authority.cert_path)
    if client:
        context.load_cert_chain(*client)
    return context


def https_heartbeat(port: int, context: ssl.SSLContext, node: str = "n1") -> tuple[int, str]:
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    conn.request(
        "POST",
        "/heartbeat",
        body=json.dumps({"node": node}),
        headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
    )
    resp = conn.getresponse()
    out = resp.status, resp.read().decode()
    conn.close()
    return out


def test_the_intake_speaks_tls_that_a_verifying_client_accepts(make_intake, tmp_path) -> None:
    ca = Authority(tmp_path, "intake-ca")
    intake = make_intake(tls=tls_context(*ca.server("intake")))
    assert https_heartbeat(intake.port, _tls_client(ca)) == (202, json.dumps({"heard": "n1"}))
    with pytest.raises(ssl.SSLCertVerificationError):  # a client trusting another CA refuses it
        https_heartbeat(intake.port, ssl.create_default_context(cafile=Authority(tmp_path / "..", "other").cert_path))
    with pytest.raises((ConnectionError, http.client.RemoteDisconnected)):  # plain HTTP is no request
        heartbeat(intake.port, "n1")
    assert intake.beats.heard == 1
    took = closed_after(socket.create_connection(("127.0.0.1", intake.port), timeout=30))  # never says hello
    assert took < HEADER_TIMEOUT_S * 1.25 + 2


def test_a_renewed_certificate_is_served_without_a_restart_and_a_broken_one_is_not(make_intake, tmp_path) -> None:
    """cert-manager renews the intake's certificate in place (a Secret rotated under its mount):
    new connections get the new one within the check interval, the intake never restarted. A
    renewal whose key does not match keeps the certificate served until then."""
    ca = Authority(tmp_path, "intake-ca")
    check_s = 1.0
    intake = make_intake(tls=tls_context(*ca.server("intake"), check_s=check_s))
    client = _tls_client(ca)

    def answers() -> None:
        assert https_heartbeat(intake.port, client)[0] == 202

    renewal_served_and_a_broken_one_not(
        intake.port, client, lambda: ca.server("intake"), check_s, answers, tmp_path / ".."
    )


def test_with_a_client_ca_only_clients_it_signed_are_heard(make_intake, tmp_path) -> None:
    ca = Authority(tmp_path, "intake-ca")
    intake = make_intake(tls=tls_context(*ca.server("intake"), client_ca=ca.cert_path))
    assert https_heartbeat(intake.port, _tls_client(ca, ca.client("agent-n1")))[0] == 202
    with pytest.raises((ssl.SSLError, ConnectionError)):
        https_heartbeat(intake.port, _tls_client(ca))
    assert intake.beats.heard == 1


def fleetctl(*args: str, env: dict | None = None):
    from typer.testing import CliRunner

    from fleetctl.cli.main import app

    return CliRunner().invoke(
        app, ["--temporal-address", "127.0.0.1:1", *args], env={"FLEETCTL_CONFIG": "/dev/null", **(env or {})}
    )


@pytest.mark.parametrize(
    "raw, words",
    [
        (b"\x00\x01binary-token-0123456789", "printable ASCII without spaces"),
        ("t\u00f6ken-0123456789abcdef".encode(), "printable ASCII without spaces"),
        (b"token-0123456789abcdef\nsecond-line", "one line"),
        (b"\n", "empty"),
        (b"x" * 5000, "longer than 4096"),
    ],
)
def test_a_token_file_that_is_not_one_ascii_line_is_one_clear_error(tmp_path, raw, words) -> None:
    path = tmp_path / "token"
    path.write_bytes(raw)
    for args in (
        ["events", "serve", "--spool", str(tmp_path / "s"), "--token-file", str(path)],
        [
            "agent",
            "n1",
            "--file",
            str(path),
            "--spool",
            str(tmp_path / "a"),
            "--metrics-port",
            "0",
            "--heartbeat-url",
            "http://127.0.0.1:9",
            "--heartbeat-token-file",
            str(path),
        ],
    ):
        result = fleetctl(*args)
        assert result.exit_code == 2 and words in result.output and f"{path}" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1, result.output
    assert not (tmp_path / "s").exists()


def test_a_token_file_of_one_line_with_its_newline_is_read() -> None:
    from fleetctl.intake.credentials import read_token

    assert read_token(b"abc\n", "f") == read_token(b"abc\r\n", "f") == read_token(b"abc", "f") == "abc"


@pytest.fixture
def inventory_db(sqlite_url) -> dict:
    """The environment of a CLI whose database holds the nodes INVENTORY names."""
    import yaml

    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.inventory.parse import parse_inventory

    queries.upsert_nodes(
        get_engine(sqlite_url),
        parse_inventory(
            yaml.safe_dump(
                {
                    "nodes": [
                        {"name": name, "address": f"sim://{name}", "profile": "h100-sxm"} for name in sorted(INVENTORY)
                    ]
                }
            )
        ),
    )
    return {"FLEETCTL_DB_URL": sqlite_url}


def test_credentials_are_issued_stored_hashed_and_revoked_by_the_cli(make_intake, hashes, inventory_db) -> None:
    def fleetctl_db(*args: str):
        return fleetctl(*args, env=inventory_db)

    issued = fleetctl_db("events", "credential", "issue", "n1", "--credentials", str(hashes))
    assert issued.exit_code == 0, issued.output
    secret = issued.stdout.strip()
    assert secret not in hashes.read_text() and hashes.read_text() == f"n1 {token_hash(secret)}\n"
    assert hashes.stat().st_mode & 0o077 == 0
    again = fleetctl_db("events", "credential", "issue", "n1", "--credentials", str(hashes)).stdout.strip()
    assert again != secret and hashes.read_text() == f"n1 {token_hash(again)}\n"  # the old one replaced
    intake = make_intake()
    assert heartbeat(intake.port, "n1", secret)[0] == 401 and heartbeat(intake.port, "n1", again)[0] == 202
    assert fleetctl_db("events", "credential", "revoke", "n1", "--credentials", str(hashes)).exit_code == 0
    assert hashes.read_text() == ""
    for args, words in ((["revoke", "n1"], "n1 has no credential"), (["issue", "n1;reboot"], "not a node name")):
        result = fleetctl_db("events", "credential", *args, "--credentials", str(hashes))
        assert result.exit_code == 2 and words in result.output and len(result.output.strip().splitlines()) == 1


def test_a_credential_for_a_node_not_in_the_inventory_is_refused_and_nothing_is_written(hashes, inventory_db) -> None:
    """The intake refuses a node it does not know (422), so a credential issued for one is a
    secret waiting for a node of that name to appear: refused, naming the node, the hash file
    untouched (its bytes and its modification time); a node in the inventory still gets one."""
    before = fleetctl("events", "credential", "issue", "n2", "--credentials", str(hashes), env=inventory_db)
    assert before.exit_code == 0, before.output
    text, stamp = hashes.read_bytes(), hashes.stat().st_mtime_ns
    result = fleetctl("events", "credential", "issue", "ghost-7", "--credentials", str(hashes), env=inventory_db)
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        "error: unknown node: ghost-7 is not in the inventory; no credential issued"
    ]
    assert hashes.read_bytes() == text and hashes.stat().st_mtime_ns == stamp
    assert [
        name for name in os.listdir(hashes.parent) if name.startswith(f".{hashes.name}.")
    ] == []  # no temporary left
    missing = hashes.parent / "absent.hashes"
    assert (
        fleetctl("events", "credential", "issue", "ghost-7", "--credentials", str(missing), env=inventory_db).exit_code
        == 1
    )
    assert not missing.exists()
    known = fleetctl("events", "credential", "issue", "n3", "--credentials", str(hashes), env=inventory_db)
    assert known.exit_code == 0 and f"n3 {token_hash(known.stdout.strip())}\n" in hashes.read_text()


def test_a_hash_file_naming_a_node_twice_is_refused_in_one_line_naming_it(hashes, inventory_db, tmp_path) -> None:
    """`events serve` does not start on it, and `events credential issue` does not rewrite it
    (which node's line would a revocation remove?)."""
    text = f"n1 {token_hash(new_credential())}\n# rotated by hand\nn1 {token_hash(new_credential())}\n"
    hashes.write_text(text)
    said = f"error: {hashes}:3: n1 has a credential already"
    issue = fleetctl("events", "credential", "issue", "n3", "--credentials", str(hashes), env=inventory_db)
    assert issue.exit_code == 2 and issue.output.strip().splitlines() == [said], issue.output
    assert hashes.read_text() == text
    serve = _serve(tmp_path, "--port", "0", "--credentials", str(hashes), env={"FLEETCTL_INTAKE_TOKEN": TOKEN})
    try:
        _, err = serve.communicate(timeout=SERVE_REFUSES_S)
    except subprocess.TimeoutExpired:
        serve.kill()
        serve.communicate()
        pytest.fail(f"events serve started on a hash file naming n1 twice ({SERVE_REFUSES_S:g} s)")
    assert serve.returncode == 2 and err.strip().splitlines() == [said], err
    assert not (tmp_path / "spool").exists()


@pytest.mark.parametrize("url", ["http://10.1.2.3:9411", "http://intake.example:9411", "http://127.0.0.1.example:1"])
def test_the_agent_sends_its_credential_over_http_to_this_machine_only(url, tmp_path) -> None:
    from fleetctl.agent.heartbeat import HeartbeatSender

    with pytest.raises(ValueError, match="sent only over https"):
        HeartbeatSender(url, TOKEN)
    for local in ("http://127.0.0.1:9411", "http://[::1]:9411", "http://localhost:9411", "https://intake.example"):
        HeartbeatSender(local, TOKEN)
    log = tmp_path / "kern.log"
    log.write_text("")
    result = fleetctl(
        "agent",
        "n1",
        "--file",
        str(log),
        "--spool",
        str(tmp_path / "a"),
        "--metrics-port",
        "0",
        "--heartbeat-url",
        url,
        env={"FLEETCTL_INTAKE_TOKEN": TOKEN},
    )
    assert result.exit_code == 2 and "sent only over https" in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_the_agent_verifies_the_intakes_certificate_and_name(make_intake, tmp_path) -> None:
    from fleetctl.agent.heartbeat import HeartbeatFailed, HeartbeatSender

    ca = Authority(tmp_path, "intake-ca")
    intake = make_intake(tls=tls_context(*ca.server("intake")))  # names 127.0.0.1 and temporal.test
    HeartbeatSender(f"https://127.0.0.1:{intake.port}", TOKEN, ca_path=str(ca.cert_path)).send("n1")
    assert intake.beats.heard == 1
    with pytest.raises(HeartbeatFailed, match="CERTIFICATE_VERIFY_FAILED"):  # the system's CAs never signed it
        HeartbeatSender(f"https://127.0.0.1:{intake.port}", TOKEN).send("n1")
    with pytest.raises(HeartbeatFailed, match="CERTIFICATE_VERIFY_FAILED"):  # signed, for another name
        HeartbeatSender(f"https://localhost:{intake.port}", TOKEN, ca_path=str(ca.cert_path)).send("n1")
    assert intake.beats.heard == 1


def test_npd_conditions_of_nodes_outside_the_inventory_are_counted_not_spooled(make_intake, tmp_path) -> None:
    import threading

    from kubernetes import client, config

    from fleetctl.intake.server import poll_node_conditions
    from tests.schedulers.kube_emulator import NODES, KubeEmulator

    intake = make_intake()
    xid79 = {
        "type": "XidError",
        "status": "True",
        "reason": "XidCritical",
        "lastTransitionTime": "2026-11-30T20:00:00Z",
        "message": "NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, GPU has fallen off the bus.",
    }
    with KubeEmulator() as emu:
        for name in ("n1", "cpu-node-1"):  # n1 is in the inventory, cpu-node-1 is not fleetctl's
            emu.add_node(name)
            emu.handler.objects[NODES, None, name]["status"]["conditions"].append(dict(xid79))
        api = client.CoreV1Api(config.new_client_from_config(config_file=str(emu.write_kubeconfig(tmp_path / "kc"))))
        stop = threading.Event()
        poller = threading.Thread(
            target=poll_node_conditions,
            args=(intake, api, ("XidError",), stop, 0.05, KnownNodes(lambda n: n & INVENTORY)),
        )
        poller.start()
        try:
            deadline = time.monotonic() + 10  # polls 50 ms apart: at least two in 10 s under any load we expect
            while intake.npd_not_in_inventory < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            poller.join(10)
    assert [e["node"] for e in intake.spool.pending(10)] == ["n1"] and intake.accepted == 1
    assert intake.npd_not_in_inventory >= 2  # on every poll


async def test_the_agent_sends_its_events_through_the_intake_with_its_own_credential(
    make_intake, hashes, tmp_path
) -> None:
    """`fleetctl agent --events-to-intake`: the agent's Xid reaches the intake over https as
    the node agent's (source `agent`), with the node's credential; with another node's
    credential nothing is taken, and the event stays in the agent's spool."""
    import asyncio

    from fleetctl.agent.follow import FileSource
    from fleetctl.agent.runner import Agent, AgentConfig
    from fleetctl.agent.transport import IntakeTransport, NodeRefused, SendFailed

    secret = new_credential()
    hashes.write_text(f"n1 {token_hash(secret)}\n")
    ca = Authority(tmp_path, "intake-ca")
    intake = make_intake(tls=tls_context(*ca.server("intake")))
    url = f"https://127.0.0.1:{intake.port}"
    log = tmp_path / "kern.log"
    log.write_text(
        "2026-11-30T20:00:01+00:00 n1 kernel: NVRM: Xid (PCI:0000:2b:00): 79, pid=1, name=x, "
        "GPU has fallen off the bus.\n"
        "2026-11-30T20:00:02+00:00 n1 kernel: nvidia-nvswitch0: SXid (PCI:0000:00:00.0): 20034, Fatal, "
        "Link 30 LTSSM Fault Up\n"
    )
    for node, expect_sent in (("n2", False), ("n1", True)):  # n2's agent holding n1's credential first
        agent = Agent(
            AgentConfig(node=node, spool_dir=tmp_path / f"agent-{node}"),
            FileSource(log),
            IntakeTransport(url, secret, str(ca.cert_path)),
        )
        stop = asyncio.Event()
        task = asyncio.create_task(agent.run_until(stop))
        deadline = time.monotonic() + 30  # the agent's first delivery, or its first refusal
        while not (agent.metrics.sent._value.get() if expect_sent else agent.metrics.send_failures._value.get()):
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        stop.set()
        await task
        if not expect_sent:
            assert intake.spool.depth == 0 and agent.spool.depth == 2  # kept, for a credential that will do
    event, sxid = intake.spool.pending(10)
    assert (event["node"], event["code"], event["source"], event["severity"]) == ("n1", 79, "agent", "critical")
    # The SXid goes with the signature the agent read it as: what holds an NVLink domain.
    assert (sxid["code"], sxid["signature"], event["signature"]) == (None, "nvswitch_sxid_fatal", "")
    duplicates = intake.duplicates
    transport = IntakeTransport(url, secret, str(ca.cert_path))
    again = [{"node": "n1", "code": 79, "message": "x", "event_id": "e1", "at": 1.7e9, "severity": ""}]
    await transport.send("n1", again)
    await transport.send("n1", again)  # a resend after a lost answer: the same event
    assert intake.spool.depth == 3 and intake.duplicates == duplicates + 1
    with pytest.raises(NodeRefused, match="422: not in the inventory: ghost"):
        await IntakeTransport(url, TOKEN, str(ca.cert_path)).send("ghost", [{**again[0], "node": "ghost"}])
    with pytest.raises(SendFailed, match="CERTIFICATE_VERIFY_FAILED"):
        await IntakeTransport(url, secret).send("n1", again)
    with pytest.raises(ValueError, match="sent only over https"):
        IntakeTransport("http://10.0.0.1:9411", secret)
