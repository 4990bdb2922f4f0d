"""When a node that checks cannot reach, or whose agent fell silent, becomes suspect
(fleetctl.nodes.reachability)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.nodes.reachability import ReachabilityPolicy, judge_agent_silence, judge_fleet_silence, judge_reachability

U = "unreachable"


@pytest.mark.parametrize(
    "kinds, runs, suspect, reason",
    [
        ([U, U, U], 3, True, "3 check runs in a row could not reach the node"),
        ([U, U, U, U, None], 3, True, "4 check runs in a row"),
        ([U, U], 3, False, "2 of 3 consecutive"),  # not yet: a reboot or a blip
        ([U, U, None, U, U], 3, False, "2 of 3"),  # a run that reached the node ends the streak
        ([U, "timeout", U, U], 3, False, "1 of 3"),  # a check that timed out did reach the node
        ([U, "auth_failed", U], 2, False, "1 of 2"),  # a key problem is ours, not the node's absence
        ([None, U, U, U], 3, False, "0 of 3"),  # reachable again: the newest run decides
        ([], 3, False, "0 of 3"),  # never checked
        ([U], 1, True, "1 check run in a row"),
    ],
)
def test_judge_reachability(kinds, runs, suspect, reason) -> None:
    verdict = judge_reachability(kinds, ReachabilityPolicy(unreachable_runs=runs))
    assert verdict.suspect is suspect and reason in verdict.reason


NOW = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
LONG_AGO = NOW - timedelta(days=1)


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


@pytest.mark.parametrize(
    "seen, in_state_since, silence_s, suspect, reason",
    [
        (ago(301), LONG_AGO, 300, True, "agent silent since 2026-12-01 09:54:59 UTC (over 300 s)"),
        (ago(300), LONG_AGO, 300, False, "agent heard 300 s ago"),  # at the threshold: not yet
        (ago(10), LONG_AGO, 300, False, "agent heard 10 s ago"),
        (None, LONG_AGO, 300, False, "no agent judged"),  # never heard: the node has no agent
        (ago(86400), LONG_AGO, 0, False, "not judged"),  # 0 disables
        # Back in production 100 s ago, agent last heard before it left: the silence counts
        # from its return, so a repaired node gets the whole threshold.
        (ago(3600), ago(100), 300, False, "agent heard 3600 s ago"),
        (ago(3600), ago(301), 300, True, "agent silent since 2026-12-01 09:00:00 UTC"),
        (ago(-5), LONG_AGO, 300, False, "agent heard 0 s ago"),  # another intake's clock a little ahead
    ],
)
def test_judge_agent_silence(seen, in_state_since, silence_s, suspect, reason) -> None:
    verdict = judge_agent_silence(seen, in_state_since, NOW, silence_s)
    assert verdict.suspect is suspect and reason in verdict.reason


def test_judge_fleet_silence_names_the_longest_silent_first_up_to_the_limit_and_counts_them_all() -> None:
    nodes = [
        ("gpu-1", ago(400), LONG_AGO),
        ("gpu-2", None, LONG_AGO),  # no agent: neither judged nor counted
        ("gpu-3", ago(900), LONG_AGO),
        ("gpu-4", ago(10), LONG_AGO),  # heard: judged, not silent
        ("gpu-5", ago(600), LONG_AGO),
        ("gpu-6", ago(900), ago(30)),  # back in production 30 s ago: not yet
    ]
    judged = judge_fleet_silence(nodes, NOW, 300, limit=2)
    assert (judged.with_agent, judged.silent_total) == (5, 3)
    assert [name for name, _, _ in judged.silent] == ["gpu-3", "gpu-5"]
    assert all(v.suspect and v.reason.startswith("agent silent since") for _, _, v in judged.silent)
    assert judge_fleet_silence(nodes, NOW, 0).silent_total == 0  # 0 disables
