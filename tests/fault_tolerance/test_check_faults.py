"""Checks that cannot tell anything about the node: garbage output, a tool that hangs, a node
that stops answering SSH mid-check, a host key that changed. Each is run through the real
worker against a real sshd, and each must end as one `error` result after the retries:
never `pass`, and never a hardware failure (no drain, no health event, state unchanged)."""

from __future__ import annotations

import asyncio
import os
from contextlib import contextmanager
from pathlib import Path

import pytest

from fleetctl.db import queries
from fleetctl.workflows.activities import checks as check_activities
from fleetctl.workflows.api import CheckRequest
from tests.executors.sshd import write_ed25519_key
from tests.support.fleet import wait_for

pytestmark = [pytest.mark.temporal, pytest.mark.sshd]

TOOL = "nvidia-smi"


@contextmanager
def tool_script(fleet, body: str):
    """Replace the fake tool on the node with a shell script for the duration."""
    path: Path = fleet.node.bin_dir / TOOL
    original = path.read_text()
    path.write_text("#!/bin/sh\n" + body)
    try:
        yield
    finally:
        path.write_text(original)


def assert_unjudged_not_failed(fleet, name: str, error_kind: str) -> str:
    """One `error` row; the node is where it was and nothing treated it as broken."""
    runs = queries.latest_checks(fleet.engine, name)
    assert [(r.status, r.error_kind) for r in runs] == [("error", error_kind)], [(r.status, r.reason) for r in runs]
    assert queries.get_node(fleet.engine, name).state == "production"
    assert [e.to_state for e in queries.node_events(fleet.engine, name)][-1] == "production"
    assert queries.health_events(fleet.engine, name) == []
    assert [e for e in queries.automation_events(fleet.engine, limit=100) if e.node_name == name] == []
    return runs[0].reason


async def test_garbage_output_is_retried_then_an_error(ssh_fleet) -> None:
    fleet = await ssh_fleet(1)
    (name,) = fleet.names
    await fleet.to_production(name)
    fleet.node.set_tool_output(TOOL, "Segmentation fault\n\x00\x1b[2J?? ## index, name\n1, 2, three\n")
    await fleet.recheck(name)
    assert len(fleet.node.tool_calls(TOOL)) == CheckRequest.max_attempts  # retried, then recorded
    assert_unjudged_not_failed(fleet, name, "unjudgeable")


async def test_hanging_check_is_killed_retried_then_an_error(ssh_fleet, monkeypatch) -> None:
    # The executor's timeout is at least 30 s a try; three tries would be most of this
    # suite's time budget, so the test shortens it. The hang, the kill and the retries are real.
    real_run = check_activities._run_with_heartbeat
    monkeypatch.setattr(
        check_activities,
        "_run_with_heartbeat",
        lambda executor, target, argv, timeout_s: real_run(executor, target, argv, min(timeout_s, 2.0)),
    )
    fleet = await ssh_fleet(1)
    (name,) = fleet.names
    await fleet.to_production(name)
    marker = f"{fleet.node.root}/hung"
    # A duration of this test's own: another copy of the suite on the machine hangs its own sleep.
    hang = f"3601.{os.getpid()}"
    with tool_script(fleet, f"echo started >> {marker}\nexec sleep {hang}\n"):
        await fleet.recheck(name)
    assert Path(marker).read_text().count("started") == CheckRequest.max_attempts
    assert "timeout" in assert_unjudged_not_failed(fleet, name, "timeout")
    assert not [p for p in Path("/proc").glob("[0-9]*/cmdline") if _reads(p) == f"sleep\x00{hang}\x00".encode()], (
        "the hung tool outlived its check"
    )


def _reads(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:
        return b""


async def test_node_that_stops_answering_mid_check_is_an_error(ssh_fleet) -> None:
    fleet = await ssh_fleet(1)
    (name,) = fleet.names
    await fleet.to_production(name)
    started = fleet.node.root / "started"
    with tool_script(fleet, f"touch {started}\nexec sleep 30\n"):
        from fleetctl.workflows.client import request_phase

        _, accepted, message = await request_phase(fleet.client, name, "recheck", "tester", "one-check")
        assert accepted, message
        await wait_for(started.exists, 30, "the check to start on the node")
        fleet.node.stop()  # the node goes away: sshd and every session it serves
        try:
            await wait_for(lambda: bool(queries.latest_checks(fleet.engine, name)), 60, "the check's result")
            await asyncio.sleep(0.5)
        finally:
            fleet.node.start()
    assert_unjudged_not_failed(fleet, name, "unreachable")


async def test_changed_host_key_refuses_the_node_and_says_so(ssh_fleet, ssh_node, tmp_path) -> None:
    known_hosts = tmp_path / "known_hosts"
    known_hosts.write_text(f"[{ssh_node.host}]:{ssh_node.port} {write_ed25519_key(tmp_path / 'impostor')}\n")
    before = known_hosts.read_text()
    fleet = await ssh_fleet(1, known_hosts=str(known_hosts))
    (name,) = fleet.names
    await fleet.to_production(name)
    await fleet.recheck(name)
    reason = assert_unjudged_not_failed(fleet, name, "host_key")
    assert "CHANGED" in reason and "known_hosts" in reason
    assert fleet.node.tool_calls(TOOL) == []  # nothing ran on a node that may not be ours
    assert known_hosts.read_text() == before  # and its key was not learnt


async def test_checker_storm_of_garbage_drains_nothing(ssh_fleet) -> None:
    """A tool upgrade makes every node's output unreadable: that is the checker's fault, so
    the sweep reports errors and production capacity is untouched."""
    from fleetctl.workflows.api import SweepInput
    from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep

    fleet = await ssh_fleet(6)
    for name in fleet.names:
        await fleet.to_production(name)
    fleet.node.set_tool_output(TOOL, "nvidia-smi: unrecognized option '--query-gpu'\nSee nvidia-smi -h\n", 0)
    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="one-check", max_concurrent=6, fleet=fleet.settings.fleet),
        id=f"storm-{fleet.names[0]}",
        task_queue=fleet.settings.task_queue,
    )
    assert sorted(result.errors) == sorted(fleet.names) and not result.failed and not result.drained
    assert {queries.get_node(fleet.engine, n).state for n in fleet.names} == {"production"}
    for name in fleet.names:
        assert_unjudged_not_failed(fleet, name, "unjudgeable")
