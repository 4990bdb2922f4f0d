"""`fleetctl metrics serve` over TLS, with and without client certificates: a real https
server on 127.0.0.1 and a client verifying it against a CA made in the test."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request

import pytest

from fleetctl.db.engine import get_engine
from fleetctl.reliability import exporter_server
from tests.production.mtls_proxy import Authority


def scrape(port: int, context: ssl.SSLContext) -> str:
    with urllib.request.urlopen(f"https://127.0.0.1:{port}/metrics", timeout=10, context=context) as answer:
        return answer.read().decode()


def test_metrics_are_served_over_tls_to_a_verifying_client(sqlite_url, tmp_path) -> None:
    ca = Authority(tmp_path, "metrics-ca")
    cert, key = ca.server("metrics")
    server = exporter_server.serve(get_engine(sqlite_url), 0, "127.0.0.1", tls_cert=str(cert), tls_key=str(key))
    try:
        assert "fleetctl_nodes" in scrape(server.server_port, ssl.create_default_context(cafile=ca.cert_path))
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            scrape(server.server_port, ssl.create_default_context())  # the system's CAs never signed it
    finally:
        server.shutdown()


def test_with_a_client_ca_only_scrapers_it_signed_are_answered(sqlite_url, tmp_path) -> None:
    ca = Authority(tmp_path, "metrics-ca")
    cert, key = ca.server("metrics")
    server = exporter_server.serve(
        get_engine(sqlite_url), 0, "127.0.0.1", tls_cert=str(cert), tls_key=str(key), tls_client_ca=str(ca.cert_path)
    )
    try:
        with_cert = ssl.create_default_context(cafile=ca.cert_path)
        with_cert.load_cert_chain(*ca.client("prometheus"))
        assert "fleetctl_nodes" in scrape(server.server_port, with_cert)
        with pytest.raises((urllib.error.URLError, ssl.SSLError, ConnectionError)):
            scrape(server.server_port, ssl.create_default_context(cafile=ca.cert_path))
    finally:
        server.shutdown()
