"""The agent against a real Temporal server and worker: the events recorded in the node's
database rows are what the kernel wrote, once each, across an agent restart (SIGKILL, and
a lost read position) and a Temporal outage (server SIGKILLed, restarted on its file)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from fleetctl.agent.follow import KmsgSource
from fleetctl.agent.runner import Agent, AgentConfig
from fleetctl.agent.transport import TemporalTransport
from fleetctl.connections.temporal_server import free_port, start_dev_server
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.client import connect
from tests.lifecycle.test_worker_kill import start_worker
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = [pytest.mark.temporal, pytest.mark.slow]
BOOT = time.time() - 120  # booted two minutes ago (a sender time far off the server's is not trusted)
WAIT_S = 60  # bound on one delivery under the shared machine's load (sends retry at most 30 s apart)


def kmsg_line(seq: int, code: int, usec: int | None = None) -> str:
    return f"3,{seq},{usec if usec is not None else seq * 1_000_000},-;NVRM: Xid (PCI:0000:2b:00): {code}, pid=1, name=x, seq {seq}\n"


def write(path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


# Minor (info) Xids in the catalog, none of them 13 or 31.
SPOOLED_CODES = (11, 25, 32, 37)


def recorded(engine, node) -> list[tuple[int, str]]:
    return sorted((e.code, e.message) for e in queries.health_events(engine, node, limit=1000))


async def run_agent(agent: Agent):
    stop = asyncio.Event()
    return stop, asyncio.create_task(agent.run_until(stop))


async def test_kernel_faults_recorded_once_with_their_log_time_across_a_lost_read_position(
    make_settings, sqlite_url, tmp_path, request
) -> None:
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    await start_in_production(await connect(settings), settings, node)
    kmsg, spool = tmp_path / "kmsg", tmp_path / "spool"
    write(kmsg, "6,1,500,-;Linux version 6.1\n" + kmsg_line(2, 13) + " SUBSYSTEM=pci\n" + kmsg_line(3, 31))

    def agent() -> Agent:
        saved = Agent.saved_cursor(spool)
        return Agent(
            AgentConfig(node=node, spool_dir=spool, boot_id="boot-1"),
            KmsgSource(kmsg, "boot-1", BOOT, saved.position),
            TemporalTransport(settings),
        )

    first = agent()
    stop, task = await run_agent(first)
    await wait_for(lambda: len(recorded(engine, node)) == 2, WAIT_S, "two events recorded")
    stop.set()
    await task
    assert first.metrics.sent._value.get() == 2 and first.metrics.lines._value.get() == 3
    stamps = sorted(e.at.timestamp() for e in queries.health_events(engine, node))
    assert stamps == pytest.approx([BOOT + 2, BOOT + 3], abs=0.001)  # the log's time, not the send time

    (spool / "cursor.json").unlink()  # the position was lost: everything is read and sent again
    second = agent()
    write(kmsg, kmsg_line(4, 13))
    stop, task = await run_agent(second)
    await wait_for(lambda: len(recorded(engine, node)) == 3, WAIT_S, "the third event")
    await wait_for(lambda: second.spool.depth == 0, WAIT_S, "the spool to empty")
    stop.set()
    await task
    assert second.metrics.sent._value.get() == 3  # the two old ones were resent ...
    assert [c for c, _ in recorded(engine, node)] == [13, 13, 31]  # ... and counted once

    third = agent()
    write(kmsg, kmsg_line(5, 79))
    stop, task = await run_agent(third)
    await wait_for(lambda: queries.get_node(engine, node).state != "production", WAIT_S, "Xid 79 to drain the node")
    stop.set()
    await task
    assert third.metrics.sent._value.get() == 1  # the read position was kept this time


def agent_process(settings, node, kmsg, spool, log) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fleetctl.cli.main",
            "--temporal-address",
            settings.temporal_address,
            "agent",
            node,
            "--kmsg",
            str(kmsg),
            "--spool",
            str(spool),
            "--metrics-port",
            "0",
            "--sample-interval",
            "0",
        ],
        env={**os.environ, "FLEETCTL_CONFIG": os.devnull},
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )


async def test_temporal_outage_and_agent_kill_lose_nothing_and_count_nothing_twice(
    make_settings, sqlite_url, tmp_path
) -> None:
    db_file, port = tmp_path / "temporal.db", free_port()
    server = start_dev_server(db_file, port)
    settings = make_settings(sqlite_url)
    settings.temporal_address = server.address
    (node,) = make_fleet(settings, 1)
    engine = get_engine(settings.db_url)
    kmsg, spool = tmp_path / "kmsg", tmp_path / "spool"
    kmsg.touch()
    log = open(tmp_path / "processes.log", "wb")
    worker = start_worker(settings, log)
    agent = agent_process(settings, node, kmsg, spool, log)
    try:
        await start_in_production(await connect(settings), settings, node)
        write(kmsg, kmsg_line(1, 13))
        await wait_for(lambda: len(recorded(engine, node)) == 1, WAIT_S, "the first event")

        os.killpg(server.process.pid, signal.SIGKILL)
        server.process.wait(10)
        # Four different minor Xids: the agent sends repeats of one as one event with their count.
        write(kmsg, "".join(kmsg_line(seq, code) for seq, code in zip(range(2, 6), SPOOLED_CODES, strict=True)))
        await wait_for(
            lambda: (
                any(p.name.startswith("segment-") and p.stat().st_size > 0 for p in spool.iterdir())
                and len(recorded(engine, node)) == 1
            ),
            WAIT_S,
            "the agent to spool",
        )
        await asyncio.sleep(1.0)  # it tries (and fails) to deliver meanwhile
        os.killpg(agent.pid, signal.SIGKILL)  # the agent dies with the events only on disk
        agent.wait(10)
        agent = agent_process(settings, node, kmsg, spool, log)
        write(kmsg, kmsg_line(6, 31))

        server = start_dev_server(db_file, port)
        await wait_for(lambda: len(recorded(engine, node)) == 6, 150, "every spooled event after the restart")
        await asyncio.sleep(2.0)  # anything sent twice would be recorded by now
    finally:
        for proc in (agent, worker):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        log.close()
        server.stop()
    assert [c for c, _ in recorded(engine, node)] == sorted([13, *SPOOLED_CODES, 31])
    assert len({m for _, m in recorded(engine, node)}) == 6
