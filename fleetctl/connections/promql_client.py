"""Asking a Prometheus server an instant query (/api/v1/query), for the production
straggler judge. The edge only: what is asked and what the answer means is
fleetctl.jobs.stragglers.

TLS is verified (the system's CAs, or the bundle prometheus_ca_path names); no redirect is followed (one would carry the token to
wherever it points, or turn https into http); the answer is bounded in size, and in time as a
whole (connect, headers and body within timeout_s together: a socket timeout alone bounds
each read, and a server trickling a byte a second never trips it); the
token is sent as a bearer header and appears in no message. Anything but a successful
instant vector is a PrometheusError, never an empty answer.
"""

from __future__ import annotations

import functools
import http.client
import json
import socket
import ssl
import threading
import urllib.error
import urllib.parse
import urllib.request
from typing import IO, Any, NoReturn

from fleetctl.jobs.stragglers import BadAnswer, parse_vector
from fleetctl.text import one_line

# A vector of one sample per node of the fleet's running jobs: ~200 bytes a sample, so
# 8 MiB holds some 40,000 nodes. More is not an answer to our question.
MAX_ANSWER_BYTES = 8 * 1024 * 1024


class PrometheusError(Exception):
    pass


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> NoReturn:
        raise PrometheusError(
            f"Prometheus answered {code} (a redirect): not followed; set prometheus_url to the address it answers at"
        )


class _Deadline:
    """Ends every connection of one query at a moment: a timer shuts their sockets down,
    which wakes a read blocked in another thread (it returns or raises at once)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.passed = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(seconds, self._end)
        self._timer.daemon = True

    def __enter__(self) -> _Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock)
            if self.passed:
                _shut(sock)

    def _end(self) -> None:
        with self._lock:
            self.passed = True
            for sock in self._sockets:
                _shut(sock)


def _shut(sock: socket.socket) -> None:
    try:  # the plain socket's shutdown: an SSLSocket's would also drop its TLS state under the reader
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:
        pass


class _WatchedHTTP(http.client.HTTPConnection):
    """A connection whose socket, once connected, its query's deadline can shut down."""

    def __init__(self, host: str, *, deadline: _Deadline, **kwargs: Any) -> None:
        super().__init__(host, **kwargs)
        self._deadline = deadline

    def connect(self) -> None:
        super().connect()
        self._deadline.watch(self.sock)


class _WatchedHTTPS(_WatchedHTTP, http.client.HTTPSConnection):
    """The same over TLS: HTTPSConnection's connect wraps the socket, then the deadline watches it."""


class _DeadlineHTTP(urllib.request.HTTPHandler):
    def __init__(self, deadline: _Deadline) -> None:
        super().__init__()
        self.deadline = deadline

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedHTTP, deadline=self.deadline), req)


class _DeadlineHTTPS(urllib.request.HTTPSHandler):
    def __init__(self, context: ssl.SSLContext, deadline: _Deadline) -> None:
        super().__init__(context=context)
        self.context = context
        self.deadline = deadline

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(functools.partial(_WatchedHTTPS, deadline=self.deadline), req, context=self.context)


class Prometheus:
    def __init__(self, url: str, token: str = "", timeout_s: float = 10.0, ca_path: str = "") -> None:
        if not url:
            raise PrometheusError("no prometheus_url is set: the DCGM exporters' series cannot be read")
        self.url = url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s
        try:
            self._context = ssl.create_default_context(cafile=ca_path or None)
        except (OSError, ssl.SSLError) as exc:
            raise PrometheusError(f"prometheus_ca_path {ca_path!r}: {one_line(exc)}") from None

    def __repr__(self) -> str:  # the token stays out of every log line
        return f"Prometheus({self.url!r})"

    def query(self, expr: str, label: str) -> dict[str, float]:
        """{node (by `label`): value} of an instant query."""
        body = urllib.parse.urlencode({"query": expr}).encode()
        request = urllib.request.Request(
            f"{self.url}/api/v1/query",
            data=body,
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"},
        )
        if self._token:
            request.add_unredirected_header("Authorization", f"Bearer {self._token}")
        deadline = _Deadline(self.timeout_s)
        opener = urllib.request.build_opener(
            _NoRedirects(), _DeadlineHTTP(deadline), _DeadlineHTTPS(self._context, deadline)
        )
        try:
            with deadline, opener.open(request, timeout=self.timeout_s) as response:
                raw = response.read(MAX_ANSWER_BYTES + 1)
            if deadline.passed:
                raise PrometheusError(f"{self.url}: no whole answer within {self.timeout_s:g} s")
        except urllib.error.HTTPError as exc:
            # Prometheus answers a bad query with 400 and a JSON error: say what it said.
            raw = exc.read(4096)
            try:
                detail = json.loads(raw).get("error", "")
            except (ValueError, AttributeError):
                detail = ""
            raise PrometheusError(
                f"{self.url}: HTTP {exc.code}" + (f": {one_line(detail)[:200]}" if detail else "")
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            if deadline.passed:
                raise PrometheusError(f"{self.url}: no whole answer within {self.timeout_s:g} s") from None
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise PrometheusError(f"{self.url}: {one_line(str(reason))[:200]}") from None
        if len(raw) > MAX_ANSWER_BYTES:
            raise PrometheusError(f"{self.url}: answer larger than {MAX_ANSWER_BYTES} bytes")
        try:
            return parse_vector(json.loads(raw), label)
        except ValueError as exc:  # BadAnswer, or not JSON at all
            what = str(exc) if isinstance(exc, BadAnswer) else "not JSON"
            raise PrometheusError(f"{self.url}: {what}") from None
