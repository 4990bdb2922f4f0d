"""The Prometheus client at the edge (fleetctl.connections.promql_client) against a real HTTP server on
127.0.0.1 that answers as told: what is not a successful instant vector is an error, a
redirect is never followed (the token would go with it), answers are bounded, and the token
is in no message. Against a real Prometheus: tests/jobs/test_production_stragglers.py."""

from __future__ import annotations

import json
import ssl
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from fleetctl.connections.promql_client import MAX_ANSWER_BYTES, Prometheus, PrometheusError
from tests.production.mtls_proxy import Authority
from tests.support.webhook import WebhookReceiver

TOKEN = "prom-token-0123456789"
VECTOR = {
    "status": "success",
    "data": {"resultType": "vector", "result": [{"metric": {"Hostname": "gpu-01"}, "value": [1764590000.0, "1980"]}]},
}


class Scripted(ThreadingHTTPServer):
    """Answers every request with (status, headers, body); keeps what it was sent."""

    def __init__(
        self, status: int, body: bytes, headers: dict[str, str] | None = None, tls: ssl.SSLContext | None = None
    ) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                sent = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                server.seen.append((self.path, self.headers.get("Authorization", ""), sent))
                self.send_response(status)
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.scheme = "http"
        if tls is not None:
            self.socket = tls.wrap_socket(self.socket, server_side=True)
            self.scheme = "https"
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.server_address[1]}/prom"


def ask(server: Scripted) -> dict[str, float]:
    return Prometheus(server.url, TOKEN, timeout_s=5).query('min by (Hostname) (x{Hostname=~"gpu-01"})', "Hostname")


def test_an_instant_vector_is_read_by_node_and_the_token_goes_in_its_header() -> None:
    server = Scripted(200, json.dumps(VECTOR).encode())
    try:
        assert ask(server) == {"gpu-01": 1980.0}
        ((path, authorization, body),) = server.seen
        assert path == "/prom/api/v1/query" and authorization == f"Bearer {TOKEN}"
        assert body.startswith(b"query=min+by+%28Hostname%29")
    finally:
        server.shutdown()


@pytest.mark.parametrize(
    "status, body, message",
    [
        (
            400,
            json.dumps({"status": "error", "errorType": "bad_data", "error": "1:5: parse error"}).encode(),
            "HTTP 400: 1:5: parse error",
        ),
        (401, b"Unauthorized", "HTTP 401"),
        (503, b"<html>maintenance</html>", "HTTP 503"),
        (200, b"<html>a login page</html>", "not JSON"),
        (
            200,
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
            "not an instant vector",
        ),
        (200, json.dumps({"status": "error", "error": "query timed out"}).encode(), "did not answer success"),
        (200, b" " * (MAX_ANSWER_BYTES + 1), f"answer larger than {MAX_ANSWER_BYTES} bytes"),
    ],
)
def test_anything_but_an_answer_is_an_error(status, body, message) -> None:
    server = Scripted(status, body)
    try:
        with pytest.raises(PrometheusError, match=message) as raised:
            ask(server)
        assert TOKEN not in str(raised.value) and TOKEN not in repr(Prometheus(server.url, TOKEN))
    finally:
        server.shutdown()


@pytest.mark.parametrize("status", [301, 302, 307, 308])
def test_a_redirect_is_not_followed_and_the_token_does_not_travel(status) -> None:
    elsewhere = WebhookReceiver(200)
    server = Scripted(status, b"", {"Location": elsewhere.url})
    try:
        with pytest.raises(PrometheusError, match=f"answered {status} \\(a redirect\\): not followed"):
            ask(server)
        assert elsewhere.requests == []
    finally:
        server.shutdown()
        elsewhere.shutdown()


def test_nobody_listening_is_an_error_and_no_url_is_one_too() -> None:
    server = Scripted(200, b"")
    url = server.url
    server.shutdown()
    server.server_close()
    with pytest.raises(PrometheusError, match=r"127.0.0.1"):
        Prometheus(url, timeout_s=2).query("up", "Hostname")
    with pytest.raises(PrometheusError, match="no prometheus_url is set"):
        Prometheus("")


def test_tls_is_verified_and_the_token_crosses_only_to_a_verified_server(tmp_path) -> None:
    """An https Prometheus whose certificate the system's CAs do not vouch for is an error,
    and the token is never sent; with its CA configured (prometheus_ca_path) it answers."""
    ca = Authority(tmp_path, "prom-ca")
    cert, key = ca.server("prometheus")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    server = Scripted(200, json.dumps(VECTOR).encode(), tls=tls)
    try:
        with pytest.raises(PrometheusError, match="CERTIFICATE_VERIFY_FAILED"):
            Prometheus(server.url, TOKEN, timeout_s=5).query("up", "Hostname")
        assert server.seen == []  # the handshake failed: nothing, the token least, was sent
        assert Prometheus(server.url, TOKEN, timeout_s=5, ca_path=str(ca.cert_path)).query("up", "Hostname") == {
            "gpu-01": 1980.0
        }
        assert server.seen[0][1] == f"Bearer {TOKEN}"
        with pytest.raises(PrometheusError, match="prometheus_ca_path"):
            Prometheus(server.url, ca_path=str(tmp_path / "missing.pem"))
    finally:
        server.shutdown()


class Trickler:
    """A real HTTP server on 127.0.0.1 that answers a valid instant vector one byte a second
    (each read quick, the whole answer a minute and more); `tls` wraps each connection."""

    def __init__(self, tls: ssl.SSLContext | None = None, interval_s: float = 1.0) -> None:
        import socket

        self.listener = socket.create_server(("127.0.0.1", 0))
        self.stop = threading.Event()
        self.tls, self.interval_s = tls, interval_s
        body = json.dumps(VECTOR).encode()
        self.answer = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (
            len(body),
            body,
        )
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._trickle, args=(conn,), daemon=True).start()

    def _trickle(self, conn) -> None:
        try:
            if self.tls is not None:
                conn = self.tls.wrap_socket(conn, server_side=True)
            conn.recv(65536)  # the query
            for i in range(len(self.answer)):
                if self.stop.wait(self.interval_s):
                    break
                conn.sendall(self.answer[i : i + 1])
        except OSError:
            pass
        finally:
            conn.close()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://127.0.0.1:{self.listener.getsockname()[1]}"

    def close(self) -> None:
        self.stop.set()
        self.listener.close()


@pytest.mark.parametrize("scheme", ["http", "https"])
def test_a_prometheus_trickling_a_byte_a_second_is_cut_at_the_timeout_for_the_whole_query(scheme, tmp_path) -> None:
    import time

    context = None
    ca_path = ""
    if scheme == "https":
        authority = Authority(tmp_path, "prom-ca")
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(*authority.server("prometheus"))
        ca_path = str(authority.cert_path)
    server = Trickler(context)
    timeout_s = 2.0
    try:
        started = time.monotonic()
        with pytest.raises(PrometheusError, match="no whole answer within 2 s"):
            Prometheus(server.url, TOKEN, timeout_s=timeout_s, ca_path=ca_path).query("up", "Hostname")
        took = time.monotonic() - started
    finally:
        server.close()
    assert timeout_s <= took < timeout_s + 2, took  # the answer alone would take over 150 s
