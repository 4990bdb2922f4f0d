"""The agent's health as Prometheus sees it: `promtool check metrics` on its exposition and
on `fleetctl metrics serve`'s, and a real Prometheus scraping the agent."""

from __future__ import annotations

import asyncio
import subprocess
import urllib.request

import pytest
from prometheus_client import start_http_server

from fleetctl.agent.follow import FileSource
from fleetctl.agent.runner import Agent, AgentConfig
from fleetctl.agent.transport import SendFailed
from fleetctl.db.engine import get_engine
from fleetctl.reliability import exporter_server
from tests.reliability import history
from tests.reliability.test_exporter import NOW
from tests.support.prometheus import PROMTOOL, needs_prometheus, running_prometheus, wait_for_result  # noqa: F401

XID = "May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): {}, pid=1, name=x, seen\n"


class TemporalDown:
    async def send(self, node, events):
        raise SendFailed("Temporal unreachable")


@pytest.fixture
def agent(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("booting\n" + XID.format(13) + XID.format(79))
    a = Agent(AgentConfig(node="n1", spool_dir=tmp_path / "spool", max_spool=1), FileSource(log), TemporalDown())
    a.read_once()
    asyncio.run(a.deliver())
    server, _ = start_http_server(0, "127.0.0.1", registry=a.metrics.registry)
    a.port = server.server_port
    yield a
    server.shutdown()


def exposition(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


@pytest.mark.usefixtures("needs_prometheus")
def test_promtool_accepts_the_agents_metrics_and_they_say_what_happened(agent) -> None:
    text = exposition(agent.port)
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0 and not check.stdout.strip() and not check.stderr.strip(), check.stdout + check.stderr
    values = {
        line.split()[0]: float(line.split()[1]) for line in text.splitlines() if line and not line.startswith("#")
    }
    assert values["fleetctl_agent_lines_read_total"] == 3
    assert values["fleetctl_agent_events_detected_total"] == 2
    assert values["fleetctl_agent_spool_depth"] == 1 and values["fleetctl_agent_spool_dropped"] == 1
    assert values["fleetctl_agent_send_failures_total"] == 1 and values["fleetctl_agent_events_sent_total"] == 0
    assert values["fleetctl_agent_last_line_timestamp_seconds"] > 0


@pytest.mark.usefixtures("needs_prometheus")
def test_promtool_accepts_fleetctl_metrics_serve(sqlite_url) -> None:
    engine = get_engine(sqlite_url)
    history.seed(engine, NOW)
    server = exporter_server.serve(engine, 0, "127.0.0.1")
    try:
        text = exposition(server.server_port)
    finally:
        server.shutdown()
    check = subprocess.run([PROMTOOL, "check", "metrics"], input=text, capture_output=True, text=True, timeout=30)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.usefixtures("needs_prometheus")
def test_a_real_prometheus_scrapes_the_agent(agent, tmp_path) -> None:
    with running_prometheus(tmp_path, [f"127.0.0.1:{agent.port}"], job="fleetctl-agent") as prometheus:
        result = wait_for_result(prometheus, "fleetctl_agent_spool_depth", bool, timeout_s=60)
    assert result and result[0]["metric"]["job"] == "fleetctl-agent" and float(result[0]["value"][1]) == 1
