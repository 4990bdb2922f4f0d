"""No node and no sender delays another's critical event: a flood from two nodes' agents, a
node whose workflow refuses its signals, a send that times out mid-batch, a credential past
its bound, and a SIGTERM while the intake is busy. Real Temporal (the session's dev server,
or one of the test's own where Temporal must refuse), the real `fleetctl events serve`
process where the operator runs it."""

from __future__ import annotations

import asyncio
import http.client
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

import pytest

from fleetctl.connections.temporal_server import free_port, server_command, wait_for_port, wait_until_serving
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.intake import delivery, signals
from fleetctl.intake.credentials import Credentials, new_credential, token_hash
from fleetctl.intake.delivery import Intake
from fleetctl.intake.heartbeats import Heartbeats
from fleetctl.intake.parse import from_json
from fleetctl.intake.server import KnownNodes, serve_http
from fleetctl.intake.signals import WorkflowSignals
from fleetctl.workflows.api import HEALTH_EVENT_SIGNAL, NodeLifecycleState, node_workflow_id
from fleetctl.workflows.client import connect
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.intake.test_server import TOKEN, Recorder, post
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production, terminate_node_workflows

CLI = [sys.executable, "-m", "fleetctl.cli.main"]
STARTUP_S = 60  # an interpreter starting on a loaded machine
# From an XID 79's 202 to its node out of production: the intake's delivery (a poll, then
# one signal within its timeout) and the node workflow's own reaction, which is half a second
# on an idle machine and is given ten on this loaded one.
WORKFLOW_REACTION_S = 10.0
XID_TO_OUT_S = delivery.POLL_S + signals.SIGNAL_TIMEOUT_S + WORKFLOW_REACTION_S
# SIGTERM to exit: delivery's poll and its stop (the signal in flight, then its cancellation),
# the HTTP server's poll (socketserver's 0.5 s), the last heartbeats' write, the interpreter's
# exit (given five seconds on a loaded machine).
SIGTERM_TO_EXIT_S = delivery.POLL_S + 2 * delivery.STOP_S + 0.5 + 5.0 + 5.0

pytestmark = [pytest.mark.temporal, pytest.mark.slow]


def xid79(node: str, event_id: str) -> dict:
    return {"node": node, "code": 79, "message": "GPU has fallen off the bus", "id": event_id}


def minor(node: str, i: int) -> dict:
    """Half repeats of one Xid (merged in the queue), half findings each of its own (never)."""
    if i % 2:
        return {"node": node, "code": 13, "message": f"Graphics Engine Exception {i}", "id": f"{node}-{i}"}
    return {
        "node": node,
        "message": f"GPU 3 at {60 + i % 40} C, sample {i}",
        "severity": "warning",
        "id": f"{node}-{i}",
    }


def post_as(port: int, token: str, events: list[dict]) -> dict:
    status, text = post(port, "/events", {"events": events}, token)
    assert status == 202, text
    return json.loads(text)


def urllib_get(port: int, path: str) -> str:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request("GET", path)
    text = conn.getresponse().read().decode()
    conn.close()
    return text


def out_of_production(engine, node: str) -> bool:
    return queries.get_node(engine, node).state != "production"


def serve(env: dict, tmp_path, *extra: str) -> tuple[subprocess.Popen, int]:
    """`fleetctl events serve` on plain http, once its /healthz answers."""
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "events", "serve", "--port", str(port), "--spool", str(tmp_path / "spool"), *extra],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "intake.log", "wb"),
    )
    deadline = time.monotonic() + STARTUP_S
    while True:
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            conn.request("GET", "/healthz")
            conn.getresponse().read()
            conn.close()
            return proc, port
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "intake.log").read_text()[-500:]
            time.sleep(0.2)


def intake_env(settings, tmp_path, **more: str) -> dict:
    (tmp_path / "operator-token").write_text(TOKEN + "\n")
    env = {
        **os.environ,
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_DB_URL": settings.db_url,
        "TEMPORAL_ADDRESS": settings.temporal_address,
        "FLEETCTL_INTAKE_TOKEN": TOKEN,
        **more,
    }
    return env


def credentials_for(tmp_path, nodes: list[str]) -> dict[str, str]:
    secrets = {node: new_credential() for node in nodes}
    (tmp_path / "agents.hashes").write_text("".join(f"{n} {token_hash(s)}\n" for n, s in secrets.items()))
    return secrets


async def test_a_flood_from_two_nodes_agents_never_delays_another_nodes_xid_79(
    make_settings, sqlite_url, tmp_path, request
) -> None:
    """Two nodes' agents post 10,000 minor events each (their credentials' whole bound) to the
    intake process; another node's XID 79, posted once they are all queued, takes that node
    out of production within XID_TO_OUT_S, however much of the flood is still undelivered."""
    settings = make_settings(sqlite_url)
    flood_a, flood_b, quiet = names = make_fleet(settings, 3)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    client = await connect(settings)
    for node in names:
        await start_in_production(client, settings, node)
    request.addfinalizer(lambda: asyncio.run(terminate_node_workflows(settings, names)))
    secrets = credentials_for(tmp_path, names)
    proc, port = serve(intake_env(settings, tmp_path), tmp_path, "--credentials", str(tmp_path / "agents.hashes"))
    try:

        def flood(node: str) -> int:
            return sum(
                post_as(port, secrets[node], [minor(node, i) for i in range(start, start + 1000)])["accepted"]
                for start in range(0, 10_000, 1000)
            )

        with ThreadPoolExecutor(2) as pool:
            accepted = sum(
                await asyncio.gather(*(asyncio.wrap_future(pool.submit(flood, n)) for n in (flood_a, flood_b)))
            )
        assert accepted == 20_000
        answer = post_as(port, secrets[quiet], [xid79(quiet, "the-xid-79")])
        posted = time.monotonic()
        assert answer["accepted"] == 1
        await wait_for(lambda: out_of_production(engine, quiet), XID_TO_OUT_S, "the XID 79 to take its node out")
        took = time.monotonic() - posted
        health = json.loads(urllib_get(port, "/healthz"))
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(SIGTERM_TO_EXIT_S)
    assert code == 0, (tmp_path / "intake.log").read_text()[-1000:]
    # The flood was still being delivered when the XID 79 went ahead of it.
    assert health["spool_depth"] > 0 and health["merged"] > 0, health
    print(f"XID 79 out of production {took:.2f}s after its 202; {health}")


@pytest.fixture
def refusing_temporal(tmp_path):
    """A Temporal dev server of the test's own on which a workflow takes at most SIGNAL_LIMIT
    signals a run, then refuses every other (Temporal's own limit, lowered)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            *server_command(tmp_path / "temporal.db", port, None),
            "--dynamic-config-value",
            f"history.maximumSignalsPerExecution={SIGNAL_LIMIT}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        wait_for_port("127.0.0.1", port, process=proc)
        wait_until_serving(f"127.0.0.1:{port}", process=proc)
        yield f"127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(30)


SIGNAL_LIMIT = 10


async def test_one_nodes_workflow_refusing_its_signals_never_stops_another_nodes_xid_79(
    make_settings, sqlite_url, refusing_temporal, tmp_path, request, caplog
) -> None:
    """A node's workflow past its signal limit refuses every further signal. Its events wait
    (held, tried again on a backoff of their own) while another node's XID 79, posted after
    the refusing node was refused five times, goes at once: had the refusals paused every
    node's delivery, as Temporal being away does, the pause would be 8 s and growing."""
    caplog.set_level(logging.WARNING, "fleetctl.intake")
    settings = replace(make_settings(sqlite_url), temporal_address=refusing_temporal)
    refusing, healthy = make_fleet(settings, 2)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    client = await connect(settings)
    for node in (refusing, healthy):
        await start_in_production(client, settings, node)
    intake = Intake(tmp_path / "spool", WorkflowSignals(settings))
    http_server = serve_http(
        intake, TOKEN, "127.0.0.1", 0, known=KnownNodes(lambda names: queries.existing_names(engine, names))
    )
    stop = threading.Event()
    delivering = asyncio.create_task(intake.deliver_until(stop))
    try:
        answer = post_as(
            http_server.server_port, TOKEN, [minor(refusing, 2 * i) for i in range(3 * SIGNAL_LIMIT)]
        )  # findings, never merged
        assert answer["accepted"] == 3 * SIGNAL_LIMIT

        def refusals() -> int:
            return sum(refusing in r.getMessage() for r in caplog.records)

        await wait_for(lambda: refusals() >= 5, 60, "the refusing node to be refused five times")
        sent = intake.sent
        post_as(http_server.server_port, TOKEN, [xid79(healthy, "healthy-xid-79")])
        posted = time.monotonic()
        await wait_for(
            lambda: intake.sent > sent, delivery.POLL_S + signals.SIGNAL_TIMEOUT_S, "the XID 79 to be signalled"
        )
        await wait_for(lambda: out_of_production(engine, healthy), XID_TO_OUT_S, "the XID 79 to take its node out")
        took = time.monotonic() - posted
        assert intake.queue.held_nodes(time.monotonic()) <= 1 and intake.depth > 0  # the refused ones wait
    finally:
        stop.set()
        await delivering
        http_server.shutdown()
        intake.close()
    assert intake.sent == SIGNAL_LIMIT + 1  # what the refusing workflow took, and the XID 79
    print(f"XID 79 out of production {took:.2f}s after its 202, past {refusals()} refusals of another node")


class Valve:
    """A TCP relay to Temporal that can be shut: while shut, what either side sends is lost
    (a signal in flight never arrives, its answer never comes); opened again, the connections
    it held are closed, and the client connects afresh."""

    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self.upstream, self.open = (host, int(port)), True
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def _relay(self, reader, writer) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers += [writer, up_writer]

        async def pipe(src, dst) -> None:
            try:
                while data := await src.read(1 << 16):
                    if self.open:
                        dst.write(data)
                        await dst.drain()
            except OSError:
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))

    def reopen(self) -> None:
        self.open = True
        for writer in self._writers:
            writer.transport.abort()
        self._writers.clear()

    def close(self) -> None:
        self._server.close()
        self.reopen()


async def test_a_send_that_times_out_resumes_where_it_stopped(make_settings, sqlite_url, tmp_path, caplog) -> None:
    """A node's 150 findings are being signalled when the network to Temporal goes dead:
    the signal in flight times out, delivery pauses, and once the network is back it resumes
    at the event that timed out. The workflow's history holds each event's signal once (the
    one in flight when the network died may have arrived, and then is there twice: the intake
    cannot know), never a batch sent again."""
    caplog.set_level(logging.WARNING, "fleetctl.intake")
    settings = make_settings(sqlite_url)
    node = f"resume-{os.getpid()}-{time.monotonic_ns()}"
    client = await connect(settings)
    handle = await client.start_workflow(  # no worker: its history is what Temporal took
        NodeLifecycle.run, NodeLifecycleState(node=node), id=node_workflow_id(node), task_queue=f"nobody-{node}"
    )
    valve = Valve(settings.temporal_address)
    timeout_s = 1.0
    intake = Intake(
        tmp_path / "spool",
        WorkflowSignals(replace(settings, temporal_address=await valve.start()), timeout_s=timeout_s),
        batch_size=200,  # one batch: the timed-out send is in its middle
    )
    events = [minor(node, 2 * i) for i in range(150)]  # findings, never merged
    parsed = from_json({"events": events}, time.time())
    intake.accept(parsed)
    stop = threading.Event()
    delivering = asyncio.create_task(intake.deliver_until(stop))
    try:
        await wait_for(lambda: intake.signals >= 30, 60, "the first 30 signals")
        valve.open = False
        await wait_for(lambda: "cannot deliver" in caplog.text, 10 * timeout_s, "a send to time out")
        stalled = intake.signals
        valve.reopen()
        await wait_for(lambda: intake.depth == 0, 60, "the rest to be delivered")
    finally:
        stop.set()
        await delivering
        intake.close()
        valve.close()
    ids = []
    async for history_event in handle.fetch_history_events():
        if history_event.HasField("workflow_execution_signaled_event_attributes"):
            attributes = history_event.workflow_execution_signaled_event_attributes
            assert attributes.signal_name == HEALTH_EVENT_SIGNAL
            ids.append(json.loads(attributes.input.payloads[0].data)["event_id"])
    await handle.terminate("test finished")
    assert 30 <= stalled < 150
    assert sorted(set(ids)) == sorted(e.event_id for e in parsed)
    assert len(ids) - len(set(ids)) <= 1, f"{len(ids) - len(set(ids))} events signalled twice"


def test_past_its_bound_a_credential_loses_minor_events_and_a_critical_one_is_still_taken(tmp_path, caplog) -> None:
    """An agent credential with 50 events queued (its bound here): its further minor events
    are dropped, counted in the answer and in /healthz and logged; its XID 79 is taken; the
    operator token's events for the same node have their own room."""
    secret = new_credential()
    (tmp_path / "agents.hashes").write_text(f"n1 {token_hash(secret)}\n")
    intake = Intake(tmp_path / "spool", Recorder(), max_per_credential=50)
    srv = serve_http(intake, Credentials(TOKEN, tmp_path / "agents.hashes"), "127.0.0.1", 0, Heartbeats(len))
    try:
        flood = post_as(srv.server_port, secret, [minor("n1", 2 * i) for i in range(80)])
        assert (flood["accepted"], flood["dropped"], flood["nodes"]["n1"]["dropped"]) == (50, 30, 30)
        assert post_as(srv.server_port, secret, [xid79("n1", "past-the-bound")])["accepted"] == 1
        assert post_as(srv.server_port, TOKEN, [minor("n1", 1000)])["accepted"] == 1
        health = json.loads(urllib_get(srv.server_port, "/healthz"))
        assert (health["dropped"], health["spool_depth"]) == (30, 52)
    finally:
        srv.shutdown()
        intake.close()
    assert "agent:n1: 30 minor events dropped past its bound of 50 queued" in caplog.text
    assert secret not in caplog.text


def test_sigterm_ends_a_busy_intake_within_its_bound_and_the_spool_keeps_what_it_took(tmp_path, sqlite_url) -> None:
    """Temporal takes connections and never answers; the intake has a send in flight and
    clients posting when SIGTERM comes. It exits 0 within SIGTERM_TO_EXIT_S, and every event
    it answered 202 for is in its spool when it is opened again."""
    import yaml

    from fleetctl.inventory.parse import parse_inventory

    queries.upsert_nodes(
        get_engine(sqlite_url),
        parse_inventory(yaml.safe_dump({"nodes": [{"name": "n1", "address": "sim://n1", "profile": "h100-sxm"}]})),
    )
    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the backlog), answers nothing
    env = {
        **os.environ,
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_DB_URL": sqlite_url,
        "TEMPORAL_ADDRESS": f"127.0.0.1:{silent.getsockname()[1]}",
        "FLEETCTL_INTAKE_TOKEN": TOKEN,
    }
    proc, port = serve(env, tmp_path)
    taken = 0
    posting = threading.Event()

    def keep_posting() -> None:
        nonlocal taken
        for start in range(0, 100_000, 500):
            try:
                status, text = post(
                    port, "/events", {"events": [minor("n1", 2 * i) for i in range(start, start + 500)]}
                )
            except OSError:
                return  # the intake went away mid-request: not taken
            if status != 202:
                return
            taken += json.loads(text)["accepted"]
            posting.set()

    poster = threading.Thread(target=keep_posting)
    poster.start()
    try:
        assert posting.wait(STARTUP_S)
        time.sleep(1.0)  # let posts pile up and a send to the silent Temporal be in flight
        proc.send_signal(signal.SIGTERM)
        sent_at = time.monotonic()
        code = proc.wait(SIGTERM_TO_EXIT_S)
        took = time.monotonic() - sent_at
    finally:
        if proc.poll() is None:
            proc.kill()
        poster.join(60)
        silent.close()
    log = (tmp_path / "intake.log").read_text()
    assert code == 0 and "Traceback" not in log, log[-1000:]
    kept = Intake(tmp_path / "spool", None)
    try:
        assert taken > 0 and kept.depth >= taken, (kept.depth, taken)
    finally:
        kept.close()
    print(f"SIGTERM to exit {took:.2f}s with {taken} events taken, {kept.depth} in the spool")


class Hangs:
    """A Temporal that takes a signal and never answers."""

    def __init__(self) -> None:
        self.sending = False

    async def send(self, node: str, events: list[dict]) -> None:
        self.sending = True
        await asyncio.Event().wait()


async def test_stop_ends_delivery_within_its_bound_while_a_send_hangs(tmp_path) -> None:
    """The signal in flight never answered: stop still ends delivery within POLL_S and twice
    STOP_S (the signal's grace, then its cancellation), and the event stays spooled."""
    hangs = Hangs()
    intake = Intake(tmp_path / "spool", hangs)
    intake.accept(from_json({"events": [xid79("n1", "hangs")]}, time.time()))
    stop = threading.Event()
    delivering = asyncio.create_task(intake.deliver_until(stop))
    await wait_for(lambda: hangs.sending, 10, "the send to be in flight")
    stop.set()
    started = time.monotonic()
    await asyncio.wait_for(delivering, delivery.POLL_S + 2 * delivery.STOP_S + 1.0)
    took = time.monotonic() - started
    intake.close()
    kept = Intake(tmp_path / "spool", None)
    assert kept.depth == 1 and took < delivery.POLL_S + 2 * delivery.STOP_S + 1.0
    kept.close()


def test_a_spool_line_the_intake_cannot_send_is_moved_aside_and_the_rest_delivered(tmp_path) -> None:
    """A line that is JSON but no event (no source, a code that is text) would fail every
    send of its node: it is set aside at start, the events around it kept."""
    intake = Intake(tmp_path / "spool", Recorder())
    intake.accept(from_json({"events": [xid79("n1", "before"), xid79("n2", "after")]}, time.time()))
    intake.close()
    segment = next((tmp_path / "spool").glob("segment-*.jsonl"))
    good = segment.read_text().splitlines()
    bad = json.dumps({**json.loads(good[0]), "event_id": "garbled", "code": "79"})
    segment.write_text("\n".join([good[0], bad, good[1]]) + "\n")
    reopened = Intake(tmp_path / "spool", Recorder())
    try:
        assert reopened.depth == 2 and len(reopened.spool.moved_aside) == 1
        assert asyncio.run(reopened.deliver_once()) and reopened.sent == 2
    finally:
        reopened.close()
