"""When a node that checks cannot reach becomes suspect (fleetctl.reachability)."""

from __future__ import annotations

import pytest

from fleetctl.reachability import ReachabilityPolicy, judge_reachability

U = "unreachable"


@pytest.mark.parametrize("kinds, runs, suspect, reason", [
    ([U, U, U], 3, True, "3 check runs in a row could not reach the node"),
    ([U, U, U, U, None], 3, True, "4 check runs in a row"),
    ([U, U], 3, False, "2 of 3 consecutive"),  # not yet: a reboot or a blip
    ([U, U, None, U, U], 3, False, "2 of 3"),  # a run that reached the node ends the streak
    ([U, "timeout", U, U], 3, False, "1 of 3"),  # a check that timed out did reach the node
    ([U, "auth_failed", U], 2, False, "1 of 2"),  # a key problem is ours, not the node's absence
    ([None, U, U, U], 3, False, "0 of 3"),  # reachable again: the newest run decides
    ([], 3, False, "0 of 3"),  # never checked
    ([U], 1, True, "1 check run in a row"),
])
def test_judge_reachability(kinds, runs, suspect, reason) -> None:
    verdict = judge_reachability(kinds, ReachabilityPolicy(unreachable_runs=runs))
    assert verdict.suspect is suspect and reason in verdict.reason
