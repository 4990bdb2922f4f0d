"""A correlated burst of critical events sends no node to RMA without an operator (issue 28
item 4): seven nodes sent XID 48 within 5 s were all granted their drains (critical) and all
went to RMA before the breaker opened. A burst is usually a driver, firmware or checker
fault, and an RMA costs weeks: the nodes are still drained, their RMAs held as
`awaiting_confirmation` until `fleetctl rma confirm` sends one or `fleetctl rma reject` sends
the node back through burn-in."""

from __future__ import annotations

import pytest

from fleetctl.nodes.capacity import GuardPolicy
from fleetctl.remediation.rma import BurstVerdict, burst_verdict

POLICY = GuardPolicy(storm_fraction=0.2, storm_window_s=600, storm_min_failures=3)
T = 1_000_000.0
FLEET = [f"n{i}" for i in range(20)]  # the storm limit of 20 in production: more than 4, at least 3: 5


def _at(*offsets: float, first: int = 0) -> list[tuple[str, float]]:
    """Critical events on n<first>, n<first+1>, ... at T + each offset."""
    return [(f"n{first + i}", T + dt) for i, dt in enumerate(offsets)]


@pytest.mark.parametrize("critical, production, now, held, wait_until", [
    # Alone in its window: opens at once (a lemon's repeat is one node too).
    (_at(0), FLEET, T + 5, False, None),
    (_at(0) + [("n0", T - 300)], FLEET, T + 5, False, None),  # one node again and again is one node
    # Seven nodes within 5 s: past the limit of 5, held.
    (_at(0, 1, 2, 3, 4, 5, 5), FLEET, T + 6, True, None),
    # Exactly the limit is a storm (the guard's >=), one short is not yet: wait for the window.
    (_at(0, 1, 2, 3, 4), FLEET, T + 6, True, None),
    (_at(0, 1, 2, 3), FLEET, T + 6, False, T + 600),
    # After the window has passed, four stay four: opens.
    (_at(0, 1, 2, 3), FLEET, T + 600, False, None),
    # Events after this node's count too (the burst it started), up to the window.
    (_at(0) + _at(300, 400, 500, 600, first=1), FLEET, T + 600, True, None),
    (_at(0) + _at(300, 400, 500, 601, first=1), FLEET, T + 601, False, None),
    # Events before, within the window; one outside it does not count.
    (_at(0) + _at(-600, -10, -20, -30, first=1), FLEET, T + 1, True, None),
    (_at(0) + _at(-601, -10, -20, -30, first=1), FLEET, T + 1, False, T + 600),
    # The limit counts the fleet before the burst: the drained burst nodes are no longer in
    # production, and must not shrink the limit their own count is held against.
    (_at(0, 1, 2, 3), FLEET[4:], T + 6, False, T + 600),
    # A small fleet: at least storm_min_failures (3).
    (_at(0, 1), ["n0", "n1", "n2", "n3"], T + 6, False, T + 600),
    (_at(0, 1, 2), ["n0", "n1", "n2", "n3"], T + 6, True, None),
])
def test_burst_verdict(critical, production, now, held, wait_until) -> None:
    verdict = burst_verdict(POLICY, critical, production, "n0", T, now)
    assert bool(verdict.hold) == held, verdict
    assert verdict.wait_until == wait_until


def test_the_hold_says_why_in_the_operators_words() -> None:
    verdict = burst_verdict(POLICY, _at(0, 1, 2, 3, 4, 5, 5), FLEET, "n0", T, T + 6)
    assert verdict == BurstVerdict(
        hold="correlated burst: 7 nodes with critical events within 10 min (the storm limit is 5); usually a "
             "driver, firmware or checker fault, not 7 broken parts: an operator confirms or rejects")
    short = burst_verdict(GuardPolicy(storm_window_s=30), _at(0, 1, 2), FLEET[:5], "n0", T, T + 6)
    assert "within 30 s" in short.hold
