"""One storm figure: the breaker, the RMA hold and the checker storm decide by the same
limit (fleetctl.nodes.capacity.storm_limit) and every message names that limit and what it
is a fraction of, never a fraction of its own ("exceed 20 % of 47" beside "the storm limit
is 11", when 20 % of 47 is 9.4)."""

from __future__ import annotations

import pytest

from fleetctl.nodes.capacity import (
    GuardPolicy,
    RemovalRequest,
    checker_storm,
    decide,
    snapshot_from_states,
    storm_limit,
)
from fleetctl.remediation.rma import burst_verdict

POLICY = GuardPolicy(storm_fraction=0.2, storm_min_failures=3, storm_window_s=600.0)


@pytest.mark.parametrize(
    ("of", "limit"),
    [
        (47, 10),  # 20 % of 47 is 9.4: the tenth node is more than that
        (50, 11),  # 20 % of 50 is 10: exactly 20 % is not more
        (20, 5),
        (10, 3),  # 20 % of 10 is 2, but a storm needs at least 3
        (0, 3),
    ],
)
def test_storm_limit(of: int, limit: int) -> None:
    storm = storm_limit(POLICY, of)
    assert storm.limit == limit
    assert not storm.reached(limit - 1) and storm.reached(limit)
    assert storm.words() == f"the storm limit is {limit} (more than 20% of {of} production nodes, at least 3)"


def test_the_breaker_the_rma_hold_and_the_checker_storm_name_the_same_limit() -> None:
    """47 nodes in production before the burst; 10 fail within the window."""
    words = storm_limit(POLICY, 47).words()
    failing = {f"n{i}": 100.0 for i in range(9)}
    snapshot = snapshot_from_states([("r1", "production")] * 47)
    breaker = decide(POLICY, snapshot, RemovalRequest("n9", "r1", "xid 48", "t"), failing, 100.0, False)
    assert not breaker.granted and breaker.breaker_opened
    assert breaker.reason.startswith(f"storm: 10 nodes failing in 10 min; {words}; breaker opened")

    production = [f"p{i}" for i in range(37)]
    critical = [(f"n{i}", 100.0) for i in range(10)]
    hold = burst_verdict(POLICY, critical, production, "n0", 100.0, 101.0).hold
    assert "the storm limit is 10 (more than 20% of 47 production nodes before the burst, at least 3)" in hold

    assert checker_storm(POLICY, 9, 47) is None
    assert "the storm limit is 10 (more than 20% of 47 nodes checked, at least 3)" in checker_storm(POLICY, 10, 47)
