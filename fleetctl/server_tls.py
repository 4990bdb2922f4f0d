"""A server's TLS (the intake's, the exporter's), built from its certificate files and built
again when they change: a certificate renewed in place (cert-manager's, a Kubernetes Secret
rotated under its mount) is served to new connections without a restart."""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from pathlib import Path
from typing import Any

from fleetctl.text import one_line

log = logging.getLogger("fleetctl.tls")

# How often a server looks at its certificate files: a renewed certificate is served within
# this, without a restart.
TLS_RELOAD_CHECK_S = 10.0


class BadTLSFiles(ValueError):
    """A certificate, key or client CA that does not load; its message is one line."""


def _server_context(cert: Path, key: Path, client_ca: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(cert, key)
        if client_ca is not None:
            context.load_verify_locations(cafile=client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
    except (OSError, ssl.SSLError) as exc:
        raise BadTLSFiles(
            f"TLS certificate {cert}, key {key}"
            + (f", client CA {client_ca}" if client_ca else "")
            + f": {one_line(exc, 200)}"
        ) from None
    return context


class ReloadingTLS:
    """A server's TLS, built from its files and built again when they change (their inode, size
    or time: a Secret's mount swaps a symlink), looked at most every `check_s` as connections
    arrive. A renewal that does not load (a key that does not match, a file half written) keeps
    the certificate served until then, and is logged once."""

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None, check_s: float = TLS_RELOAD_CHECK_S):
        self.files = (cert, key, client_ca)
        self.check_s = check_s
        self._lock = threading.Lock()
        self._stamp = self._stamp_now()
        self._context = _server_context(cert, key, client_ca)  # BadTLSFiles: refused at start
        self._checked = time.monotonic()
        self.reloads = 0

    def _stamp_now(self) -> tuple[tuple[int, int, int], ...]:
        stamps = []
        for path in self.files:
            try:
                st = Path(path).stat() if path is not None else None
            except OSError:
                st = None
            stamps.append((st.st_ino, st.st_size, st.st_mtime_ns) if st is not None else (0, 0, 0))
        return tuple(stamps)

    def current(self) -> ssl.SSLContext:
        """The context to serve a new connection with: the files' latest that loads."""
        if time.monotonic() - self._checked < self.check_s:
            return self._context
        with self._lock:
            self._checked = time.monotonic()
            stamp = self._stamp_now()
            if stamp != self._stamp:
                self._stamp = stamp
                try:
                    self._context = _server_context(*self.files)
                    self.reloads += 1
                    log.info("TLS certificate %s loaded again: its files changed", self.files[0])
                except BadTLSFiles as exc:
                    log.warning("TLS files changed but do not load; the certificate served is unchanged: %s", exc)
            return self._context

    def wrap_socket(self, sock: socket.socket, **kwargs: Any) -> ssl.SSLSocket:
        return self.current().wrap_socket(sock, **kwargs)


def tls_context(
    cert: Path, key: Path, client_ca: Path | None = None, check_s: float = TLS_RELOAD_CHECK_S
) -> ReloadingTLS:
    """A server TLS from a certificate chain and key, loaded again when they change; with
    `client_ca`, clients must present a certificate that CA signed. BadTLSFiles (one line)
    when a file will not do at start."""
    return ReloadingTLS(cert, key, client_ca, check_s)
