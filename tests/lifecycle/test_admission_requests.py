"""Admission requests as `fleetctl node admit` sends them, on the real Temporal dev server:
one update per (node, request), so a resent or retried request admits a node once; calls
that time out on a busy (here: absent) worker are retried; many nodes at once, each with
its own outcome."""

from __future__ import annotations

import asyncio
import time
import uuid
from datetime import timedelta

import pytest

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect, phase_outcome, request_phase, request_phases, request_transition
from tests.support.fleet import Cli, inventory_file
from tests.support.worker import WorkerThread

pytestmark = pytest.mark.temporal


def _burn_ins(fleet, name: str) -> int:
    return [e.trigger for e in queries.node_events(fleet.engine, name)].count("begin_burn_in")


async def test_the_same_request_sent_twice_admits_once(sim_fleet) -> None:
    fleet = await sim_fleet(1)
    (name,) = fleet.names
    first = await request_phase(fleet.client, name, "admit", "tester", "quick", request_id="req-1")
    again = await request_phase(fleet.client, name, "admit", "tester", "quick", request_id="req-1")
    assert first[1] and again == first  # the first answer, not a refusal
    await fleet.wait_states([name], {"production"})
    assert _burn_ins(fleet, name) == 1
    # A different request is a new one, and the workflow judges it: a production node is not admitted.
    other = await request_phase(fleet.client, name, "admit", "tester", "quick", request_id="req-2")
    assert not other[1] and "cannot admit a node in production" in other[2]
    assert _burn_ins(fleet, name) == 1


async def test_a_call_that_times_out_is_retried_as_the_same_update(sim_fleet, monkeypatch) -> None:
    """No worker at first: every call times out until one starts. The retries carry the same
    update id, so the node is admitted once (a fresh id per call would be refused as
    'admission already in progress' behind the first, still pending update)."""
    import fleetctl.workflows.client as client_module

    fleet = await sim_fleet(1, worker=False)
    (name,) = fleet.names
    attempts, rpc_timeout = 30, timedelta(seconds=1)
    # The worker starts once a call has timed out (an event, not a guessed sleep: on a loaded
    # machine a 1-second call may take longer than any sleep to time out).
    timed_out = asyncio.Event()
    judge_timeout = client_module._retryable_timeout

    def noted(exc) -> bool:
        retried = judge_timeout(exc)
        if retried:
            timed_out.set()
        return retried

    monkeypatch.setattr(client_module, "_retryable_timeout", noted)
    asked = asyncio.create_task(
        phase_outcome(fleet.client, name, "admit", "tester", "quick", attempts=attempts, rpc_timeout=rpc_timeout)
    )
    await asyncio.wait_for(timed_out.wait(), attempts * rpc_timeout.total_seconds())
    assert not asked.done()
    worker = WorkerThread(fleet.settings).start()
    try:
        outcome = await asyncio.wait_for(asked, 60)
        assert outcome.accepted, outcome.message
        assert outcome.timeouts >= 1  # the call that timed out was sent again, as the same update
        await fleet.wait_states([name], {"production"})
        assert _burn_ins(fleet, name) == 1
    finally:
        worker.stop()


@pytest.mark.parametrize("concurrency", [6, 4])
async def test_nodes_nobody_answers_for_each_fail_with_the_reason_and_are_asked_at_once(
    sim_fleet, monkeypatch, concurrency
) -> None:
    """Counted, not timed: the real calls are wrapped to count how many are in flight at once,
    so the test holds on a loaded machine where the calls' durations stretch."""
    import fleetctl.workflows.client as client_module

    fleet = await sim_fleet(6, worker=False)
    attempts, rpc_timeout = 2, timedelta(seconds=1)
    in_flight, peak = 0, 0
    real_phase_outcome = client_module.phase_outcome

    async def counted(*args, **kwargs):
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            return await real_phase_outcome(*args, **kwargs)
        finally:
            in_flight -= 1

    monkeypatch.setattr(client_module, "phase_outcome", counted)
    outcomes = await request_phases(
        fleet.client,
        fleet.names,
        "admit",
        "tester",
        "quick",
        concurrency=concurrency,
        attempts=attempts,
        rpc_timeout=rpc_timeout,
    )
    assert [o.node for o in outcomes] == fleet.names
    assert all(
        not o.accepted and o.timeouts == attempts and "did not take the request after 2 tries" in o.message
        for o in outcomes
    ), outcomes
    assert peak == concurrency  # every node asked at once, up to the bound and never past it
    for name in fleet.names:
        await fleet.client.get_workflow_handle(node_workflow_id(name)).terminate("test finished")


def test_admit_many_reports_each_nodes_outcome(make_settings, sqlite_url, tmp_path) -> None:
    """Sync: the CLI runs its own event loop."""
    settings = make_settings(sqlite_url)
    worker = WorkerThread(settings).start()
    try:
        cli = Cli(settings)
        names = [f"adm-{uuid.uuid4().hex[:6]}-{i}" for i in range(8)]
        assert cli("node", "import", str(inventory_file(tmp_path, names))).exit_code == 0
        busy = names[-1]  # in production already: not admittable

        async def promote() -> None:
            client = await connect(settings)
            for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
                await request_transition(client, busy, trigger, "test", actor_kind="automation")

        asyncio.run(promote())

        result = cli("node", "admit", *names, names[0], "--suite", "quick")

        assert result.exit_code == 1, result.output
        for name in names[:-1]:
            assert f"{name}: admit with suite quick started" in result.stdout
        assert busy not in result.stdout
        errors = result.stderr.strip().splitlines()
        assert errors == [
            f"error: {busy}: cannot admit a node in production (allowed from: new, maintenance, rma)",
            "error: admit: 1 of 8 nodes not started",
        ], result.stderr
        engine = get_engine(settings.db_url)
        deadline = time.monotonic() + 120
        while {queries.get_node(engine, n).state for n in names} != {"production"}:
            assert time.monotonic() < deadline, "nodes not admitted"
            time.sleep(0.2)
        for name in names[:-1]:  # named twice on the command line, admitted once
            events = queries.node_events(engine, name)
            assert [e.trigger for e in events].count("begin_burn_in") == 1
    finally:
        worker.stop()
