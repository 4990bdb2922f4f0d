"""The decisions moved below the CLI: which nodes a job restart leaves, and the fleet counts."""

from __future__ import annotations

from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

from fleetctl.jobs.placement import nodes_to_leave, not_in_job
from fleetctl.nodes.fleet_status import count_states, rack_view

JOB = ["a", "b", "c", "d"]


@pytest.mark.parametrize(
    "states, leave",
    [
        ({"a": "production", "b": "production", "c": "production", "d": "production"}, []),
        ({"a": "production", "b": "draining", "c": "maintenance", "d": "production"}, ["b", "c"]),
        ({"a": "rma", "b": "production"}, ["a"]),  # c and d: not fleetctl's nodes, nothing says they are bad
        ({}, []),
    ],
)
def test_nodes_to_leave(states: dict, leave: list) -> None:
    assert nodes_to_leave(JOB, states) == leave


def test_not_in_job() -> None:
    assert not_in_job(JOB, ["b", "x", "a", "y"]) == ["x", "y"]


def test_count_states() -> None:
    since = datetime(2026, 11, 30, tzinfo=UTC)
    nodes = [
        SimpleNamespace(name=name, state=state, rack=rack, state_since=since)
        for name, state, rack in [
            ("n1", "production", "r1"),
            ("n2", "burn_in", "r1"),
            ("n3", "production", ""),
            ("n4", "draining", "r2"),
        ]
    ]
    counts = count_states(nodes)
    assert counts["nodes"] == 4
    assert counts["per_state"]["production"] == 2 and counts["per_state"]["rma"] == 0
    assert counts["per_rack"] == {"r1": {"production": 1, "burn_in": 1}, "-": {"production": 1}, "r2": {"draining": 1}}
    assert [f["node"] for f in counts["in_flight"]] == ["n2", "n4"]


def _node(name, state, rack, island="", position=None):
    return SimpleNamespace(
        name=name,
        state=state,
        rack=rack,
        island=island,
        position=position,
        state_since=datetime(2026, 11, 30, tzinfo=UTC),
    )


RACKED = [
    _node("g1", "production", "r1", "ib-a", 2),
    _node("g2", "draining", "r1", "ib-a", 30),
    _node("g3", "production", "r1", "ib-a"),
    _node("g4", "rma", "r2", "ib-b", 5),
    _node("g5", "production", "r2", "ib-a", 1),
    _node("g6", "new", "", ""),
]


def test_rack_view_groups_racks_by_island_top_of_rack_first() -> None:
    view = rack_view(RACKED)
    assert [(i["island"], [(r["rack"], [n["name"] for n in r["nodes"]]) for r in i["racks"]]) for i in view] == [
        ("ib-a", [("r1", ["g2", "g1", "g3"]), ("r2", ["g5"])]),  # U30 above U2; no position last
        ("ib-b", [("r2", ["g4"])]),  # r2 spans two islands: shown under each
        ("", [("", ["g6"])]),  # placed nowhere: last
    ]
    assert view[0]["racks"][0]["nodes"][0] == {"name": "g2", "state": "draining", "position": 30}


def test_fleet_status_wide_draws_each_rack_a_letter_per_node() -> None:
    from rich.console import Console

    from fleetctl.cli.fleet import render_racks

    console = Console(width=200, record=True, color_system=None)
    console.print(render_racks(rack_view(RACKED)))
    lines = console.export_text().splitlines()
    assert lines[1:] == [
        "island ib-a",
        "  r1  DPP  3 nodes",
        "  r2  P  1 node",
        "island ib-b",
        "  r2  R  1 node",
        "island (none)",
        "  -   n  1 node",
    ]
