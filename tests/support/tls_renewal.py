"""A server's certificate renewed in place (cert-manager rotating a Secret under its mount), as
the intake, the exporter and the pre-job gate must take it: the renewed certificate served to
new connections within the check interval, no restart; a renewal whose key is not the
certificate's ignored, the certificate in hand served on."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path

from tests.production.mtls_proxy import Authority


def served_certificate(port: int, context: ssl.SSLContext) -> bytes:
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="127.0.0.1") as tls,
    ):
        served = tls.getpeercert(binary_form=True)
    assert served is not None
    return served


def renewal_served_and_a_broken_one_not(
    port: int,
    client: ssl.SSLContext,
    renew: Callable[[], tuple[Path, Path]],
    check_s: float,
    answers: Callable[[], None],
    elsewhere: Path,
) -> None:
    """`renew` issues a new key and certificate under the served names and returns their paths;
    `answers` asserts the server still does its work over `client`; `elsewhere`, a directory
    for another CA that signs the mismatched key."""
    first = served_certificate(port, client)
    cert, key = renew()
    renewed = cert.read_bytes()
    deadline = time.monotonic() + 3 * check_s + 10
    while (served := served_certificate(port, client)) == first:
        assert time.monotonic() < deadline, "the renewed certificate was not served"
        time.sleep(check_s / 4)
    assert ssl.DER_cert_to_PEM_cert(served).strip() == renewed.decode().strip()
    answers()

    _, wrong_key = Authority(elsewhere, "other-ca").server("wrong")
    key.write_bytes(wrong_key.read_bytes())  # a key that is not the certificate's
    time.sleep(check_s * 2)  # past the next look at the files, which must keep what is served
    assert served_certificate(port, client) == served
    answers()
