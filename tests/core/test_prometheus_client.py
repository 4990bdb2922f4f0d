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
VECTOR = {"status": "success", "data": {"resultType": "vector", "result": [
    {"metric": {"Hostname": "gpu-01"}, "value": [1764590000.0, "1980"]}]}}


class Scripted(ThreadingHTTPServer):
    """Answers every request with (status, headers, body); keeps what it was sent."""

    def __init__(self, status: int, body: bytes, headers: dict[str, str] | None = None,
                 tls: ssl.SSLContext | None = None) -> None:
        self.seen: list[tuple[str, str, bytes]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
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


@pytest.mark.parametrize("status, body, message", [
    (400, json.dumps({"status": "error", "errorType": "bad_data", "error": "1:5: parse error"}).encode(),
     "HTTP 400: 1:5: parse error"),
    (401, b"Unauthorized", "HTTP 401"),
    (503, b"<html>maintenance</html>", "HTTP 503"),
    (200, b"<html>a login page</html>", "not JSON"),
    (200, json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode(),
     "not an instant vector"),
    (200, json.dumps({"status": "error", "error": "query timed out"}).encode(), "did not answer success"),
    (200, b" " * (MAX_ANSWER_BYTES + 1), f"answer larger than {MAX_ANSWER_BYTES} bytes"),
])
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
    with pytest.raises(PrometheusError, match="127.0.0.1"):
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
        assert Prometheus(server.url, TOKEN, timeout_s=5, ca_path=str(ca.cert_path)).query("up", "Hostname") \
            == {"gpu-01": 1980.0}
        assert server.seen[0][1] == f"Bearer {TOKEN}"
        with pytest.raises(PrometheusError, match="prometheus_ca_path"):
            Prometheus(server.url, ca_path=str(tmp_path / "missing.pem"))
    finally:
        server.shutdown()
