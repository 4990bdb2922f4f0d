"""Poisoned by one input: one event whose text cannot be stored, or is too large
for a payload or a command line, must not stall the node's workflow. Each case sends the
poison through the edge an operator or a sender uses (the intake over HTTP, the CLI), waits
until the node's workflow has taken it, then sends an XID 79 and waits for the drain.

Today's code failed each: a lone surrogate made the record activity fail with
UnicodeEncodeError and retry for ever (the XID 79 behind it waited for ever); a 1 MB
`alertname` made the workflow task fail with PAYLOADS_TOO_LARGE; a 200 KB label became a
drain cause that `scontrol` cannot take as an argument."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime

import pytest
from temporalio.client import Client

from fleetctl.agent.transport import TemporalTransport
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.intake.server import Intake, serve_http
from fleetctl.schedulers import scheduler_for
from fleetctl.schedulers.base import REASON_PREFIX
from fleetctl.text import MAX_TEXT
from fleetctl.workflows.api import HealthEventInput, TransitionRequest, TransitionResult, node_workflow_id
from fleetctl.workflows.client import connect, send_health_events
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.definitions.shared import QUICK, SCHEDULER_ROUND
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = [pytest.mark.temporal]

TOKEN = "poisoned-input-intake-token-0123456"
STEP_S = QUICK["start_to_close_timeout"].total_seconds()
# The cordon's first round: its activity's start-to-close (SCHEDULER_ROUND).
CORDON_S = SCHEDULER_ROUND["start_to_close_timeout"].total_seconds()
# An XID 79 is recorded after at most one burst's activity already under way, then drained
# by a decision of a handful of activities (node facts, the guard, the transition, the
# cordon): each bounded by QUICK's start-to-close.
DRAIN_S = 6 * STEP_S
# A signal or request taken off the node's queue: the workflow task that takes it, and the
# intake's delivery (a poll interval and one send), well inside one activity's bound.
TAKEN_S = STEP_S
# An operator's drain answered: the workflow task that takes the update and the transition's
# record activity.
ANSWERED_S = 2 * STEP_S


@dataclass
class Stack:
    """A live stack: a real Temporal dev server and worker, simulated nodes in production, and
    the intake serving HTTP and delivering to the nodes' workflows."""

    settings: Settings
    client: Client
    nodes: list[str]
    port: int

    @property
    def engine(self):
        return get_engine(self.settings.db_url)

    def post(self, path: str, body: bytes | dict) -> tuple[int, str]:
        data = json.dumps(body).encode() if isinstance(body, dict) else body
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            try:
                conn.request(
                    "POST",
                    path,
                    body=data,
                    headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
                )
            except (BrokenPipeError, ConnectionResetError):
                pass  # a body past the bound is refused before it is read: the answer waits
            try:
                resp = conn.getresponse()
            except (ConnectionResetError, http.client.RemoteDisconnected):
                return 0, "the connection was closed before an answer was read"
            return resp.status, resp.read().decode()
        finally:
            conn.close()

    async def current(self, node: str):
        return await self.client.get_workflow_handle(node_workflow_id(node)).query(NodeLifecycle.current)

    async def taken(self, node: str, what: str) -> None:
        """Until the node's workflow has taken everything queued (it may still be working on it)."""

        async def empty() -> bool:
            return not (await self.current(node)).work

        await wait_for(empty, TAKEN_S, f"{node}'s workflow to take {what}")

    async def xid_79_drains(self, node: str, via: str = "intake") -> None:
        """An XID 79 for `node`, sent through the intake, drains it within DRAIN_S."""
        status, text = self.post("/events", {"node": node, "code": 79, "message": "GPU has fallen off the bus"})
        assert status == 202, text
        await self.drained_by_xid_79(node)

    async def drained_by_xid_79(self, node: str) -> None:
        def drained() -> bool:
            return any(e.trigger == "drain" and "XID 79" in e.cause for e in queries.node_events(self.engine, node))

        try:
            await wait_for(drained, DRAIN_S, f"the XID 79 to drain {node}")
        except AssertionError:
            s = await self.current(node)
            raise AssertionError(
                f"{node} not drained within {DRAIN_S:.0f}s: state {s.state}, doing {s.activity!r}, "
                f"{len(s.work)} queued, last outcome {s.last_outcome[:200]!r}"
            ) from None


@pytest.fixture
async def stack(make_settings, sqlite_url, tmp_path):
    """factory(count) -> Stack."""
    settings = make_settings(sqlite_url)
    stops = []

    async def factory(count: int = 1) -> Stack:
        nodes = make_fleet(settings, count)
        worker = WorkerThread(settings).start()
        stops.append(worker.stop)
        client = await connect(settings)
        for node in nodes:
            await start_in_production(client, settings, node)
        intake = Intake(tmp_path / "spool", TemporalTransport(settings))
        http_server = serve_http(intake, TOKEN, "127.0.0.1", 0)
        stop = threading.Event()
        # Its own thread and event loop, as `fleetctl events serve` runs it: not the test's.
        delivery = threading.Thread(target=asyncio.run, args=(intake.deliver_until(stop),), daemon=True)
        delivery.start()

        def stop_intake() -> None:
            stop.set()
            delivery.join(30)
            http_server.shutdown()
            intake.spool.close()

        stops.append(stop_intake)
        return Stack(settings, client, nodes, http_server.server_port)

    yield factory
    for stop in reversed(stops):
        stop()


def fleetctl(stack: Stack, *args: str | bytes, timeout_s: float) -> subprocess.CompletedProcess:
    """The real `fleetctl` process, as an operator's shell starts it: argv as bytes, so bytes
    that are not UTF-8 reach it as they would (Python hands them over as lone surrogates)."""
    s = stack.settings
    argv = [
        sys.executable,
        "-m",
        "fleetctl.cli.main",
        "--db-url",
        s.db_url,
        "--temporal-address",
        s.temporal_address,
        "--task-queue",
        s.task_queue,
        "--as",
        "alice@console",
        *args,
    ]
    env = {**os.environ, "FLEETCTL_FLEET": s.fleet, "FLEETCTL_CONFIG": os.devnull}
    return subprocess.run(
        [a if isinstance(a, bytes) else a.encode() for a in argv], capture_output=True, env=env, timeout=timeout_s
    )


# ---- a lone surrogate ---------------------------------------------------------------------


async def test_a_lone_surrogate_through_the_intake_is_recorded_replaced_and_the_xid_79_after_it_drains(stack) -> None:
    s = await stack(1)
    (node,) = s.nodes
    # JSON's escape of a lone UTF-16 surrogate: valid JSON, text no database can encode.
    body = b'{"node": "%s", "id": "e-1", "message": "GPU 3: \\ud800 garbled", "severity": "warning"}' % node.encode()
    status, text = s.post("/events", body)
    assert status == 202, text
    # The intake delivers from its spool in its own thread: wait for the record itself (an
    # empty queue can be one the event has not reached yet; the XID 79 would then go first).
    await wait_for(
        lambda: "GPU 3: \ufffd garbled" in [e.message for e in queries.health_events(s.engine, node)],
        DRAIN_S,
        "the event recorded with the surrogate replaced",
    )
    await s.xid_79_drains(node)


async def test_a_lone_surrogate_from_the_cli_is_recorded_replaced_and_the_xid_79_after_it_drains(stack) -> None:
    s = await stack(1)
    (node,) = s.nodes
    # A byte that is not UTF-8 on an operator's command line (a Latin-1 terminal): Python
    # decodes argv with surrogateescape, so the message holds the lone surrogate U+DCFF.
    done = await asyncio.to_thread(
        fleetctl, s, "node", "event", node, "--message", b"fan \xff stuck", "--severity", "warning", timeout_s=DRAIN_S
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    await s.taken(node, "the operator's event")
    await s.xid_79_drains(node)
    assert "fan \ufffd stuck" in [e.message for e in queries.health_events(s.engine, node)]


async def test_a_drain_reason_with_a_lone_surrogate_drains_and_the_node_records_what_follows(stack) -> None:
    s = await stack(1)
    (node,) = s.nodes
    done = await asyncio.to_thread(
        fleetctl, s, "node", "drain", node, "--reason", b"PSU \xff smoke", "--yes", timeout_s=DRAIN_S
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    (drain,) = [e for e in queries.node_events(s.engine, node) if e.trigger == "drain"]
    assert drain.cause == "operator: PSU \ufffd smoke"
    # The node's workflow goes on: an XID 79 after it is recorded (it is drained already).
    status, text = s.post("/events", {"node": node, "code": 79, "id": "after-the-drain"})
    assert status == 202, text
    await wait_for(
        lambda: any(e.code == 79 for e in queries.health_events(s.engine, node)),
        DRAIN_S,
        "the XID 79 after the drain to be recorded",
    )


@pytest.mark.parametrize("reason, words", [(b"", "--reason must say why"), (b"   ", "--reason must say why")])
async def test_a_drain_reason_that_says_nothing_is_a_usage_error(stack, reason, words) -> None:
    s = await stack(1)
    done = await asyncio.to_thread(
        fleetctl, s, "node", "drain", s.nodes[0], "--reason", reason, "--yes", timeout_s=DRAIN_S
    )
    lines = done.stderr.decode().strip().splitlines()
    assert done.returncode == 2 and lines == [f"error: {words}"], done.stderr
    assert queries.get_node(s.engine, s.nodes[0]).state == "production"


# ---- labels too large ---------------------------------------------------------------------


def _alert(node: str, alertname: str, **labels: str) -> dict:
    now = datetime.now(UTC).isoformat()
    return {
        "version": "4",
        "status": "firing",
        "receiver": "fleetctl",
        "groupLabels": {},
        "commonLabels": {},
        "alerts": [
            {
                "status": "firing",
                "labels": {"alertname": alertname, "Hostname": node, **labels},
                "annotations": {},
                "startsAt": now,
                "fingerprint": os.urandom(8).hex(),
            }
        ],
    }


async def test_an_alert_with_a_1_mb_alertname_is_bounded_and_the_xid_79_after_it_drains(stack) -> None:
    s = await stack(1)
    (node,) = s.nodes
    status, text = s.post("/alertmanager", _alert(node, "G" * 1_000_000, severity="warning"))
    assert status == 202, text
    # Delivered from the intake's spool in its own thread: wait for the record itself.
    await wait_for(
        lambda: [e for e in queries.health_events(s.engine, node) if e.code is None], DRAIN_S, "the alert recorded"
    )
    await s.xid_79_drains(node)
    (event,) = [e for e in queries.health_events(s.engine, node) if e.code is None]
    assert len(event.message) <= MAX_TEXT and event.message.startswith("GGGG")


async def test_a_critical_alert_with_a_200_kb_label_drains_with_a_bounded_cause(stack) -> None:
    """The label becomes the drain cause: bounded, so the cordon (scontrol's one argument on
    Slurm) can take it; tests/schedulers/test_slurm_cluster.py hands the real scontrol a
    400,000-character cause."""
    s = await stack(1)
    (node,) = s.nodes
    status, text = s.post("/alertmanager", _alert(node, "X" * 200_000, xid="79", severity="critical"))
    assert status == 202, text
    await s.drained_by_xid_79(node)
    (drain,) = [e for e in queries.node_events(s.engine, node) if e.trigger == "drain"]
    assert len(drain.cause) <= MAX_TEXT and "XXXX" in drain.cause, len(drain.cause)
    # What the (simulated) scheduler holds as the node's drain reason, once the cordon that
    # follows the drain's transition has reached it.
    scheduler = scheduler_for("sim", s.settings)
    await wait_for(lambda: scheduler.node_state(node).reason, CORDON_S, f"{node}'s drain reason in its scheduler")
    reason = scheduler.node_state(node).reason
    assert reason.startswith(REASON_PREFIX) and len(reason) <= len(REASON_PREFIX) + 1 + MAX_TEXT


async def test_a_sender_signalling_temporal_directly_cannot_grow_the_node_workflow(stack) -> None:
    """Past every edge (a tool of its own calling Temporal): a 1.5 MB message with a lone
    surrogate and a 100 KB actor. The node's workflow keeps them bounded (its state, history
    and the record activity's payload), records the event, and a following XID 79 drains it."""
    s = await stack(1)
    (node,) = s.nodes
    await send_health_events(
        s.client,
        node,
        [
            HealthEventInput(
                node, "xid", 13, "M" * 1_500_000 + "\ud800", "A" * 100_000, "direct-13", time.time(), severity="warning"
            )
        ],
    )
    await s.taken(node, "the huge event")
    await s.xid_79_drains(node)
    (recorded,) = [h for h in queries.health_events(s.engine, node) if h.code == 13]
    assert len(recorded.message) <= MAX_TEXT and "\ud800" not in recorded.message
    # The signal holds what was sent; every activity the workflow scheduled after it, bounded copies.
    history = await s.client.get_workflow_handle(node_workflow_id(node)).fetch_history()
    scheduled = [e.ByteSize() for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]
    assert scheduled and max(scheduled) < 16 * MAX_TEXT, max(scheduled)


async def test_a_transition_sent_to_temporal_directly_keeps_a_bounded_cause(stack) -> None:
    """Past every edge (a tool of its own calling the `transition` update, with no CLI to
    bound its --reason): a drain whose cause is 1.5 MB with a lone surrogate. The node's
    workflow bounds the cause before anything keeps it: the transition is answered and
    recorded, the cordon's reason and every activity scheduled after it are bounded."""
    s = await stack(1)
    (node,) = s.nodes
    request = TransitionRequest(
        trigger="drain", actor="mallory@own-tool", cause="C" * 1_500_000 + "\ud800", request_id=f"direct-{node}"
    )
    handle = s.client.get_workflow_handle(node_workflow_id(node))
    try:
        result = await asyncio.wait_for(
            handle.execute_update(NodeLifecycle.transition, request, result_type=TransitionResult), ANSWERED_S
        )
    except TimeoutError:
        current = await s.current(node)
        raise AssertionError(
            f"the drain was not answered within {ANSWERED_S:.0f}s: doing {current.activity!r}, "
            f"last outcome {current.last_outcome[:200]!r}"
        ) from None
    assert (result.from_state, result.to_state) == ("production", "draining")
    (drain,) = [e for e in queries.node_events(s.engine, node) if e.trigger == "drain"]
    assert len(drain.cause) <= MAX_TEXT and drain.cause.startswith("CCCC") and "\ud800" not in drain.cause
    scheduler = scheduler_for("sim", s.settings)
    await wait_for(lambda: scheduler.node_state(node).reason, CORDON_S, f"{node}'s drain reason in its scheduler")
    reason = scheduler.node_state(node).reason
    assert reason.startswith(REASON_PREFIX) and len(reason) <= len(REASON_PREFIX) + 1 + MAX_TEXT
    # The update holds what was sent; every activity the workflow scheduled after it, bounded copies.
    history = await handle.fetch_history()
    scheduled = [e.ByteSize() for e in history.events if e.HasField("activity_task_scheduled_event_attributes")]
    assert scheduled and max(scheduled) < 16 * MAX_TEXT, max(scheduled)
