"""The webhook that carries RMA bundles and runbook notifications to a ticketing or chat
system: one JSON POST, its token only in the header and only over https (or to this machine),
never replayed to a redirect."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.client import HTTPMessage
from typing import IO, Any
from urllib.parse import urlsplit

from fleetctl.remediation.rma import redact

log = logging.getLogger(__name__)


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """A redirect stays an error: urllib would replay the Authorization header to wherever the
    receiver points, another host included."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> None:
        return None


_LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})


def webhook_url_problem(url: str, token: str) -> str | None:
    """Why the webhook must not be called with this URL, or None. A bearer token travels only
    over https, or to this machine itself."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "the webhook URL must be http(s)://host/..."
    if token and parts.scheme != "https" and parts.hostname not in _LOOPBACK:
        return "the webhook token is only sent over https (or to this machine)"
    return None


def post_webhook(url: str, token: str, payload: Mapping[str, Any], timeout_s: float = 10.0) -> str:
    """POST the payload as JSON; returns a one-line status, `delivered: ...` only for a 2xx
    answer from the URL itself. The token travels only in the header, never to a redirect."""
    where = redact(url, (token,))
    problem = webhook_url_problem(url, token)
    if problem:
        log.warning("RMA webhook %s: not sent: %s", where, problem)
        return f"failed: {problem}"
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, data=json.dumps(payload, default=str).encode(), headers=headers, method="POST"
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects())
    try:
        with opener.open(request, timeout=timeout_s) as response:
            code = response.status
            status = f"delivered: HTTP {code}" if 200 <= code < 300 else f"refused: HTTP {code}"
    except urllib.error.HTTPError as exc:
        moved = " (redirects are not followed)" if 300 <= exc.code < 400 else ""
        status = f"refused: HTTP {exc.code}{moved}"
    except (OSError, ValueError) as exc:
        status = f"failed: {redact(str(getattr(exc, 'reason', exc)), (token,))}"
    log.info("RMA webhook %s: %s", where, status)
    return status
