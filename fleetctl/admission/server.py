"""The gate's HTTP(S) endpoint (`fleetctl job gate-serve`):

    POST /mutate              the mutating admission webhook (fleetctl.admission.webhook)
    POST /prejob/NODE?job=J   an init container's ask: the pre-job suite on NODE now (job_gate);
                              409 when no job may start there, 200 otherwise
    GET  /nodes/NAME/health   healthy or not, and why (JSON): for in-job restart frameworks
                              (nvidia-resiliency-ext, torchrun elastic) choosing nodes
    GET  /healthz             the server itself

An init container fails only on a 409, so every answer but a refusal is a 200: a gate that
cannot judge (a check unjudgeable, Temporal down, a node fleetctl does not manage) lets the
pod start. One ask per node at a time: a second, while the first runs, waits for it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
import urllib.parse
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from fleetctl.admission.job_gate import gate_node
from fleetctl.admission.node_health import node_health
from fleetctl.admission.webhook import BadReview, GateSettings, review
from fleetctl.checks.suites import SuiteError
from fleetctl.db import queries
from fleetctl.db import stragglers as findings
from fleetctl.workflows.activities.prejob import JobGate

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from fleetctl.config import Settings
    from fleetctl.server_tls import ReloadingTLS

log = logging.getLogger(__name__)

MAX_BODY = 3 * 1024 * 1024  # kube-apiserver's own bound on a request it sends a webhook
BODY_TIMEOUT_S = 10.0
_NODE = re.compile(r"[0-9A-Za-z][0-9A-Za-z._-]{0,252}\Z")
_JOB = re.compile(r"[0-9A-Za-z][0-9A-Za-z._+-]{0,63}\Z")


class GateServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        address: tuple[str, int],
        settings: Settings,
        engine: Engine,
        gate: GateSettings,
        suite: str = "prejob",
        tls: ReloadingTLS | None = None,
    ) -> None:
        super().__init__(address, _Handler)
        self.settings, self.engine, self.gate, self.suite = settings, engine, gate, suite
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Each connection's TLS handshake in its own thread, bounded, with the certificate
        the files hold now (a renewal is served without a restart): a client that never says
        hello holds only its own thread, never the accept loop."""
        if self.tls is None:
            return super().finish_request(request, client_address)
        request.settimeout(BODY_TIMEOUT_S)
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except OSError as exc:  # ssl.SSLError too: a handshake that failed or timed out
            log.debug("%s: TLS ended (%s)", client_address[0], exc)
            return None
        try:
            return super().finish_request(wrapped, client_address)
        finally:
            wrapped.close()

    def node_lock(self, node: str) -> threading.Lock:
        with self._locks_guard:
            return self._locks.setdefault(node, threading.Lock())


class _Handler(BaseHTTPRequestHandler):
    server: GateServer

    def log_message(self, fmt: str, *args: Any) -> None:
        log.info("%s %s", self.address_string(), fmt % args)

    def _answer(self, status: int, body: Mapping[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urllib.parse.urlsplit(self.path).path
        parts = path.strip("/").split("/")
        if path == "/healthz":
            self._answer(200, {"ok": True})
        elif len(parts) == 3 and parts[0] == "nodes" and parts[2] == "health" and _NODE.match(parts[1]):
            self._node_health(parts[1])
        else:
            self._answer(404, {"error": "not found"})

    def do_POST(self) -> None:
        url = urllib.parse.urlsplit(self.path)
        if url.path == "/mutate":
            self._mutate()
        elif url.path.startswith("/prejob/"):
            node = url.path.removeprefix("/prejob/")
            job = urllib.parse.parse_qs(url.query).get("job", [""])[0]
            self._prejob(node, job)
        else:
            self._answer(404, {"error": "not found: POST /mutate or /prejob/NODE"})

    def _mutate(self) -> None:
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            return self._answer(400, {"error": f"the body must be 1 to {MAX_BODY} bytes, with a Content-Length"})
        self.connection.settimeout(BODY_TIMEOUT_S)
        try:
            answer = review(json.loads(self.rfile.read(length)), self.server.gate)
        except (ValueError, BadReview) as exc:  # json's errors are ValueErrors
            return self._answer(400, {"error": str(exc)[:200]})
        self._answer(200, answer)

    def _prejob(self, node: str, job: str) -> None:
        if not _NODE.match(node) or (job and not _JOB.match(job)):
            # Not a node or job any scheduler names: nothing to judge, and no refusal.
            return self._answer(200, {"node": node[:80], "verdict": "unjudged", "message": "not a node or job name"})
        s = self.server
        if queries.get_node(s.engine, node) is None:  # before its lock: one lock per node fleetctl knows
            return self._answer(200, {"node": node, "verdict": "unjudged", "message": f"unknown node: {node}"})
        with s.node_lock(node):
            try:
                outcome = asyncio.run(gate_node(s.settings, s.engine, node, job, s.suite, JobGate.PROLOG))
            except (LookupError, SuiteError) as exc:
                return self._answer(200, {"node": node, "verdict": "unjudged", "message": str(exc)})
            except Exception as exc:  # noqa: BLE001 - Temporal or the database down: no outage stops pods
                log.warning("pre-job gate for %s could not ask fleetctl: %s", node, exc)
                return self._answer(
                    200, {"node": node, "verdict": "unjudged", "message": f"fleetctl unavailable: {exc}"[:300]}
                )
        log.info("pre-job gate: %s", outcome.message)
        body = {"node": node, "verdict": outcome.verdict.value, "message": outcome.message}
        self._answer(409 if outcome.verdict.blocks else 200, body)

    def _node_health(self, name: str) -> None:
        engine = self.server.engine
        node = queries.get_node(engine, name)
        if node is None:
            return self._answer(404, {"node": name, "error": "unknown node"})
        critical = [
            e.message or f"XID {e.code}"
            for e in queries.health_events_in_service(engine, name, coded_only=False)
            if e.severity == "critical"
        ]
        straggling = [
            f"straggler {f.metric} in job {f.job_id}" for f in findings.open_findings(engine) if f.node_name == name
        ]
        self._answer(200, node_health(name, node.state, critical, straggling))
