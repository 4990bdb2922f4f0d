"""NodeLifecycle on the real Temporal dev server with a real database."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from temporalio.client import Client

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import CommandRejected, ensure_node_workflows, request_transition
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from fleetctl.workflows.worker import build_worker
from tests.support.fleet import wait_for
from tests.workflows.conftest import DECISION_S

pytestmark = pytest.mark.temporal


def _fleet(engine, count: int = 1) -> list[str]:
    names = [f"wf-{uuid.uuid4().hex[:8]}" for _ in range(count)]
    text = "nodes:\n" + "".join(f"  - {{name: {n}, address: sim://{n}, profile: h100-sxm}}\n" for n in names)
    queries.upsert_nodes(engine, parse_inventory(text))
    return names


async def _with_worker(settings, body):
    client = await Client.connect(settings.temporal_address)
    with ThreadPoolExecutor(8) as pool:
        async with build_worker(client, settings, pool):
            return await body(client)


async def test_transitions_are_recorded_and_illegal_ones_change_nothing(make_settings, db_url) -> None:
    settings = make_settings(db_url)
    engine = get_engine(db_url)
    (name,) = _fleet(engine)

    async def body(client):
        await ensure_node_workflows(client, settings, [(name, "new", 0)])
        await ensure_node_workflows(client, settings, [(name, "new", 0)])  # idempotent
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(client, name, trigger, "auto", actor_kind="automation")
        with pytest.raises(CommandRejected, match="cannot undrain a node in production"):
            await request_transition(client, name, "undrain", "tester")
        before = [e.id for e in queries.node_events(engine, name)]
        with pytest.raises(CommandRejected, match="for operators only"):
            await request_transition(client, name, "retire", "robot", actor_kind="automation")
        assert [e.id for e in queries.node_events(engine, name)] == before
        result = await request_transition(client, name, "drain", "tester", cause="cable")
        assert (result.from_state, result.to_state, result.state_version) == ("production", "draining", 4)
        status = await client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
        assert status.state == "draining"

    await _with_worker(settings, body)
    node = queries.get_node(engine, name)
    assert (node.state, node.state_version) == ("draining", 4)
    events = queries.node_events(engine, name)
    assert [(e.from_state, e.to_state) for e in events] == [
        ("new", "burn_in"),
        ("burn_in", "admission"),
        ("admission", "production"),
        ("production", "draining"),
    ]
    assert events[-1].actor == "tester" and events[-1].cause == "cable"
    assert events[0].actor_kind == "automation"


async def test_concurrent_drains_make_exactly_one_transition(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    (name,) = _fleet(engine)

    async def body(client):
        await ensure_node_workflows(client, settings, [(name, "new", 0)])
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(client, name, trigger, "auto", actor_kind="automation")
        return await asyncio.gather(
            *(request_transition(client, name, "drain", f"operator-{i}", cause=f"op {i}") for i in range(5)),
            return_exceptions=True,
        )

    outcomes = await _with_worker(settings, body)
    succeeded = [o for o in outcomes if not isinstance(o, BaseException)]
    rejected = [o for o in outcomes if isinstance(o, CommandRejected)]
    assert len(succeeded) == 1 and len(rejected) == 4
    drains = [e for e in queries.node_events(engine, name) if e.trigger == "drain"]
    assert len(drains) == 1 and drains[0].actor == succeeded[0].actor


async def test_repeated_request_id_is_answered_not_reapplied(make_settings, sqlite_url) -> None:
    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    (name,) = _fleet(engine)

    async def body(client):
        await ensure_node_workflows(client, settings, [(name, "new", 0)])
        first = await request_transition(
            client, name, "begin_burn_in", "auto", actor_kind="automation", request_id="r-1"
        )
        again = await request_transition(
            client, name, "begin_burn_in", "auto", actor_kind="automation", request_id="r-1"
        )
        return first, again

    first, again = await _with_worker(settings, body)
    assert (first.repeated, again.repeated, again.state_version) == (False, True, first.state_version)
    assert len(queries.node_events(engine, name)) == 1


async def test_continue_as_new_keeps_state(make_settings, sqlite_url) -> None:
    from temporalio.common import WorkflowIDConflictPolicy

    from fleetctl.workflows.api import NodeLifecycleState

    settings = make_settings(sqlite_url)
    engine = get_engine(sqlite_url)
    (name,) = _fleet(engine)

    async def body(client):
        handle = await client.start_workflow(
            NodeLifecycle.run,
            NodeLifecycleState(node=name, transitions_per_run=2),
            id=node_workflow_id(name),
            task_queue=settings.task_queue,
            id_conflict_policy=WorkflowIDConflictPolicy.USE_EXISTING,
        )
        first_run = handle.first_execution_run_id
        for trigger in ("begin_burn_in", "begin_admission", "enter_production", "drain"):
            await request_transition(client, name, trigger, "tester")
        # The drain completes on its own (no job to wait for): the undrain waits for it, or it
        # would race the drain's completion and move the node four times or five.
        node = client.get_workflow_handle(node_workflow_id(name))

        async def drained() -> bool:
            return (await node.query(NodeLifecycle.current)).state == "maintenance"

        await wait_for(drained, DECISION_S, f"{name}'s drain to complete")
        await request_transition(client, name, "undrain", "tester")
        status = await node.query(NodeLifecycle.current)
        desc = await node.describe()
        return first_run, desc.run_id, status

    first_run, run_now, status = await _with_worker(settings, body)
    assert run_now != first_run
    assert (status.state, status.state_version) == ("production", 6)
    assert queries.get_node(engine, name).state_version == 6
