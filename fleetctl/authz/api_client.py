"""The CLI's side of the front door: one HTTPS request, proven by a client certificate or an
OIDC bearer token (the api_* settings), answered with JSON."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetctl.config import Settings

# A write's command runs to its end before the front door answers (a drain waits for the
# node's workflow); the front door's own bound on a command is below this.
TIMEOUT_S = 900.0
MAX_ANSWER = 64 * 1024 * 1024


class ApiError(RuntimeError):
    """The front door refused the request or could not be reached; one line."""


@dataclass(frozen=True)
class Answer:
    exit_code: int
    stdout: str
    stderr: str


def _context(settings: Settings) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=settings.api_ca_path or None)
    if settings.api_cert_path:
        try:
            context.load_cert_chain(settings.api_cert_path, settings.api_key_path or None)
        except (OSError, ssl.SSLError) as exc:
            raise ApiError(f"api_cert_path {settings.api_cert_path}: cannot be used ({exc})") from None
    return context


def _headers(settings: Settings) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if settings.api_token_file:
        from fleetctl.intake.credentials import BadCredentials, read_token

        path = Path(settings.api_token_file)
        try:
            token = read_token(path.read_bytes(), f"api_token_file {path}")
        except OSError as exc:
            raise ApiError(f"api_token_file {path}: {exc.strerror}") from None
        except BadCredentials as exc:
            raise ApiError(str(exc)) from None
        headers["Authorization"] = f"Bearer {token}"
    return headers


def call(settings: Settings, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
    """The front door's JSON answer to `method path`; ApiError with its one-line error."""
    url = settings.api_url.rstrip("/") + path
    request = urllib.request.Request(
        url, data=None if body is None else json.dumps(body).encode(), headers=_headers(settings), method=method
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_S, context=_context(settings)) as response:
            return _json(response.read(MAX_ANSWER + 1), url)
    except urllib.error.HTTPError as exc:
        error = _json(exc.read(MAX_ANSWER + 1), url).get("error") or exc.reason
        raise ApiError(f"{error}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ApiError(f"the front door {settings.api_url} cannot be reached: {reason}") from None


def _json(raw: bytes, url: str) -> dict[str, Any]:
    try:
        answer = json.loads(raw[:MAX_ANSWER])
    except ValueError:
        raise ApiError(f"{url}: the answer is not JSON (is api_url the front door?)") from None
    if not isinstance(answer, dict):
        raise ApiError(f"{url}: the answer is not a JSON object")
    return answer


def run_remote(settings: Settings, request: dict[str, Any]) -> Answer:
    answer = call(settings, "POST", "/v1/run", request)
    try:
        return Answer(int(answer["exit_code"]), str(answer["stdout"]), str(answer["stderr"]))
    except (KeyError, TypeError, ValueError):
        raise ApiError("the front door's answer has no exit code and output") from None


def whoami(settings: Settings) -> dict[str, Any]:
    return call(settings, "GET", "/v1/whoami")
