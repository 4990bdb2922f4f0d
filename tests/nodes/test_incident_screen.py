"""The watched incident screen (fleetctl.nodes.incident_screen): what needs an operator, one
line a node, newest first, and the latest transitions, fitted to the terminal."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.nodes.incident_screen import ELLIPSIS, attention, cut, watch_lines

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)


def ago(minutes: float) -> datetime:
    return NOW - timedelta(minutes=minutes)


def status(**parts) -> dict:
    base = {"stalled": [], "needs_operator": [], "rma_held": [], "held_drains": [], "suspect": []}
    return {**base, **parts}


def held(node: str, minutes: float, refusals: int = 1) -> dict:
    return {"node": node, "since": ago(minutes + 5), "last": ago(minutes), "refusals": refusals, "reason": "rack limit"}


def transition(node: str, minutes: float, to: str = "draining") -> dict:
    return {"at": ago(minutes), "node": node, "from": "production", "to": to, "trigger": "drain", "actor": "xid"}


def test_a_node_held_and_suspect_is_one_line_with_both_and_its_repeats_counted() -> None:
    found = attention(
        status(
            held_drains=[held("gpu-a", 4, refusals=3)],
            suspect=[{"node": "gpu-a", "since": ago(6), "reason": "unreachable: 3 sweeps", "why": "unreachable"}],
        )
    )
    assert [(a.node, a.needs) for a in found] == [("gpu-a", ["drain held x3", "suspect"])]
    assert found[0].since == ago(4)  # the newest of its reasons


def test_newest_first() -> None:
    found = attention(
        status(
            held_drains=[held("gpu-old", 60)],
            rma_held=[{"id": 7, "node": "gpu-new", "opened_at": ago(1), "held_reason": "correlated burst"}],
            stalled=[{"node": "gpu-mid", "since": ago(10), "reason": "failing workflow task"}],
        )
    )
    assert [a.node for a in found] == ["gpu-new", "gpu-mid", "gpu-old"]


@pytest.mark.parametrize(("text", "width", "expected"), [("rack-07", 7, "rack-07"), ("rack-07", 6, "rack-" + ELLIPSIS)])
def test_a_cut_cell_ends_in_an_ellipsis(text, width, expected) -> None:
    assert cut(text, width) == expected


@pytest.mark.parametrize(("columns", "lines"), [(80, 24), (60, 24), (200, 60)])
def test_the_screen_fits_the_terminal_and_shows_both_parts_however_long_each_is(columns, lines) -> None:
    data = status(held_drains=[held(f"gpu-held-{i:03d}", 100 + i) for i in range(80)])
    moved = [transition(f"gpu-moved-{i:03d}", i / 10) for i in range(40)]
    screen = watch_lines("fleet 90 nodes", "automation: breaker closed", data, moved, columns, lines - 1, NOW)
    assert len(screen) <= lines - 1 and all(len(line) <= columns for line in screen)
    text = "\n".join(screen)
    assert "gpu-held-000" in text and "gpu-moved-000" in text  # the newest of each part
    assert "more: fleetctl fleet status" in text and "more: fleetctl node history" in text


def test_a_new_drain_is_on_the_first_screen_under_a_long_list_of_held_drains() -> None:
    data = status(held_drains=[held(f"gpu-held-{i:03d}", 30) for i in range(30)])
    screen = watch_lines("head", "automation", data, [transition("gpu-xid79", 0.1)], 80, 23, NOW)
    assert any("gpu-xid79" in line and "production>draining" in line for line in screen), screen


def test_nothing_to_show_says_so() -> None:
    assert watch_lines("head", "automation", status(), [], 80, 23, NOW) == [
        "head",
        "automation",
        "needs an operator: none",
        "latest transitions: none",
    ]
