"""A storm that is the checker's own fault: after a tool upgrade every node's output is
unreadable. Errors never drain a node, but errors on most of the fleet at once are one
shared cause, so the sweep reports them to the capacity guard, which opens the breaker and
says why in `fleet status` and in the report."""

from __future__ import annotations

import asyncio
import json

import pytest

from fleetctl.db import queries
from fleetctl.executors.base import CommandResult
from fleetctl.nodes.capacity import GuardPolicy, checker_storm
from fleetctl.workflows.activities.executors import ExecutorRegistry
from fleetctl.workflows.api import SweepInput
from fleetctl.workflows.client import guard_status, request_transition
from fleetctl.workflows.definitions.active_checks import ActiveCheckSweep
from tests.support.fleet import Cli

# What nvidia-smi prints when an upgrade dropped the query flags the check relies on.
UPGRADED_TOOL_OUTPUT = "nvidia-smi: unrecognized option '--query-gpu'\nSee nvidia-smi -h for usage.\n"


class UpgradedToolsExecutor:
    """The edge only: every command on every node answers like a tool whose interface changed.
    The worker, workflows, parsers, guard and database are the real ones."""

    def run(self, target, argv, timeout_s: float) -> CommandResult:
        return CommandResult(tuple(argv), 0, UPGRADED_TOOL_OUTPUT, "", 0.01)

    def close(self) -> None:
        pass


@pytest.mark.parametrize(
    ("errored", "checked", "storm"),
    [
        (20, 20, True),
        (5, 20, True),  # more than 20% of the nodes checked
        (4, 20, False),  # exactly 20%: not more
        (2, 2, False),  # a storm needs at least storm_min_failures nodes
        (0, 0, False),
    ],
)
def test_checker_storm_threshold(errored: int, checked: int, storm: bool) -> None:
    reason = checker_storm(GuardPolicy(storm_fraction=0.2, storm_min_failures=3), errored, checked)
    assert (reason is not None) == storm
    if storm:
        assert reason.startswith(f"checker storm: {errored} of {checked} nodes returned unjudgeable output")


@pytest.mark.temporal
async def test_sweep_of_unjudgeable_output_opens_the_breaker_and_drains_nobody(sim_fleet, monkeypatch) -> None:
    monkeypatch.setattr(ExecutorRegistry, "_make_sim", lambda self: UpgradedToolsExecutor())
    fleet = await sim_fleet(20)
    for name in fleet.names:
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(fleet.client, name, trigger, "setup", actor_kind="automation")

    result = await fleet.client.execute_workflow(
        ActiveCheckSweep.run,
        SweepInput(suite="quick", max_concurrent=20, fleet=fleet.settings.fleet),
        id=f"storm-{fleet.names[0]}",
        task_queue=fleet.settings.task_queue,
    )

    assert sorted(result.errors) == sorted(fleet.names) and not result.failed and not result.drained
    reason = "checker storm: 20 of 20 nodes returned unjudgeable output"
    guard = await guard_status(fleet.client, fleet.settings)
    assert guard.breaker_open and guard.breaker_reason.startswith(reason), guard.breaker_reason
    for name in fleet.names:  # nobody drained, nothing recorded against the nodes
        assert fleet.state(name) == "production"
        assert [e.trigger for e in queries.node_events(fleet.engine, name)] == [
            "begin_burn_in",
            "begin_admission",
            "enter_production",
        ]
        assert [r.error_kind for r in queries.latest_checks(fleet.engine, name)] == ["unjudgeable"]
    (opened,) = [e for e in queries.automation_events(fleet.engine, limit=50) if e.kind == "breaker_open"]
    assert opened.reason.startswith(reason) and opened.node_name is None

    cli = Cli(fleet.settings)
    status = await asyncio.to_thread(cli, "fleet", "status", "-o", "json")
    assert status.exit_code == 0, status.output
    data = json.loads(status.stdout)
    assert data["automation"]["breaker"] == "open" and data["automation"]["breaker_reason"].startswith(reason)
    assert data["recent_automation_events"][0]["kind"] == "breaker_open"
    report = await asyncio.to_thread(cli, "report", "--since", "1h", "-o", "json")
    assert report.exit_code == 0, report.output
    assert [(e["kind"], e["reason"].startswith(reason)) for e in json.loads(report.stdout)["breaker"]] == [
        ("breaker_open", True)
    ]
    assert "checker storm" in (await asyncio.to_thread(cli, "report", "--since", "1h")).stdout
