"""Asking a Prometheus server an instant query (/api/v1/query), for the production
straggler judge. The edge only: what is asked and what the answer means is
fleetctl.jobs.stragglers.

TLS is verified (the system's CAs, or the bundle prometheus_ca_path names); no redirect is followed (one would carry the token to
wherever it points, or turn https into http); the answer is bounded in size and time; the
token is sent as a bearer header and appears in no message. Anything but a successful
instant vector is a PrometheusError, never an empty answer.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request

from fleetctl.jobs.stragglers import BadAnswer, parse_vector
from fleetctl.text import one_line

# A vector of one sample per node of the fleet's running jobs: ~200 bytes a sample, so
# 8 MiB holds some 40,000 nodes. More is not an answer to our question.
MAX_ANSWER_BYTES = 8 * 1024 * 1024


class PrometheusError(Exception):
    pass


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise PrometheusError(f"Prometheus answered {code} (a redirect): not followed; set prometheus_url to "
                              "the address it answers at")


class Prometheus:
    def __init__(self, url: str, token: str = "", timeout_s: float = 10.0, ca_path: str = "") -> None:
        if not url:
            raise PrometheusError("no prometheus_url is set: production stragglers cannot be judged")
        self.url = url.rstrip("/")
        self._token = token
        self.timeout_s = timeout_s
        try:
            context = ssl.create_default_context(cafile=ca_path or None)
        except (OSError, ssl.SSLError) as exc:
            raise PrometheusError(f"prometheus_ca_path {ca_path!r}: {one_line(exc)}") from None
        self._opener = urllib.request.build_opener(_NoRedirects(), urllib.request.HTTPSHandler(context=context))

    def __repr__(self) -> str:  # the token stays out of every log line
        return f"Prometheus({self.url!r})"

    def query(self, expr: str, label: str) -> dict[str, float]:
        """{node (by `label`): value} of an instant query."""
        body = urllib.parse.urlencode({"query": expr}).encode()
        request = urllib.request.Request(f"{self.url}/api/v1/query", data=body, method="POST",
                                         headers={"Content-Type": "application/x-www-form-urlencoded",
                                                  "Accept": "application/json"})
        if self._token:
            request.add_unredirected_header("Authorization", f"Bearer {self._token}")
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                raw = response.read(MAX_ANSWER_BYTES + 1)
        except urllib.error.HTTPError as exc:
            # Prometheus answers a bad query with 400 and a JSON error: say what it said.
            raw = exc.read(4096)
            try:
                detail = json.loads(raw).get("error", "")
            except (ValueError, AttributeError):
                detail = ""
            raise PrometheusError(f"{self.url}: HTTP {exc.code}" + (f": {one_line(detail)[:200]}" if detail else "")) \
                from None
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
            raise PrometheusError(f"{self.url}: {one_line(str(reason))[:200]}") from None
        if len(raw) > MAX_ANSWER_BYTES:
            raise PrometheusError(f"{self.url}: answer larger than {MAX_ANSWER_BYTES} bytes")
        try:
            return parse_vector(json.loads(raw), label)
        except ValueError as exc:  # BadAnswer, or not JSON at all
            what = str(exc) if isinstance(exc, BadAnswer) else "not JSON"
            raise PrometheusError(f"{self.url}: {what}") from None
