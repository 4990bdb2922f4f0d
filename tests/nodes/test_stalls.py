"""When a node's workflow is stalled (pure): at the edge of the bound on queued work, and
Temporal's reported problems before it. tests/lifecycle/test_stalled.py shows the verdict
end to end with a short bound; these rows hold the bound itself."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.nodes.stalls import judge_stall

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
BOUND_S = 600.0


@pytest.mark.parametrize(
    ("waited_s", "stalled"),
    [
        (0.0, False),
        (BOUND_S - 1, False),
        (BOUND_S - 0.001, False),
        (BOUND_S, True),  # the bound is reached: stalled
        (BOUND_S + 0.001, True),
        (BOUND_S + 1, True),
        (BOUND_S * 2, True),
        (BOUND_S * 4, True),
        (BOUND_S * 100, True),
    ],
)
def test_queued_work_is_stalled_from_the_bound_on(waited_s: float, stalled: bool) -> None:
    queued_since = NOW - timedelta(seconds=waited_s)
    stall = judge_stall("n1", [], queued_since, NOW, BOUND_S)
    assert (stall is not None) == stalled, stall
    if stall is not None:
        assert (stall.node, stall.since) == ("n1", queued_since)
        assert stall.reason == f"work queued {int(waited_s)} s ago is still waiting (bound 600 s)"


@pytest.mark.parametrize("bound_s", [1.0, 2.0, 30.0, 3600.0])
def test_the_verdict_turns_at_the_configured_bound_whatever_it_is(bound_s: float) -> None:
    def stalled(waited_s: float) -> bool:
        return judge_stall("n1", [], NOW - timedelta(seconds=waited_s), NOW, bound_s) is not None

    assert [stalled(bound_s * 0.99), stalled(bound_s), stalled(bound_s * 1.01), stalled(bound_s * 4)] == [
        False,
        True,
        True,
        True,
    ]


def test_nothing_queued_is_never_stalled() -> None:
    assert judge_stall("n1", [], None, NOW, BOUND_S) is None


@pytest.mark.parametrize(
    ("problems", "reason"),
    [
        (
            ["category=WorkflowTaskFailed", "cause=WorkflowTaskFailedCauseWorkflowWorkerUnhandledFailure"],
            "workflow tasks failing: workflow worker unhandled failure",
        ),
        (["category=WorkflowTaskTimedOut"], "workflow tasks timing out"),
        (["cause=WorkflowTaskFailedCauseBadScheduleActivityAttributes"], "workflow tasks failing: bad schedule"),
    ],
)
def test_failing_workflow_tasks_are_stalled_at_once_whatever_is_queued(problems: list[str], reason: str) -> None:
    for queued_since in (None, NOW):  # nothing queued, or queued just now: far inside the bound
        stall = judge_stall("n1", problems, queued_since, NOW, BOUND_S)
        assert stall is not None and stall.reason.startswith(reason), stall
        assert stall.since == NOW and f"(Temporal: {', '.join(sorted(problems))})" in stall.reason
