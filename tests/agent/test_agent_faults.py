"""The agent never loses a critical record, each fault fed to the real
`fleetctl agent` process with a real Temporal server and worker: an unreadable kernel line,
a spool the disk will not take, a full spool, kmsg sequence numbers past 64 bits or going
backwards, and corrupted spool and cursor files. In each, the XID 79 the kernel logged
reaches the node's workflow and drains the node (its database row and recorded events are
what is checked), and the agent is still running, with the fault counted on its /metrics."""

from __future__ import annotations

import inspect
import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from fleetctl.agent.runner import APPEND_RETRY_S, CURSOR_EVERY_S, MAX_BACKOFF_S
from fleetctl.agent.transport import SEND_TIMEOUT_S
from fleetctl.connections.temporal_server import free_port
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.client import connect
from tests.support.fleet import wait_for
from tests.support.sim_fleet import make_fleet
from tests.support.worker import WorkerThread, start_in_production

pytestmark = [pytest.mark.temporal, pytest.mark.slow]

CONNECT_S = inspect.signature(connect).parameters["timeout_s"].default
# One delivery: a connect and a send that both time out, the longest back-off, then a
# connect and a send that work.
DELIVERY_S = 2 * (CONNECT_S + SEND_TIMEOUT_S) + MAX_BACKOFF_S
# The agent process up (its /metrics answering): Python's start and the imports, no timeout
# of ours bounds it; the CLI tests give a process run the same.
START_S = 60
# SIGTERM to exit: the loop ends after the delivery in flight (a connect and a send).
STOP_S = CONNECT_S + SEND_TIMEOUT_S + CURSOR_EVERY_S
BOOT_ID = Path("/proc/sys/kernel/random/boot_id").read_text().strip()  # what the agent reads
XID = "NVRM: Xid (PCI:0000:2b:00): {}, pid=1, name=x, seq {}"


def kmsg(seq: int, message: str, usec: int | None = None) -> str:
    return f"3,{seq},{seq * 1_000_000 if usec is None else usec},-;{message}\n"


def xid(seq: int, code: int) -> str:
    return kmsg(seq, XID.format(code, seq))


class AgentProcess:
    """`fleetctl agent` on a kmsg file, its output copied to a file by a thread (a pipe, so
    that a file-size limit set on the agent never touches its own log)."""

    def __init__(self, tmp_path: Path, temporal_address: str, node: str, *args: str, fsize: int | None = None):
        self.port, self.spool, self.log = free_port(), tmp_path / "spool", tmp_path / "agent.log"
        preexec = (lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))) if fsize else None
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "fleetctl.cli.main",
                "--temporal-address",
                temporal_address,
                "agent",
                node,
                "--kmsg",
                str(tmp_path / "kmsg"),
                "--spool",
                str(self.spool),
                "--metrics-port",
                str(self.port),
                "--sample-interval",
                "0",
                # This machine's own /sys and /proc are no node under test (tests/agent/test_node_watch.py
                # gives the watch trees of its own).
                "--no-watch",
                *args,
            ],
            # Under a file-size limit CPython writes a module's bytecode cut at the limit (it
            # ignores SIGXFSZ and does not check the short write), and every later process that
            # imports the module fails on it: this agent writes none.
            env={**os.environ, "FLEETCTL_CONFIG": os.devnull} | ({"PYTHONDONTWRITEBYTECODE": "1"} if fsize else {}),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=preexec,
        )
        self._copy = threading.Thread(target=self._copy_output, daemon=True)
        self._copy.start()

    def _copy_output(self) -> None:
        with open(self.log, "ab") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def alive(self) -> None:
        if self.proc.poll() is not None:
            raise AssertionError(f"the agent exited with status {self.proc.returncode}:\n{self.output()[-3000:]}")

    def metrics(self) -> dict[tuple, float]:
        """{(sample name, (label, value), ...): value}; {} while /metrics does not answer."""
        self.alive()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                text = r.read().decode()
        except OSError:
            return {}
        return {
            (s.name, *sorted(s.labels.items())): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    def metric(self, name: str, **labels: str) -> float:
        return self.metrics().get((name, *sorted(labels.items())), 0.0)

    async def started(self) -> None:
        await wait_for(lambda: bool(self.metrics()), START_S, "the agent's /metrics")

    async def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        await wait_for(lambda: self.proc.poll() is not None, STOP_S, "the agent to exit on SIGTERM")
        self._copy.join(10)
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture
def fleet(make_settings, sqlite_url, request):
    """(settings, engine, node): one node in production, its workflow on a worker thread."""
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1)
    worker = WorkerThread(settings).start()
    request.addfinalizer(worker.stop)
    return settings, get_engine(settings.db_url), node


@pytest.fixture
def agents(request):
    started: list[AgentProcess] = []
    request.addfinalizer(lambda: [a.kill() for a in started])
    return started


def codes(engine, node) -> list[int | None]:
    return sorted((e.code for e in queries.health_events(engine, node, limit=1000)), key=lambda c: (c is None, c))


async def recorded(engine, node, count: int) -> list[int | None]:
    """The codes of the node's recorded events once `count` are recorded (the workflow
    records a signal's events in an activity, after the send returned)."""
    await wait_for(lambda: len(codes(engine, node)) >= count, DELIVERY_S, f"{count} events recorded")
    return codes(engine, node)


def drained(engine, node, agent: AgentProcess):
    def check() -> bool:
        agent.alive()
        return queries.get_node(engine, node).state != "production"

    return check


async def test_an_unreadable_xid_line_is_counted_and_skipped_and_the_xid_79_after_it_drains(
    fleet, agents, tmp_path
) -> None:
    settings, engine, node = fleet
    await start_in_production(await connect(settings), settings, node)
    # The Xid parser refuses the second record (checks.xid raises UnjudgeableOutput): before,
    # the agent died on it with its cursor saved past the 79, which was never spooled.
    (tmp_path / "kmsg").write_text(
        xid(1, 13) + kmsg(2, "NVRM: Xid (PCI:0000:2b:00) garbled beyond reading") + xid(3, 79)
    )
    agent = AgentProcess(tmp_path, settings.temporal_address, node)
    agents.append(agent)
    await agent.started()
    await wait_for(drained(engine, node, agent), DELIVERY_S, "the XID 79 after the unreadable line to drain the node")
    await wait_for(lambda: agent.metric("fleetctl_agent_events_sent_total") == 2, DELIVERY_S, "both events sent")
    assert agent.metric("fleetctl_agent_unreadable_records_total", why="parser") == 1
    assert await recorded(engine, node, 2) == [13, 79]
    assert "unreadable record kmsg:" in agent.output() and "garbled beyond reading" in agent.output()
    assert await agent.stop() == 0
    assert json.loads((agent.spool / "cursor.json").read_text()) == {"boot": BOOT_ID, "seq": 3}


async def test_a_spool_the_disk_will_not_take_holds_the_events_and_the_cursor_stays_before_them(
    fleet, agents, tmp_path
) -> None:
    """RLIMIT_FSIZE on the agent: its cursor and state files fit, an event's spool line does
    not (EFBIG, as a full disk gives ENOSPC). Before, the agent died on the failed append,
    saving its cursor past the records it never spooled."""
    settings, engine, node = fleet
    await start_in_production(await connect(settings), settings, node)
    (tmp_path / "kmsg").write_text(xid(1, 13) + xid(2, 79))
    agent = AgentProcess(tmp_path, settings.temporal_address, node, fsize=200)
    agents.append(agent)
    await agent.started()
    await wait_for(
        lambda: agent.metric("fleetctl_agent_spool_write_failures_total") >= 1, START_S, "the spool append to fail"
    )
    # Held, not spooled, the critical event is still sent ahead: the node drains.
    await wait_for(drained(engine, node, agent), DELIVERY_S, "the held XID 79 to drain the node")
    await wait_for(
        lambda: agent.metric("fleetctl_agent_spool_write_failures_total") >= 2,
        2 * APPEND_RETRY_S + START_S,
        "the append to be tried again",
    )
    assert agent.metric("fleetctl_agent_spool_depth") == 0 and "cannot write the spool" in agent.output()
    assert await agent.stop() == 0
    cursor = agent.spool / "cursor.json"
    assert not cursor.exists() or json.loads(cursor.read_text())["seq"] < 1, cursor.read_text()

    again = AgentProcess(tmp_path, settings.temporal_address, node)  # the disk takes writes again
    agents.append(again)
    await again.started()
    await wait_for(
        lambda: again.metric("fleetctl_agent_events_sent_total") == 2,
        DELIVERY_S,
        "the re-read records' events spooled and sent in order",
    )
    assert await recorded(engine, node, 2) == [13, 79]  # the 79 sent twice, counted once
    assert await again.stop() == 0
    assert json.loads(cursor.read_text()) == {"boot": BOOT_ID, "seq": 2}


async def test_a_full_spool_drops_minor_events_before_the_xid_79(fleet, agents, tmp_path) -> None:
    settings, engine, node = fleet
    await start_in_production(await connect(settings), settings, node)
    # Temporal is away (nothing listens there) while the XID 79 and five minor Xid 13 lines
    # come into a spool that holds three events.
    (tmp_path / "kmsg").write_text(xid(1, 79) + "".join(xid(seq, 13) for seq in range(2, 7)))
    away = AgentProcess(tmp_path, f"127.0.0.1:{free_port()}", node, "--max-spool", "3")
    agents.append(away)
    await away.started()
    await wait_for(
        lambda: away.metric("fleetctl_agent_spool_dropped") == 3 and away.metric("fleetctl_agent_spool_depth") == 3,
        START_S,
        "three events dropped, three kept",
    )
    by_severity = {s: away.metric("fleetctl_agent_spool_dropped_by_severity", severity=s) for s in ("info", "critical")}
    assert await away.stop() == 0

    back = AgentProcess(tmp_path, settings.temporal_address, node, "--max-spool", "3")  # Temporal reachable again
    agents.append(back)
    await back.started()
    await wait_for(
        lambda: back.metric("fleetctl_agent_events_sent_total") == 3, DELIVERY_S, "the spool's three events sent"
    )
    # The newest minor ones and the 79, never the oldest three; the two Xid 13 of one send go
    # as one event with their count (the agent folds a batch's repeated minor events).
    assert await recorded(engine, node, 2) == [13, 79]
    assert by_severity == {"info": 3, "critical": 0}
    await wait_for(drained(engine, node, back), DELIVERY_S, "the XID 79 to drain the node")


@pytest.mark.parametrize(
    "seq, skipped, resets",
    [
        (10**20 - 1, 1, 0),  # 20 digits, past 64 bits: an unreadable record, the cursor stays at 1
        (2**63 - 1, 0, 1),  # in range but absurd: the 3 after it goes backwards, and resets the cursor to it
    ],
)
async def test_a_sequence_number_past_64_bits_or_going_backwards_hides_nothing_after_it(
    fleet, agents, tmp_path, seq, skipped, resets
) -> None:
    settings, engine, node = fleet
    await start_in_production(await connect(settings), settings, node)
    (tmp_path / "kmsg").write_text(xid(1, 13) + kmsg(seq, XID.format(31, seq), usec=2_000_000) + xid(3, 79))
    agent = AgentProcess(tmp_path, settings.temporal_address, node)
    agents.append(agent)
    await agent.started()
    await wait_for(drained(engine, node, agent), DELIVERY_S, "the XID 79 after the absurd sequence number to drain")
    await wait_for(lambda: agent.metric("fleetctl_agent_spool_depth") == 0, DELIVERY_S, "the spool to empty")
    assert await recorded(engine, node, 3 - skipped) == ([13, 79] if skipped else [13, 31, 79])
    assert agent.metric("fleetctl_agent_unreadable_records_total", why="source") == skipped
    assert agent.metric("fleetctl_agent_cursor_resets_total") == resets
    assert await agent.stop() == 0
    assert json.loads((agent.spool / "cursor.json").read_text()) == {"boot": BOOT_ID, "seq": 3}


async def test_a_saved_cursor_beyond_the_log_is_dropped_and_the_log_read_from_its_start(
    fleet, agents, tmp_path
) -> None:
    """An older agent saved the sequence number of an absurd record: every record of this
    boot is below it, and the record it names is not in the log."""
    settings, engine, node = fleet
    await start_in_production(await connect(settings), settings, node)
    (tmp_path / "spool").mkdir()
    (tmp_path / "spool" / "cursor.json").write_text(json.dumps({"boot": BOOT_ID, "seq": 10**18}))
    (tmp_path / "kmsg").write_text(xid(1, 13) + xid(2, 79))
    agent = AgentProcess(tmp_path, settings.temporal_address, node)
    agents.append(agent)
    await agent.started()
    await wait_for(drained(engine, node, agent), DELIVERY_S, "the XID 79 below the saved cursor to drain")
    assert agent.metric("fleetctl_agent_cursor_resets_total") == 1 and "cursor reset" in agent.output()


def _spooled_79(node: str) -> str:
    return (
        json.dumps(
            {
                "node": node,
                "source": "agent",
                "code": 79,
                "message": "Xid 79 on 0000:2b:00: GPU has fallen off the bus.",
                "actor": "fleetctl-agent",
                "event_id": "7" * 32,
                "at": time.time() - 60,
                "severity": "critical",
                "at_from_record": True,
            }
        )
        + "\n"
    )


@pytest.mark.parametrize(
    "name, content, kind",
    [
        ("cursor.json", b'{"boot": "' + BOOT_ID.encode() + b'", "se', "cursor"),  # truncated JSON
        ("cursor.json", b"\x00\xff\xfe\x81 not json at all", "cursor"),  # binary garbage
        ("cursor.json", json.dumps({"boot": BOOT_ID, "seq": "twelve"}).encode(), "cursor"),  # wrong type
        ("state.json", b'{"segment": 0, "line"', "spool"),
        ("state.json", json.dumps({"segment": "zero", "line": [], "dropped": 0}).encode(), "spool"),
        # a garbled line after a spooled XID 79 an earlier agent never delivered: the 79 is kept
        ("segment-00000000.jsonl", "{node}" + '{"node": 7, "garbage\n' + "\x00\xfe\n", "spool"),
    ],
)
async def test_a_corrupt_spool_or_cursor_file_is_moved_aside_counted_and_the_agent_runs_on(
    fleet, agents, tmp_path, name, content, kind
) -> None:
    settings, engine, node = fleet
    await start_in_production(await connect(settings), settings, node)
    spool = tmp_path / "spool"
    spool.mkdir()
    if isinstance(content, str):
        content = content.replace("{node}", _spooled_79(node)).encode()
    (spool / name).write_bytes(content)
    (tmp_path / "kmsg").write_text(xid(1, 13) + ("" if name.startswith("segment") else xid(2, 79)))
    agent = AgentProcess(tmp_path, settings.temporal_address, node)
    agents.append(agent)
    await agent.started()
    await wait_for(drained(engine, node, agent), DELIVERY_S, "the XID 79 to drain the node")
    await wait_for(lambda: agent.metric("fleetctl_agent_spool_depth") == 0, DELIVERY_S, "the spool to empty")
    assert await recorded(engine, node, 2) == [13, 79]
    assert agent.metric("fleetctl_agent_corrupt_files_total", file=kind) == 1
    (aside,) = spool.glob(f"{name}.corrupt-*")
    assert aside.read_bytes() == content
    logged = [line for line in agent.output().splitlines() if "is corrupt" in line]
    assert len(logged) == 1 and aside.name in logged[0], agent.output()
    assert await agent.stop() == 0
