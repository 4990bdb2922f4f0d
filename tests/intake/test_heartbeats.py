"""Agents' heartbeats over real HTTP into a real database: the agent's own sender, the
intake's token and one-line refusals, one write for every node heard, the later time kept,
a database that is away for a while, and the bound on what waits in memory."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from alembic import command
from alembic.config import Config
from sqlalchemy import inspect

from fleetctl.agent.follow import FileSource
from fleetctl.agent.heartbeat import HeartbeatFailed, HeartbeatSender
from fleetctl.agent.runner import Agent, AgentConfig
from fleetctl.connections.temporal_server import free_port
from fleetctl.db import queries
from fleetctl.db.engine import MIGRATIONS_DIR, get_engine
from fleetctl.durations import as_utc
from fleetctl.intake.delivery import Intake
from fleetctl.intake.heartbeats import Heartbeats
from fleetctl.intake.server import serve_http
from fleetctl.inventory.parse import parse_inventory
from fleetctl.sim.inventory import render_inventory

TOKEN = "s3cret-token-for-tests-0123456789"


class NoEvents:
    async def send(self, node, events):  # heartbeats never go through the event transport
        raise AssertionError("a heartbeat was sent as an event")


@pytest.fixture
def intake(tmp_path, sqlite_url):
    """A real intake on 127.0.0.1 whose heartbeats are written to a real database of 3 nodes."""
    engine = get_engine(sqlite_url)
    specs = parse_inventory(yaml.safe_dump({"nodes": render_inventory(3, 1, "h100-sxm", seed=1, name_prefix="hb")}))
    queries.upsert_nodes(engine, specs)
    writes: list[int] = []

    def record(heard):
        writes.append(len(heard))
        return queries.record_agent_heartbeats(engine, heard)

    beats = Heartbeats(record)
    it = Intake(tmp_path / "spool", NoEvents())
    srv = serve_http(it, TOKEN, "127.0.0.1", 0, beats)
    it.url, it.beats, it.engine, it.names, it.writes = (
        f"http://127.0.0.1:{srv.server_port}",
        beats,
        engine,
        [s.name for s in specs],
        writes,
    )
    yield it
    srv.shutdown()
    it.close()


def seen(intake) -> dict[str, datetime | None]:
    return {
        n: (as_utc(x.agent_seen_at) if x.agent_seen_at else None)
        for n in intake.names
        for x in [queries.get_node(intake.engine, n)]
    }


def post(url: str, body: bytes, token: str | None = TOKEN) -> tuple[int, str]:
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    conn.request(
        "POST",
        "/heartbeat",
        body=body,
        headers={"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})},
    )
    resp = conn.getresponse()
    out = resp.status, resp.read().decode()
    conn.close()
    return out


def test_the_agents_heartbeats_are_written_in_one_statement_with_the_intakes_time(intake) -> None:
    before = datetime.now(UTC)
    for name in intake.names[:2]:
        HeartbeatSender(intake.url, TOKEN).send(name)
        HeartbeatSender(intake.url, TOKEN).send(name)  # twice before a write: one row, the later time
    HeartbeatSender(intake.url, TOKEN).send("not-in-the-inventory")  # changes nothing
    assert seen(intake) == dict.fromkeys(intake.names)  # held until the write
    assert intake.beats.flush() == 2 and intake.writes == [3]
    after = datetime.now(UTC)
    got = seen(intake)
    assert all(before <= got[n] <= after for n in intake.names[:2]) and got[intake.names[2]] is None
    assert queries.get_node(intake.engine, "not-in-the-inventory") is None


def test_an_older_time_never_replaces_a_later_one(intake) -> None:
    node, now = intake.names[0], datetime.now(UTC)
    assert queries.record_agent_heartbeats(intake.engine, {node: now}) == 1
    # Another intake, behind: its write is ignored.
    assert queries.record_agent_heartbeats(intake.engine, {node: now - timedelta(seconds=30)}) == 0
    assert seen(intake)[node] == now


@pytest.mark.parametrize(
    "body, token, status, words",
    [
        (b'{"node": "hb-x"}', None, 401, "a bearer token is required"),
        (b'{"node": "hb-x"}', "wrong", 401, "a bearer token is required"),
        (b"{not json", TOKEN, 400, "the body is not JSON"),
        (b'["hb-x"]', TOKEN, 400, "valid node name"),
        (b'{"node": "a;reboot"}', TOKEN, 400, "valid node name"),
        (b'{"node": "hb\\n"}', TOKEN, 400, "valid node name"),
        (b'{"node": 7}', TOKEN, 400, "valid node name"),
    ],
)
def test_a_bad_heartbeat_gets_one_line_and_changes_nothing(intake, body, token, status, words) -> None:
    code, text = post(intake.url, body, token)
    assert code == status and words in text and text.count("\n") == 1
    assert intake.beats.pending == 0 and intake.beats.heard == 0


def test_a_sender_told_no_says_so_and_refuses_a_url_that_is_not_http(intake) -> None:
    with pytest.raises(HeartbeatFailed, match="answered 401"):
        HeartbeatSender(intake.url, "wrong").send(intake.names[0])
    with pytest.raises(HeartbeatFailed):
        HeartbeatSender("http://127.0.0.1:1", TOKEN).send(intake.names[0])  # nobody listens
    for bad in ("ftp://intake:21", "intake:9411", "http://"):
        with pytest.raises(ValueError):
            HeartbeatSender(bad, TOKEN)


def test_heartbeats_heard_while_the_database_is_away_are_written_when_it_is_back(intake) -> None:
    node = intake.names[0]
    down = Heartbeats(lambda heard: (_ for _ in ()).throw(OSError("database unreachable")))
    assert down.note(node)
    assert down.flush() == 0 and down.write_failures == 1 and down.pending == 1  # kept
    down.record = lambda heard: queries.record_agent_heartbeats(intake.engine, heard)
    assert down.flush() == 1 and down.pending == 0 and seen(intake)[node] is not None


def test_past_the_bound_a_new_node_is_refused_with_503_and_the_ones_waiting_still_count(intake) -> None:
    intake.beats.max_pending = 2
    a, b, c = intake.names
    assert [post(intake.url, json.dumps({"node": n}).encode())[0] for n in (a, b, a)] == [202, 202, 202]
    code, text = post(intake.url, json.dumps({"node": c}).encode())
    assert code == 503 and "send again later" in text
    assert intake.beats.flush() == 2
    assert post(intake.url, json.dumps({"node": c}).encode())[0] == 202  # room again after the write


async def test_the_running_agent_beats_every_interval_and_counts_what_failed(intake, tmp_path) -> None:
    log = tmp_path / "kern.log"
    log.write_text("")
    node = intake.names[0]
    interval = 0.2
    agent = Agent(
        AgentConfig(node=node, spool_dir=tmp_path / "agent", heartbeat_interval_s=interval),
        FileSource(log),
        NoEvents(),
        heartbeat=HeartbeatSender(intake.url, TOKEN),
    )
    stop = asyncio.Event()
    task = asyncio.create_task(agent.run_until(stop))
    # Three beats take two intervals; the bound is generous for a loaded machine, the
    # condition is the count.
    for _ in range(int(30 / interval)):
        if agent.metrics.heartbeats._value.get() >= 3:
            break
        await asyncio.sleep(interval)
    assert agent.metrics.heartbeats._value.get() >= 3
    intake.beats.flush()
    assert seen(intake)[node] is not None
    agent.heartbeat = HeartbeatSender(intake.url, "wrong")  # the intake refuses: counted, the loop goes on
    for _ in range(int(30 / interval)):
        if agent.metrics.heartbeat_failures._value.get() >= 1:
            break
        await asyncio.sleep(interval)
    stop.set()
    await task
    assert agent.metrics.heartbeat_failures._value.get() >= 1


def test_migration_0009_adds_and_removes_the_agent_seen_column(intake) -> None:
    engine, cfg = intake.engine, Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    queries.record_agent_heartbeats(engine, {intake.names[0]: datetime.now(UTC)})

    def columns() -> set[str]:
        return {c["name"] for c in inspect(engine).get_columns("nodes")}

    assert "agent_seen_at" in columns()
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.downgrade(cfg, "0008")
    assert "agent_seen_at" not in columns() and len(intake.names) == 3  # the nodes stay
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")
    assert "agent_seen_at" in columns() and seen(intake) == dict.fromkeys(intake.names)  # heard by none yet


def test_a_real_agent_process_is_heard_through_a_real_intake_process(intake, tmp_path) -> None:
    """`fleetctl agent --heartbeat-url` against `fleetctl events serve`, both as operators run
    them: the node's agent is recorded as heard in the database, and the intake writes what
    it heard before it exits."""
    node = intake.names[1]
    db_url = str(intake.engine.url)
    port = free_port()
    env = {
        **os.environ,
        "FLEETCTL_CONFIG": os.devnull,
        "FLEETCTL_INTAKE_TOKEN": TOKEN,
        "FLEETCTL_DB_URL": db_url,
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
    }  # neither needs Temporal to beat: no events here
    log = tmp_path / "kern.log"
    log.write_text("")
    cli = [sys.executable, "-m", "fleetctl.cli.main"]
    server = subprocess.Popen(
        [*cli, "events", "serve", "--port", str(port), "--spool", str(tmp_path / "intake")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "intake.log", "wb"),
    )
    agent = None
    try:
        agent = subprocess.Popen(
            [
                *cli,
                "agent",
                node,
                "--file",
                str(log),
                "--spool",
                str(tmp_path / "agent"),
                "--metrics-port",
                "0",
                "--sample-interval",
                "0",
                "--heartbeat-url",
                f"http://127.0.0.1:{port}",
                "--heartbeat-interval",
                "1",
            ],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "agent.log", "wb"),
        )
        deadline = time.monotonic() + 60  # two interpreters starting on a loaded machine; then one beat and one write
        while seen(intake)[node] is None:
            assert agent.poll() is None and server.poll() is None, (tmp_path / "agent.log").read_text()[-500:]
            assert time.monotonic() < deadline, (tmp_path / "agent.log").read_text()[-500:]
            time.sleep(0.2)
    finally:
        for proc in (agent, server):
            if proc is not None:
                proc.send_signal(signal.SIGTERM)
        codes = [p.wait(30) for p in (agent, server) if p is not None]
    assert codes == [0, 0], (tmp_path / "intake.log").read_text()[-500:]
    assert TOKEN not in (tmp_path / "agent.log").read_text() + (tmp_path / "intake.log").read_text()
