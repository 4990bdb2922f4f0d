"""fleetctl's own services fail under it: the Temporal server is SIGKILLed and restarted on
its SQLite file, PostgreSQL is stopped and started, another process holds SQLite's write
lock. Work in flight continues after, nothing is written twice, and the CLI says what is
down in one line."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import pytest

from fleetctl.connections.temporal_server import free_port, start_dev_server
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.client import connect, ensure_node_workflows, request_phase, request_transition
from tests.lifecycle.test_worker_kill import start_worker
from tests.support.checks import recorded_checks
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread

BURN_IN_PATH = [("new", "burn_in"), ("burn_in", "admission"), ("admission", "production")]


def fleetctl_process(settings, *args: str) -> subprocess.CompletedProcess:
    """The CLI in a process of its own, as an operator runs it (no engine shared with the worker)."""
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "--db-url",
            settings.db_url,
            "--temporal-address",
            settings.temporal_address,
            *args,
        ],
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line(stderr: str, *words: str) -> None:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), stderr


@pytest.mark.temporal
@pytest.mark.slow
async def test_temporal_server_killed_and_restarted_mid_burn_in(make_settings, sqlite_url, tmp_path) -> None:
    db_file, port = tmp_path / "temporal.db", free_port()
    server = start_dev_server(db_file, port)
    settings = make_settings(sqlite_url)
    settings.temporal_address = server.address
    names = make_fleet(settings, 3)
    engine = get_engine(settings.db_url)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
    log = open(tmp_path / "worker.log", "wb")
    worker = start_worker(settings, log)
    try:
        for n in names:
            assert (await request_phase(client, n, "admit", "tester", "burn-in"))[1]
        await wait_for(lambda: all(queries.latest_checks(engine, n) for n in names), 60, "burn-in checks")
        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(10)

        down = await asyncio.to_thread(fleetctl_process, settings, "node", "drain", names[0], "--reason", "x")
        assert down.returncode == 1
        assert_one_line(down.stderr, "cannot reach Temporal", settings.temporal_address)
        await asyncio.sleep(2.0)  # the worker's polls and activity completions fail meanwhile

        server = start_dev_server(db_file, port)
        await wait_for(
            lambda: all(queries.get_node(engine, n).state in ("production", "maintenance") for n in names),
            150,
            "burn-in to finish after the restart",
        )
    finally:
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        log.close()
        server.stop()
    for n in names:
        events = queries.node_events(engine, n)
        assert [(e.from_state, e.to_state) for e in events] == BURN_IN_PATH, n
        assert [e.state_version for e in events] == [1, 2, 3]
        runs = queries.latest_checks(engine, n, limit=50)
        assert len(runs) == len(recorded_checks("burn-in", "h100-sxm")), n  # each of burn-in's steps recorded once


@pytest.mark.temporal
@pytest.mark.postgres
@pytest.mark.slow
async def test_postgres_stopped_and_started_under_a_drain(make_settings, postgres_server, request) -> None:
    from bench.postgres import fresh_database_url

    settings = make_settings(fresh_database_url(postgres_server))
    (name,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    client = await connect(settings)
    await ensure_node_workflows(client, settings, [(name, "new", 0)])
    for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
        await request_transition(client, name, trigger, "setup", actor_kind="automation")

    postgres_server.stop()
    try:
        drain = asyncio.create_task(request_transition(client, name, "drain", "alice@console", "operator: optics"))
        cli = await asyncio.to_thread(fleetctl_process, settings, "node", "list")
        assert cli.returncode == 1
        assert_one_line(cli.stderr, "database", "unavailable")
        assert "fleetctl:fleetctl@" not in cli.stderr  # the password is not printed
        await asyncio.sleep(3.0)  # record_transition retries against the stopped server
        assert not drain.done()
    finally:
        postgres_server.start()
    result = await asyncio.wait_for(drain, 60)
    assert (result.from_state, result.to_state) == ("production", "draining")
    await wait_for(lambda: queries.get_node(engine, name).state == "maintenance", 60, "the drain to complete")
    events = queries.node_events(engine, name)
    assert [e.trigger for e in events] == [
        "begin_burn_in",
        "begin_admission",
        "enter_production",
        "drain",
        "drain_complete",
    ]
    assert [e.state_version for e in events] == [1, 2, 3, 4, 5]


@pytest.mark.temporal
async def test_sqlite_locked_by_another_writer_then_released(make_settings, sqlite_url, tmp_path) -> None:
    settings = make_settings(sqlite_url)
    (name,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    try:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(name, "new", 0)])
        locked, release = threading.Event(), threading.Event()

        def hold_the_write_lock() -> None:
            conn = sqlite3.connect(sqlite_url.split("///", 1)[1], isolation_level=None)
            conn.execute("BEGIN EXCLUSIVE")
            locked.set()
            release.wait(30)
            conn.execute("COMMIT")
            conn.close()

        holder = threading.Thread(target=hold_the_write_lock)
        holder.start()
        locked.wait(10)
        started = time.monotonic()
        move = asyncio.create_task(request_transition(client, name, "begin_burn_in", "setup", actor_kind="automation"))
        listing = await asyncio.to_thread(fleetctl_process, settings, "node", "list", "-o", "json")
        assert listing.returncode == 0 and name in listing.stdout  # readers are not blocked (WAL)
        await asyncio.sleep(2.0)
        assert not move.done() and queries.get_node(engine, name).state == "new"
        release.set()
        holder.join(10)
        result = await asyncio.wait_for(move, 30)
        assert result.to_state == "burn_in" and time.monotonic() - started >= 2.0
        assert [e.state_version for e in queries.node_events(engine, name)] == [1]
    finally:
        worker.stop()
