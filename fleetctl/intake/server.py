"""The intake's HTTP server (stdlib: docs/decisions/0015-intake-http-server.md) and its
Kubernetes node-condition poller. Accepted events go to the intake's queue and spool
(fleetctl.intake.delivery), which delivers them to the nodes' workflows; agents' heartbeats
take another road, to the database (fleetctl.intake.heartbeats).

A request is answered 202 once its events are on disk, with an account of each node's
events: accepted, duplicates, dropped (a minor event past its sender's bound), and the
events of nodes not in the inventory, which are counted and logged, never queued. One
unknown node never costs the others their events; a request with none known is 422.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import sys
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from fleetctl.agent.detect import detect
from fleetctl.checks.xid_policy import CATALOG, XidPolicy
from fleetctl.intake.credentials import OPERATOR, Caller, Credentials
from fleetctl.intake.delivery import SEEN_IDS, Intake
from fleetctl.intake.heartbeats import Heartbeats
from fleetctl.intake.parse import BadBody, from_alertmanager, from_json, from_node_conditions, loads
from fleetctl.inventory.names import NODE_NAME_RE
from fleetctl.nodes.capacity import AGENT_SOURCE
from fleetctl.server_tls import ReloadingTLS
from fleetctl.text import bounded, one_line, printable

if TYPE_CHECKING:
    from kubernetes.client import CoreV1Api
    from urllib3 import HTTPResponse

log = logging.getLogger("fleetctl.intake")

MAX_BODY = 1 << 20  # bytes; Alertmanager's largest group of 1,000 alerts fits well inside
# A connection's headers, then its body, each within this in all; then it is closed. An
# agent's heartbeat or an Alertmanager webhook sends both in milliseconds.
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0
# Connections held at once (a thread each): well under a service's usual 1,024 open files.
MAX_CONNECTIONS = 256
KNOWN_TTL_S = 300.0  # a node name found in the inventory is not asked again for this long
NPD_CREDENTIAL = "npd"  # what the Kubernetes poller queues is bounded as one credential's


@dataclass(frozen=True)
class Limits:
    """What one connection may hold. The header and body times are totals, not per read: a
    client trickling a byte a second is closed at the bound all the same."""

    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S
    max_connections: int = MAX_CONNECTIONS
    max_body: int = MAX_BODY


class KnownNodes:
    """Which node names are in the inventory, asked of `existing` (names -> those that
    exist). Known names are remembered for KNOWN_TTL_S (a heartbeat a node a half-minute
    costs no query); an unknown one is asked every time, so a node just imported is heard at
    once. The database away: every name is taken as known (logged), since refusing a real
    fault is worse than delivering a ghost, which the node workflows refuse anyway."""

    def __init__(self, existing: Callable[[set[str]], set[str]], ttl_s: float = KNOWN_TTL_S):
        self.existing, self.ttl_s = existing, ttl_s
        self._known: dict[str, float] = {}
        self._lock = threading.Lock()

    def unknown(self, names: set[str]) -> list[str]:
        now = time.monotonic()
        with self._lock:
            ask = {n for n in names if now - self._known.get(n, -math.inf) > self.ttl_s}
        if not ask:
            return []
        try:
            found = self.existing(ask)
        except Exception as exc:  # noqa: BLE001 - the database is away: see the class
            log.warning("cannot check node names against the inventory (%s)", one_line(exc, 200))
            return []
        with self._lock:
            for name in found:
                self._known[name] = now
            if len(self._known) > SEEN_IDS:
                self._known = {n: t for n, t in self._known.items() if now - t <= self.ttl_s}
        return sorted(ask - found)


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")


@dataclass(frozen=True)
class Service:
    """What the HTTP handler answers with. `heartbeats`: where agents' heartbeats go (POST
    /heartbeat; None: this intake takes none). `known`: which node names are in the inventory
    (None: any is taken)."""

    intake: Intake
    credentials: Credentials
    limits: Limits = Limits()
    heartbeats: Heartbeats | None = None
    known: KnownNodes | None = None
    xid_policy: XidPolicy = CATALOG  # the site's (the xid_policy setting): how severe each event is

    @property
    def paths(self) -> tuple[str, ...]:
        return ("/alertmanager", "/events") + (("/heartbeat",) if self.heartbeats is not None else ())

    def unknown(self, nodes: set[str]) -> list[str]:
        return self.known.unknown(nodes) if self.known is not None else []


class IntakeHandler(BaseHTTPRequestHandler):
    """One request of a connection; what it answers with is its server's `service`."""

    server: IntakeServer
    server_version = "fleetctl-intake"
    protocol_version = "HTTP/1.1"

    def handle_one_request(self) -> None:
        # The watcher (IntakeServer) closes a connection whose headers take longer than
        # the header timeout in all: the socket timeout alone is per read.
        self.connection.settimeout(self.server.limits.header_timeout_s)
        self.server.phase(self.connection, HEADERS)
        super().handle_one_request()

    def log_error(self, fmt: str, *args: Any) -> None:  # a timed-out or garbled request: the client's doing
        log.debug("%s %s", self.address_string(), printable(fmt % args, keep_newlines=False))

    def log_message(self, fmt: str, *args: Any) -> None:  # the request line only: never headers (the token)
        log.info("%s %s", self.address_string(), printable(fmt % args, keep_newlines=False))

    def _answer(self, status: int, body: Mapping[str, object] | str, close: bool = False) -> None:
        self.close_connection = self.close_connection or close
        data = (body + "\n" if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; charset=utf-8" if isinstance(body, str) else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.server.phase(self.connection, HANDLING)
        if self.path == "/healthz":
            self._answer(200, health(self.server.service))
        else:
            self._answer(404, "not found")

    def do_POST(self) -> None:
        self.server.phase(self.connection, BODY)
        service = self.server.service
        caller = service.credentials.caller(self.headers.get("Authorization", ""))
        if caller is None:
            return self._answer(401, "a bearer token is required", close=True)
        if self.path not in service.paths:
            return self._answer(404, f"not found: POST to {', '.join(service.paths)}")
        if self.path == "/alertmanager" and caller is not OPERATOR:
            return self._answer(
                403,
                f"the credential of {caller.node} speaks for that node only: /alertmanager takes the operator token",
                close=True,
            )
        raw = self._body()
        if raw is None:
            return None
        self.server.phase(self.connection, HANDLING)
        if self.path == "/heartbeat" and service.heartbeats is not None:
            return self._heartbeat(raw, caller, service.heartbeats)
        return self._events(raw, caller)

    def _body(self) -> bytes | None:
        """The request's body, within the body bound and timeout; None once answered (or gone)."""
        limits = self.server.limits
        try:
            length = int(self.headers.get("Content-Length", ""))
        except ValueError:
            length = -1
        if self.headers.get("Transfer-Encoding") or length < 0:
            self._answer(411, "send the body with a Content-Length", close=True)
            return None
        if not 0 < length <= limits.max_body:
            self._answer(413 if length > 0 else 400, f"the body must be 1 to {limits.max_body} bytes", close=True)
            return None
        self.connection.settimeout(limits.body_timeout_s)
        raw = self.rfile.read(length)
        if len(raw) < length:  # the client went away, or the watcher closed it past the body timeout
            self.close_connection = True
            return None
        return raw

    def _events(self, raw: bytes, caller: Caller) -> None:
        """An Alertmanager group or an /events batch, split by node: the inventory's nodes'
        events queued, the others' counted (202, each node's account); 422 when no node is
        known, 503 when the intake could not keep them (the sender sends them again)."""
        service = self.server.service
        try:
            body = loads(raw)
            policy = service.xid_policy
            events = (
                from_alertmanager(body, policy=policy)
                if self.path == "/alertmanager"
                else from_json(body, time.time(), policy=policy)
            )
        except (ValueError, RecursionError) as exc:
            message = str(exc) if isinstance(exc, BadBody) else "the body is not JSON"
            # One line, safe to show and to encode: a field name in it is the sender's text.
            return self._answer(400, one_line(bounded(message), 300))
        nodes = {ev.node for ev in events}
        if not self._may_speak(caller, nodes):
            return None
        unknown = set(service.unknown(nodes))
        outside = Counter(ev.node for ev in events if ev.node in unknown)
        service.intake.not_managed(outside)
        if unknown and unknown == nodes:
            return self._answer(422, f"not in the inventory: {_names(sorted(unknown))}")
        if caller is not OPERATOR:  # recorded as what they are: the node agent's own, which acts on that node only
            events = [replace(ev, source=AGENT_SOURCE) for ev in events]
        try:
            account = service.intake.accept([ev for ev in events if ev.node not in unknown], caller.key)
        except OSError as exc:
            log.warning("cannot keep %d events (%s)", len(events), one_line(exc, 200))
            return self._answer(503, "the intake cannot keep events now; send them again later")
        refused = any(n["refused"] for n in account.values())
        self._answer(503 if refused else 202, answer_of(account, outside))

    def _may_speak(self, caller: Caller, nodes: set[str]) -> bool:
        """Answers 403 (another node's) and says False."""
        others = sorted(n for n in nodes if not caller.may_speak_for(n))
        if others:
            self._answer(403, f"the credential of {caller.node} speaks for that node only, not {_names(others)}")
            return False
        return True

    def _heartbeat(self, raw: bytes, caller: Caller, heartbeats: Heartbeats) -> None:
        """{"node": NAME}: the node's agent is alive now (the intake's clock)."""
        try:
            body = json.loads(raw)
        except (ValueError, RecursionError):
            return self._answer(400, "the body is not JSON")
        node = body.get("node") if isinstance(body, dict) else None
        if not isinstance(node, str) or not NODE_NAME_RE.match(node):
            return self._answer(400, 'the body must be {"node": NAME} with a valid node name')
        if not self._may_speak(caller, {node}):
            return None
        if self.server.service.unknown({node}):
            return self._answer(422, f"not in the inventory: {node}")
        if not heartbeats.note(node):
            return self._answer(503, "too many heartbeats waiting to be recorded; send again later")
        self._answer(202, {"heard": node})


def answer_of(account: dict[str, Counter[str]], outside: Counter[str]) -> dict[str, object]:
    """A 202's body: the totals, and each node's account (a node not in the inventory: how
    many of its events were not taken)."""
    kinds = ("accepted", "duplicates", "dropped")
    total = sum(account.values(), Counter[str]())
    return {
        **{kind: total[kind] for kind in kinds},
        **({"refused": total["refused"]} if total["refused"] else {}),
        "not_in_inventory": sum(outside.values()),
        "nodes": {
            **{
                node: {kind: n[kind] for kind in (*kinds, "refused") if kind in kinds or n[kind]}
                for node, n in account.items()
            },
            **{node: {"not_in_inventory": n} for node, n in outside.items()},
        },
    }


def health(service: Service) -> dict[str, int]:
    intake, heartbeats = service.intake, service.heartbeats
    now = time.monotonic()
    out = {
        "spool_depth": intake.depth,
        "accepted": intake.accepted,
        "sent": intake.sent,
        "signals": intake.signals,
        "merged": intake.queue.merged,
        "dropped": sum(intake.dropped.values()) + intake.displaced,
        "undeliverable": intake.undeliverable,
        "not_in_inventory": intake.not_in_inventory,
        "held_nodes": intake.queue.held_nodes(now),
    }
    if heartbeats is not None:
        out |= {
            "heartbeats_heard": heartbeats.heard,
            "heartbeats_pending": heartbeats.pending,
            "heartbeat_write_failures": heartbeats.write_failures,
        }
    return out


HEADERS, BODY, HANDLING = "headers", "body", "handling"

# A request as socketserver types it, for every kind of server (a datagram server's is its
# data and socket).
Request = socket.socket | tuple[bytes, socket.socket]


def _connection(request: Request) -> socket.socket:
    """A TCP server's request, as the intake's is: the connection's socket."""
    assert isinstance(request, socket.socket), "the intake serves TCP connections"
    return request


class IntakeServer(ThreadingHTTPServer):
    """A thread per connection, at most `limits.max_connections` of them. At the cap, the
    connection that has waited longest for its headers is closed to make room (a client
    that never finishes its headers cannot keep a real heartbeat out); when every connection
    is past its headers, the new one is answered 503 at once, without a thread. A watcher
    closes every connection past its header or body time, counted from when it began.
    A client that goes away mid-answer is one line at debug, not a traceback."""

    daemon_threads = True
    # socketserver's default backlog of 5 drops the SYNs of a burst (each retried a second
    # later): a fleet's agents beat at the same moments after an intake restart.
    request_queue_size = 128
    refused_answer = (
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
        b"Content-Length: 32\r\nConnection: close\r\n\r\ntoo many connections; try again\n"
    )

    def __init__(self, address: tuple[str, int], service: Service, tls: ReloadingTLS | None = None):
        super().__init__(address, IntakeHandler)
        self.service, self.limits, self.tls = service, service.limits, tls
        self._open: dict[socket.socket, tuple[str, float]] = {}
        self._open_lock = threading.Lock()
        self.refused = self.evicted = self.timed_out = 0
        self._closing = threading.Event()
        threading.Thread(target=self._watch, name="fleetctl-intake-timeouts", daemon=True).start()

    def phase(self, conn: socket.socket, phase: str) -> None:
        with self._open_lock:
            if conn in self._open:
                self._open[conn] = (phase, time.monotonic())

    def verify_request(self, request: Request, client_address: Any) -> bool:
        conn = _connection(request)
        with self._open_lock:
            if len(self._open) >= self.limits.max_connections:
                waiting = [(since, conn) for conn, (phase, since) in self._open.items() if phase == HEADERS]
                if not waiting:
                    self.refused += 1
                    _refuse(conn, self.refused_answer)
                    return False
                _, oldest = min(waiting, key=lambda item: item[0])
                del self._open[oldest]
                self.evicted += 1
                _cut(oldest)
            self._open[conn] = (HEADERS, time.monotonic())
        return True

    def finish_request(self, request: Request, client_address: Any) -> None:
        if self.tls is None:
            return super().finish_request(request, client_address)
        conn = _connection(request)
        conn.settimeout(self.limits.header_timeout_s)  # the handshake counts in the header time
        # Wrapped without the handshake and under the lock: wrapping takes the file descriptor
        # from `request`, and the watcher must hold the socket that owns it to cut it.
        with self._open_lock:
            wrapped = self.tls.wrap_socket(conn, server_side=True, do_handshake_on_connect=False)
            if conn in self._open:
                self._open[wrapped] = self._open.pop(conn)
            else:  # evicted or timed out already
                _cut(wrapped)
        try:
            wrapped.do_handshake()
            super().finish_request(wrapped, client_address)
        except OSError as exc:  # ssl.SSLError too: a handshake that failed, or was cut
            log.debug("%s: TLS ended (%s)", client_address[0], one_line(exc, 200))
        finally:
            with self._open_lock:
                self._open.pop(wrapped, None)
            wrapped.close()

    def close_request(self, request: Request) -> None:
        with self._open_lock:
            self._open.pop(_connection(request), None)
        super().close_request(request)

    def shutdown_request(self, request: Request) -> None:
        with self._open_lock:
            self._open.pop(_connection(request), None)
        super().shutdown_request(request)

    def handle_error(self, request: Request, client_address: Any) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, OSError):  # a reset, a broken pipe, a timeout, a TLS alert
            log.debug("%s went away (%s)", client_address[0], one_line(exc, 200))
        else:
            log.exception("internal error answering %s", client_address[0])

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()

    def _watch(self) -> None:
        bound = {HEADERS: self.limits.header_timeout_s, BODY: self.limits.body_timeout_s}
        step = min(min(bound.values()) / 4, 1.0)
        while not self._closing.wait(step):
            now = time.monotonic()
            with self._open_lock:
                late = [conn for conn, (phase, since) in self._open.items() if now - since > bound.get(phase, math.inf)]
                for conn in late:
                    del self._open[conn]
            for conn in late:
                self.timed_out += 1
                _cut(conn)


def _cut(conn: socket.socket) -> None:
    """End a connection another thread is reading: its read returns, and the thread ends.
    The plain socket's shutdown, also for a TLS socket: an SSLSocket's own would drop its
    TLS state under the thread reading it."""
    try:
        socket.socket.shutdown(conn, socket.SHUT_RDWR)
    except OSError:
        pass


def _refuse(conn: socket.socket, answer: bytes) -> None:
    try:
        conn.setblocking(False)
        conn.send(answer)
    except OSError:
        pass


def serve_http(
    intake: Intake,
    token: str | Credentials,
    address: str,
    port: int,
    heartbeats: Heartbeats | None = None,
    *,
    limits: Limits = Limits(),
    known: KnownNodes | None = None,
    tls: ReloadingTLS | None = None,
    xid_policy: XidPolicy = CATALOG,
) -> IntakeServer:
    """`token`: the operator token alone, or Credentials (the operator's and the agents')."""
    credentials = token if isinstance(token, Credentials) else Credentials(token)
    server = IntakeServer((address, port), Service(intake, credentials, limits, heartbeats, known, xid_policy), tls)
    threading.Thread(target=server.serve_forever, name="fleetctl-intake-http", daemon=True).start()
    return server


def poll_node_conditions(
    intake: Intake,
    api: CoreV1Api,
    watched: tuple[str, ...],
    stop: threading.Event,
    interval_s: float,
    known: KnownNodes | None = None,
    policy: XidPolicy = CATALOG,
) -> None:
    """Node Problem Detector writes conditions on the Node objects: list them every
    `interval_s` (one request for the whole cluster) and accept the True ones. With
    `known`, only those of nodes in the inventory: a cluster's other nodes (CPU nodes, the
    control plane) are not fleetctl's, and their events would be ghosts retried against
    Temporal; they are counted in `intake.npd_not_in_inventory`, on every poll.

    The list is read as the API server's JSON, not through the client's models (whose
    deserializer fails the whole list on one node's unreadable time), and each node and each
    condition on its own: one that cannot be read is skipped, counted in `intake.npd_skipped`
    (on every poll that sees it) and logged once, and never holds up another's."""
    logged: OrderedDict[str, None] = OrderedDict()
    while not stop.is_set():
        try:
            # The client types list_node's answer as its V1NodeList model; with _preload_content
            # False it is the raw urllib3 response.
            response: HTTPResponse = api.list_node(_request_timeout=30, _preload_content=False)  # type: ignore[assignment]
            body = json.loads(response.data)
            items = body.get("items") if isinstance(body, dict) else None
            if not isinstance(items, list):
                raise ValueError("the answer is not a NodeList")
            for node in items:
                skipped: list[str] = []
                try:
                    events = from_node_conditions(node, watched, lambda text: detect(text, policy), skipped)
                except BadBody as exc:
                    events = []
                    skipped.append(str(exc))
                if events and known is not None and known.unknown({events[0].node}):
                    intake.npd_not_in_inventory += len(events)
                    events = []
                intake.accept(events, NPD_CREDENTIAL)
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
