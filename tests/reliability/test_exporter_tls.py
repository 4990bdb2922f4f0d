"""`fleetctl metrics serve` over TLS, with and without client certificates: a real https
server on 127.0.0.1 and a client verifying it against a CA made in the test."""

from __future__ import annotations

import socket
import ssl
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from fleetctl.db.engine import get_engine
from fleetctl.reliability import exporter_server
from tests.production.mtls_proxy import Authority
from tests.support.tls_renewal import renewal_served_and_a_broken_one_not


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


def other_dir(tmp_path: Path) -> Path:
    (tmp_path / "other").mkdir()
    return tmp_path / "other"


def test_a_renewed_certificate_is_served_without_a_restart_and_a_broken_one_is_not(sqlite_url, tmp_path) -> None:
    """cert-manager renews the exporter's certificate in place: scrapes get the new one within
    the check interval (TLS_RELOAD_CHECK_S in production: well within a minute), the exporter
    never restarted. A renewal whose key does not match keeps the certificate served."""
    ca = Authority(tmp_path, "metrics-ca")
    cert, key = ca.server("metrics")
    check_s = 1.0
    server = exporter_server.serve(
        get_engine(sqlite_url), 0, "127.0.0.1", tls_cert=str(cert), tls_key=str(key), tls_check_s=check_s
    )
    try:
        client = ssl.create_default_context(cafile=ca.cert_path)

        def answers() -> None:
            assert "fleetctl_nodes" in scrape(server.server_port, client)

        renewal_served_and_a_broken_one_not(
            server.server_port, client, lambda: ca.server("metrics"), check_s, answers, other_dir(tmp_path)
        )
    finally:
        server.shutdown()


def test_a_scraper_that_never_says_hello_holds_no_other_up(sqlite_url, tmp_path) -> None:
    ca = Authority(tmp_path, "metrics-ca")
    cert, key = ca.server("metrics")
    server = exporter_server.serve(get_engine(sqlite_url), 0, "127.0.0.1", tls_cert=str(cert), tls_key=str(key))
    try:
        with socket.create_connection(("127.0.0.1", server.server_port), timeout=10):  # connected, silent
            assert "fleetctl_nodes" in scrape(server.server_port, ssl.create_default_context(cafile=ca.cert_path))
    finally:
        server.shutdown()


def test_metrics_serve_refuses_a_key_that_is_not_the_certificates_in_one_line(sqlite_url, tmp_path) -> None:
    from typer.testing import CliRunner

    from fleetctl.cli.main import app

    ca = Authority(tmp_path, "metrics-ca")
    cert, _ = ca.server("metrics")
    _, wrong_key = Authority(other_dir(tmp_path), "other-ca").server("wrong")
    result = CliRunner().invoke(
        app,
        [
            "--db-url",
            sqlite_url,
            "metrics",
            "serve",
            "--port",
            "0",
            "--tls-cert",
            str(cert),
            "--tls-key",
            str(wrong_key),
        ],
    )
    assert result.exit_code == 2, result.output
    (line,) = result.output.splitlines()
    assert line.startswith(f"error: TLS certificate {cert}, key {wrong_key}: "), line
