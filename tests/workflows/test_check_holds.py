"""The node's hold, NodeLifecycle's side, each decision alone on fakes: an
admission holds the node in its scheduler before its first check and waits for the jobs that
landed before the hold; a recheck of a production node holds it, reads it idle, and is skipped
(never failed) when a job is there; the hold is lifted once the recheck is over. The same
holds on the real Slurm cluster and the simulated scheduler: tests/lifecycle/test_check_holds.py."""

from __future__ import annotations

import pytest

from fleetctl.schedulers.base import BURN_IN_HOLD, recheck_hold_reason
from fleetctl.workflows.api import PhaseRequest
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.workflows.fakes import World

pytestmark = pytest.mark.temporal


def called(node) -> list[str]:
    """The fakes' calls by name, in order, those about holds and checks only."""
    return [name for name, _ in node.fakes.calls if name in ("hold_in_scheduler", "run_check", "release_hold")]


async def recheck(node, suite: str = "quick") -> None:
    await node.handle.execute_update(NodeLifecycle.recheck, PhaseRequest(actor="tester", suite=suite))


async def test_admission_holds_the_node_before_its_first_check(lifecycle) -> None:
    node = await lifecycle(state="new")
    await node.admit()
    s = await node.settled()
    assert s.state == "production"
    assert called(node)[:2] == ["hold_in_scheduler", "run_check"]
    assert [h.reason for h in node.fakes.asked("hold_in_scheduler")] == [BURN_IN_HOLD]
    # Entering production lifts it; an admission is never released by a check's release.
    assert node.fakes.asked("resume_in_scheduler") == [node.node] and node.fakes.asked("release_hold") == []


async def test_admission_does_not_start_while_a_job_that_landed_before_the_hold_runs(lifecycle) -> None:
    # Two polls of the drain's wait, then the admission gives up: no transition, no check.
    node = await lifecycle(state="new", world=World(held_jobs=["job-7"]), drain_job_wait_s=0.2, drain_job_poll_s=0.1)
    await node.admit()
    s = await node.settled()
    assert s.state == "new" and node.fakes.transitions == [] and node.fakes.asked("run_check") == []
    assert len(node.fakes.asked("hold_in_scheduler")) == 3  # taken, then asked again after each poll
    assert s.last_outcome.startswith("admit: not started: job job-7 still running on the held node")


async def test_a_recheck_holds_the_production_node_then_releases_it(lifecycle) -> None:
    node = await lifecycle()
    await recheck(node)
    s = await node.settled()
    assert s.state == "production" and s.last_outcome == "recheck quick: passed"
    assert called(node) == ["hold_in_scheduler", "run_check", "run_check", "release_hold"]
    assert [h.reason for h in node.fakes.asked("release_hold")] == [recheck_hold_reason("quick")]


async def test_a_recheck_that_finds_a_job_on_the_held_node_is_skipped_not_failed(lifecycle) -> None:
    node = await lifecycle(world=World(held_jobs=["job-9"]))
    await recheck(node)
    s = await node.settled()
    assert s.state == "production" and node.fakes.transitions == []
    assert called(node) == ["hold_in_scheduler", "release_hold"]  # no check ran; back in service
    assert s.last_outcome == "recheck quick: skipped: job job-9 running on the node"
    assert [(a.kind, a.reason) for a in node.fakes.automation] == [
        ("check_skipped", "recheck quick: skipped: job job-9 running on the node")
    ]
    assert node.fakes.asked("ask_capacity_guard") == []  # skipped is no failure: nothing to drain


async def test_a_failed_recheck_drains_through_the_guard_and_the_drain_keeps_the_node(lifecycle) -> None:
    node = await lifecycle(world=World(check_status={"nvidia-smi-query": "fail"}))
    await recheck(node)
    s = await node.settled()
    assert s.state == "maintenance" and node.fakes.triggers() == ["drain", "drain_complete"]
    # The release comes after the drain, on a node no longer in production: release_hold
    # (tests/lifecycle) lifts nothing then.
    assert called(node) == ["hold_in_scheduler", "run_check", "release_hold"]


async def test_a_recheck_of_a_node_out_of_production_takes_no_hold(lifecycle) -> None:
    node = await lifecycle(state="maintenance")
    await recheck(node)
    await node.settled()
    assert called(node) == ["run_check", "run_check"]
