"""The agent's liveness: a small POST to the intake (`fleetctl events serve`) every interval.

Not a signal to the node's workflow like the events: a heartbeat carries nothing to act on,
and a signal per node per interval would fill every node's history (the intake writes all
the nodes it heard in one statement a second: fleetctl.intake.heartbeats). A heartbeat is
"now" or nothing, so one that fails is counted, never spooled.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from http.client import HTTPMessage
from typing import IO
from urllib.parse import urlsplit

from fleetctl.connections.temporal_client import is_local_address

SEND_TIMEOUT_S = 5.0


class HeartbeatFailed(RuntimeError):
    pass


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:  # the token goes to the address given, nowhere else
        return None


def intake_url(base: str, path: str) -> str:
    """The address of `path` on the intake at `base`; ValueError (one line) for anything but
    https, or http to this machine: the credential goes in every request's header, and over
    plain http to another host anyone on the path could take it and speak for the node."""
    parts = urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{base[:80]!r} is not an http:// or https:// URL")
    if parts.scheme == "http" and not is_local_address(parts.hostname):
        raise ValueError(f"{base[:80]!r}: the credential is sent only over https (or to this machine over http)")
    return base.rstrip("/") + path


def heartbeat_url(base: str) -> str:
    return intake_url(base, "/heartbeat")


def intake_opener(ca_path: str | None) -> urllib.request.OpenerDirector:
    """An opener that verifies certificates and host names (against `ca_path`, or the
    system's CAs) and follows no redirect; ValueError (one line) for a CA bundle it cannot read."""
    try:
        context = ssl.create_default_context(cafile=ca_path)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"CA bundle {ca_path}: {getattr(exc, 'strerror', None) or exc}") from None
    return urllib.request.build_opener(_NoRedirect, urllib.request.HTTPSHandler(context=context))


class HeartbeatSender:
    def __init__(self, base_url: str, token: str, timeout_s: float = SEND_TIMEOUT_S, ca_path: str | None = None):
        """`ca_path`: the CA bundle the intake's certificate is verified against (default: the
        system's); certificates and host names are always verified."""
        self.url, self.timeout_s = heartbeat_url(base_url), timeout_s
        self._token = token
        self._opener = intake_opener(ca_path)

    def send(self, node: str) -> None:
        request = urllib.request.Request(
            self.url,
            data=json.dumps({"node": node}).encode(),
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"},
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            raise HeartbeatFailed(f"the intake answered {exc.code}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise HeartbeatFailed(str(getattr(exc, "reason", exc))[:200]) from None
