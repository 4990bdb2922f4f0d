"""The intake's I/O: an HTTP server (stdlib), a Kubernetes node-condition poller, and the
delivery loop that batches accepted events into signals to each node's workflow. Agents'
heartbeats take another road, to the database (fleetctl.intake.heartbeats).

Accepted events go to a spool on disk first (the agent's), so a Temporal outage loses
nothing; a request is answered 202 once its events are there.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import threading
import time
from collections import OrderedDict, defaultdict
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fleetctl.agent.detect import detect
from fleetctl.agent.spool import Spool
from fleetctl.agent.transport import NodeRefused
from fleetctl.intake.heartbeats import Heartbeats
from fleetctl.intake.parse import BadBody, IntakeEvent, from_alertmanager, from_json, from_node_conditions, loads
from fleetctl.inventory.names import NODE_NAME_RE
from fleetctl.text import bounded, one_line

log = logging.getLogger("fleetctl.intake")

MAX_BODY = 1 << 20  # bytes; Alertmanager's largest group of 1,000 alerts fits well inside
SEEN_IDS = 100_000  # ids remembered for de-duplication (the workflow de-duplicates again)
MAX_ATTEMPTS = 20  # deliveries of an event to a node whose workflow refuses it, then dropped
MAX_BACKOFF_S = 30.0


class Intake:
    """Thread-safe: the HTTP handlers and the Kubernetes poller accept, one loop delivers."""

    def __init__(self, spool_dir: Path, transport, max_spool: int = 100_000, batch_size: int = 500):
        self.spool = Spool(spool_dir, max_spool)
        self.transport, self.batch_size = transport, batch_size
        self._lock = threading.Lock()
        self._seen: OrderedDict[str, None] = OrderedDict()
        self.accepted = self.duplicates = self.sent = self.undeliverable = 0
        self.npd_skipped = 0  # Node Problem Detector conditions that could not be read (poll_node_conditions)
        self._wake = threading.Event()

    def accept(self, events: list[IntakeEvent]) -> tuple[int, int]:
        """(new, duplicate) counts; new events are on disk when this returns."""
        with self._lock:
            fresh, batch_ids = [], set()
            for ev in events:
                if ev.event_id in self._seen or ev.event_id in batch_ids:
                    continue
                batch_ids.add(ev.event_id)
                fresh.append(ev)
            self.spool.append([{**e.as_dict(), "attempts": 0} for e in fresh])
            for ev in fresh:
                self._seen[ev.event_id] = None
            while len(self._seen) > SEEN_IDS:
                self._seen.popitem(last=False)
            self.accepted += len(fresh)
            self.duplicates += len(events) - len(fresh)
        self._wake.set()
        return len(fresh), len(events) - len(fresh)

    async def deliver_once(self) -> bool:
        """One batch. False when Temporal was unreachable (back off); a node that refuses
        its events (no workflow) has them retried up to MAX_ATTEMPTS times, then counted
        undeliverable, and never holds up other nodes' events."""
        with self._lock:
            batch = self.spool.pending(self.batch_size)
        if not batch:
            return True
        by_node: dict[str, list[dict]] = defaultdict(list)
        for ev in batch:
            by_node[ev["node"]].append(ev)
        refused: list[dict] = []
        unsent: list[dict] = []
        for node, events in by_node.items():
            if unsent:  # Temporal is unreachable: the rest of the batch waits too
                unsent += events
                continue
            try:
                await self.transport.send(node, [{"node": e["node"], "source": e["source"], "code": e["code"],
                                                  "message": e["message"], "actor": "fleetctl-intake",
                                                  "event_id": e["event_id"], "at": e["at"],
                                                  # absent from events spooled by an older intake
                                                  "severity": e.get("severity", ""),
                                                  "at_from_record": e.get("at_from_record", False)}
                                                 for e in events])
                self.sent += len(events)
            except NodeRefused as exc:
                log.warning("%s refused %d events (%s)", node, len(events), exc)
                refused += events
            except Exception as exc:  # noqa: BLE001 - Temporal unreachable: kept, retried after a pause
                log.warning("cannot deliver %d events to %s (%s)", len(events), node, exc)
                unsent += events
        if len(unsent) == len(batch):
            return False
        retry = [{**e, "attempts": e["attempts"] + 1} for e in refused if e["attempts"] + 1 < MAX_ATTEMPTS]
        with self._lock:
            self.undeliverable += len(refused) - len(retry)
            self.spool.append(unsent + retry)  # before the ack: a crash between sends them again, never loses them
            self.spool.ack(len(batch))
        return not unsent

    async def deliver_until(self, stop: threading.Event, interval_s: float = 0.05) -> None:
        backoff = 0.5
        while not stop.is_set():
            ok = await self.deliver_once()
            if ok and self.spool.depth:
                backoff = 0.5
                continue
            self._wake.clear()
            delay = interval_s if ok else backoff
            backoff = 0.5 if ok else min(backoff * 2, MAX_BACKOFF_S)
            await asyncio.to_thread(self._wake.wait, delay)


def make_handler(intake: Intake, token: str, max_body: int = MAX_BODY, heartbeats: Heartbeats | None = None):
    """`heartbeats`: where agents' heartbeats go (POST /heartbeat); None: this intake takes none."""
    expected = f"Bearer {token}".encode()
    paths = ("/alertmanager", "/events") + (("/heartbeat",) if heartbeats is not None else ())

    class Handler(BaseHTTPRequestHandler):
        server_version = "fleetctl-intake"
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):  # the request line only: never headers (the token)
            log.info("%s %s", self.address_string(), fmt % args)

        def _answer(self, status: int, body: dict | str) -> None:
            data = (json.dumps(body) if isinstance(body, dict) else body + "\n").encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json" if isinstance(body, dict) else "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path == "/healthz":
                health = {"spool_depth": intake.spool.depth, "accepted": intake.accepted, "sent": intake.sent}
                if heartbeats is not None:
                    health |= {"heartbeats_heard": heartbeats.heard, "heartbeats_pending": heartbeats.pending,
                               "heartbeat_write_failures": heartbeats.write_failures}
                self._answer(200, health)
            else:
                self._answer(404, "not found")

        def do_POST(self):
            given = self.headers.get("Authorization", "").encode()
            if not hmac.compare_digest(given, expected):
                self.close_connection = True
                return self._answer(401, "a bearer token is required")
            if self.path not in paths:
                return self._answer(404, f"not found: POST to {', '.join(paths)}")
            if self.headers.get("Transfer-Encoding"):
                self.close_connection = True
                return self._answer(411, "send the body with a Content-Length")
            try:
                length = int(self.headers.get("Content-Length", ""))
            except ValueError:
                self.close_connection = True
                return self._answer(411, "send the body with a Content-Length")
            if not 0 < length <= max_body:
                self.close_connection = True
                return self._answer(413 if length > 0 else 400, f"the body must be 1 to {max_body} bytes")
            raw = self.rfile.read(length)
            if self.path == "/heartbeat":
                return self._heartbeat(raw)
            try:
                body = loads(raw)
                events = from_alertmanager(body) if self.path == "/alertmanager" else from_json(body, time.time())
            except (ValueError, RecursionError) as exc:
                message = str(exc) if isinstance(exc, BadBody) else "the body is not JSON"
                # One line, safe to show and to encode: a field name in it is the sender's text.
                return self._answer(400, one_line(bounded(message), 300))
            new, dup = intake.accept(events)
            self._answer(202, {"accepted": new, "duplicates": dup})

        def _heartbeat(self, raw: bytes) -> None:
            """{"node": NAME}: the node's agent is alive now (the intake's clock)."""
            try:
                body = json.loads(raw)
            except (ValueError, RecursionError):
                return self._answer(400, "the body is not JSON")
            node = body.get("node") if isinstance(body, dict) else None
            if not isinstance(node, str) or not NODE_NAME_RE.match(node):
                return self._answer(400, 'the body must be {"node": NAME} with a valid node name')
            if not heartbeats.note(node):
                return self._answer(503, "too many heartbeats waiting to be recorded; send again later")
            self._answer(202, {"heard": node})

    return Handler


def serve_http(intake: Intake, token: str, address: str, port: int,
               heartbeats: Heartbeats | None = None) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer((address, port), make_handler(intake, token, heartbeats=heartbeats))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="fleetctl-intake-http", daemon=True).start()
    return server


def poll_node_conditions(intake: Intake, api, watched: tuple[str, ...], stop: threading.Event,
                         interval_s: float) -> None:
    """Node Problem Detector writes conditions on the Node objects: list them every
    `interval_s` (one request for the whole cluster) and accept the True ones.

    The list is read as the API server's JSON, not through the client's models (whose
    deserializer fails the whole list on one node's unreadable time), and each node and each
    condition on its own: one that cannot be read is skipped, counted in `intake.npd_skipped`
    (on every poll that sees it) and logged once, and never holds up another's."""
    logged: OrderedDict[str, None] = OrderedDict()
    while not stop.is_set():
        try:
            response = api.list_node(_request_timeout=30, _preload_content=False)
            body = json.loads(response.data)
            items = body.get("items") if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise ValueError("the answer is not a NodeList")
            for node in items:
                skipped: list[str] = []
                try:
                    events = from_node_conditions(node, watched, detect, skipped)
                except BadBody as exc:
                    events = []
                    skipped.append(str(exc))
                intake.accept(events)
                intake.npd_skipped += len(skipped)
                for why in skipped:
                    if why not in logged:
                        log.warning("node condition skipped: %s", why)
                        logged[why] = None
                        while len(logged) > SEEN_IDS:
                            logged.popitem(last=False)
        except Exception as exc:  # noqa: BLE001 - the API server is down: ask again next time
            log.warning("cannot list nodes (%s)", str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        stop.wait(interval_s)
