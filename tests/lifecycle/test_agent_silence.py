"""Agent silence end to end: real agents' heartbeat senders posting to a real intake over
HTTP, which writes them to the database; real sweeps (ActiveCheckSweep) judging the
silence, the real capacity guard and the real node workflows on the Temporal dev server.
A node whose agent has been silent longer than `agent_silence_s` is suspect and drained
through the guard; many at once open the breaker (an intake or network outage, not many
bad nodes) and stay in production, shown as suspect until they are heard again; a node
that never had an agent is never judged."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
import uuid

import pytest
from typer.testing import CliRunner

from fleetctl.agent.heartbeat import HeartbeatSender
from fleetctl.cli.main import app
from fleetctl.config import guard_policy
from fleetctl.db import queries
from fleetctl.durations import as_utc
from fleetctl.intake.heartbeats import Heartbeats
from fleetctl.intake.server import Intake, serve_http
from fleetctl.nodes import reachability
from fleetctl.nodes.fleet_status_store import fleet_status
from fleetctl.workflows.api import SweepInput, SweepResult
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from tests.support.sim_fleet import SimFleet, fleet_in_production
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal

SILENCE_S = 5.0  # the fleet's agent_silence_s
BEAT_S = SILENCE_S / 10  # the agents' heartbeat interval: a silence is ten missed beats
WRITE_S = 0.1  # the intake's write interval
TOKEN = "agent-silence-test-token-0123456789"


class Agents:
    """The nodes' agents, as far as liveness goes: each beating node's real sender posts to
    the real intake every BEAT_S until it is silenced."""

    def __init__(self, url: str, names: list[str]):
        self.sender, self.beating = HeartbeatSender(url, TOKEN), set(names)
        self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            for name in sorted(self.beating):
                await asyncio.to_thread(self.sender.send, name)
            await asyncio.sleep(BEAT_S)

    async def stop(self) -> None:
        self._task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await self._task


@pytest.fixture
async def silence_fleet(make_settings, sqlite_url, tmp_path):
    """factory(count, with_agents) -> (SimFleet in production, Agents of `with_agents` of its
    nodes, all heard at least once before it returns)."""
    workers, servers, agents, stop = [], [], [], threading.Event()

    async def factory(count: int, with_agents: int) -> tuple[SimFleet, Agents]:
        settings = dataclasses.replace(make_settings(sqlite_url), agent_silence_s=SILENCE_S)
        workers.append(WorkerThread(settings).start())
        fleet = await fleet_in_production(settings, count)
        names = fleet.names
        beats = Heartbeats(lambda heard: queries.record_agent_heartbeats(fleet.engine, heard))
        server = serve_http(Intake(tmp_path / f"spool-{len(servers)}", None), TOKEN, "127.0.0.1", 0, beats)
        servers.append(server)
        threading.Thread(target=beats.flush_until, args=(stop, WRITE_S), daemon=True).start()
        agents.append(Agents(f"http://127.0.0.1:{server.server_port}", names[:with_agents]))
        await wait_heard(fleet, names[:with_agents])
        return fleet, agents[-1]

    yield factory
    for a in agents:
        await a.stop()
    stop.set()
    for s in servers:
        s.shutdown()
    for w in workers:
        w.stop()


def seen_at(fleet: SimFleet, name: str):
    node = queries.get_node(fleet.engine, name)
    return as_utc(node.agent_seen_at).timestamp() if node.agent_seen_at else None


async def wait_heard(fleet: SimFleet, names, after: float = 0.0) -> None:
    """Until each node's agent is recorded as heard after `after`: within a silence, or the
    node would be silent by definition."""
    deadline = time.monotonic() + SILENCE_S
    while not all((seen_at(fleet, n) or 0.0) > after for n in names):
        assert time.monotonic() < deadline, f"not heard within {SILENCE_S} s: {names}"
        await asyncio.sleep(WRITE_S)


async def silence(fleet: SimFleet, agents: Agents, names) -> None:
    """Silence the agents of `names` and wait until the configured silence has passed since
    each was last heard: the bound is the threshold itself."""
    agents.beating -= set(names)
    await asyncio.sleep(BEAT_S + 2 * WRITE_S)  # a beat in flight when silenced is written
    last = max(seen_at(fleet, n) for n in names)
    await asyncio.sleep(max(0.0, last + SILENCE_S - time.time()) + WRITE_S)


async def sweep(fleet: SimFleet) -> SweepResult:
    return await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=4, fleet=fleet.settings.fleet),
        id=f"sweep-{uuid.uuid4().hex[:8]}",
        task_queue=fleet.settings.task_queue,
    )


def suspects(fleet: SimFleet) -> dict[str, dict]:
    settings = fleet.settings
    status = fleet_status(fleet.engine, {}, guard_policy(settings, settings.fleet), settings.fleet)
    return {s["node"]: s for s in status["suspect"]}


async def test_a_silent_agent_drains_its_node_through_the_guard_and_a_node_without_one_is_never_judged(
    silence_fleet,
) -> None:
    fleet, agents = await silence_fleet(10, with_agents=9)
    quiet, agentless = fleet.names[3], fleet.names[9]
    await silence(fleet, agents, [quiet])
    result = await sweep(fleet)
    assert result.silent == [quiet] and result.drained == [quiet] and result.held == []
    drain = await fleet.wait_event(quiet, "drain")
    assert drain.cause.startswith("suspect: agent silent since ") and f"(over {SILENCE_S:g} s)" in drain.cause
    granted = [
        e for e in queries.automation_events(fleet.engine, limit=50) if e.node_name == quiet and e.kind == "grant"
    ]
    assert granted, "the drain went through the capacity guard"
    # The node without an agent was silent all along, and is never judged.
    assert fleet.state(agentless) == "production" and agentless not in suspects(fleet)
    assert queries.get_node(fleet.engine, agentless).agent_seen_at is None
    assert all(fleet.state(n) == "production" for n in fleet.names if n != quiet)


async def test_many_silent_at_once_open_the_breaker_stay_in_production_and_a_heartbeat_clears_one(
    silence_fleet,
) -> None:
    fleet, agents = await silence_fleet(10, with_agents=10)
    quiet = sorted(fleet.names[:4])  # 40 % of the fleet: the intake or the network, not four nodes
    await silence(fleet, agents, quiet)
    result = await sweep(fleet)
    assert sorted(result.silent) == quiet and result.drained == [] and sorted(result.held) == quiet
    assert {fleet.state(n) for n in quiet} == {"production"}
    shown = suspects(fleet)
    assert set(shown) == set(quiet) and {s["why"] for s in shown.values()} == {"agent silent"}
    (opened,) = [e for e in queries.automation_events(fleet.engine, limit=50) if e.kind == "breaker_open"]
    assert opened.reason.startswith("agent silence storm: 4 of 10 nodes have an agent fallen silent")

    # One agent is back: that node is no longer suspect, nor judged by the next sweep.
    back = quiet[0]
    judged_at = as_utc(shown[back]["since"]).timestamp()
    agents.beating.add(back)
    await wait_heard(fleet, [back], after=judged_at)
    assert set(suspects(fleet)) == set(quiet[1:])
    listed = CliRunner().invoke(app, ["--db-url", fleet.settings.db_url, "node", "list", "-o", "json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["name"]: r for r in json.loads(listed.stdout)}
    assert {n for n, r in rows.items() if r["suspect"]} == set(quiet[1:])
    assert all(
        rows[n]["suspect"].startswith("agent silent since") and rows[n]["health"].startswith("Suspect")
        for n in quiet[1:]
    )
    assert all(r["agent_seen_at"] for r in rows.values())
    shown_one = await asyncio.to_thread(  # `node show` asks Temporal with its own event loop
        CliRunner().invoke,
        app,
        [
            "--db-url",
            fleet.settings.db_url,
            "--temporal-address",
            fleet.settings.temporal_address,
            "node",
            "show",
            quiet[1],
        ],
    )
    assert shown_one.exit_code == 0 and "agent: last heard" in shown_one.stdout, shown_one.output
    again = await sweep(fleet)
    assert sorted(again.silent) == quiet[1:] and again.drained == []
    assert {fleet.state(n) for n in quiet} == {"production"}


async def test_a_sweep_asks_about_a_bounded_number_of_silent_nodes_and_the_guard_still_sees_them_all(
    silence_fleet, monkeypatch
) -> None:
    monkeypatch.setattr(reachability, "SILENT_ASKED_PER_SWEEP", 2)  # 100 in a fleet: its history stays small
    fleet, agents = await silence_fleet(10, with_agents=10)
    quiet = sorted(fleet.names[:4])
    await silence(fleet, agents, quiet)
    result = await sweep(fleet)
    assert len(result.silent) == 2 and set(result.silent) <= set(quiet)
    assert result.drained == [] and sorted(result.held) == sorted(result.silent)
    (opened,) = [e for e in queries.automation_events(fleet.engine, limit=50) if e.kind == "breaker_open"]
    assert opened.reason.startswith("agent silence storm: 4 of 10 nodes")  # the count, not the two named
    assert {fleet.state(n) for n in quiet} == {"production"}
