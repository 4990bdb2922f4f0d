"""The decisions moved below the CLI: which nodes a job restart leaves, and the fleet counts."""

from __future__ import annotations

from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from fleetctl.fleet_status import count_states
from fleetctl.job_nodes import not_in_job, nodes_to_leave

JOB = ["a", "b", "c", "d"]


@pytest.mark.parametrize("states, leave", [
    ({"a": "production", "b": "production", "c": "production", "d": "production"}, []),
    ({"a": "production", "b": "draining", "c": "maintenance", "d": "production"}, ["b", "c"]),
    ({"a": "rma", "b": "production"}, ["a"]),  # c and d: not fleetctl's nodes, nothing says they are bad
    ({}, []),
])
def test_nodes_to_leave(states: dict, leave: list) -> None:
    assert nodes_to_leave(JOB, states) == leave


def test_not_in_job() -> None:
    assert not_in_job(JOB, ["b", "x", "a", "y"]) == ["x", "y"]


def test_count_states() -> None:
    since = datetime(2026, 11, 30, tzinfo=timezone.utc)
    nodes = [SimpleNamespace(name=name, state=state, rack=rack, state_since=since)
             for name, state, rack in [("n1", "production", "r1"), ("n2", "burn_in", "r1"), ("n3", "production", ""),
                                       ("n4", "draining", "r2")]]
    counts = count_states(nodes)
    assert counts["nodes"] == 4
    assert counts["per_state"]["production"] == 2 and counts["per_state"]["rma"] == 0
    assert counts["per_rack"] == {"r1": {"production": 1, "burn_in": 1}, "-": {"production": 1}, "r2": {"draining": 1}}
    assert [f["node"] for f in counts["in_flight"]] == ["n2", "n4"]
