"""Repeats collapse (fleetctl.nodes.event_groups), as Kubernetes events do: one row per node,
kind and reason class, with its count and first/last seen."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from fleetctl.nodes.event_groups import EventGroup, collapse, reason_class

T0 = datetime(2026, 12, 1, 18, 0, tzinfo=UTC)


def at(seconds: int) -> datetime:
    return T0 + timedelta(seconds=seconds)


def event(seconds: int, node: str | None, kind: str, reason: str) -> dict:
    return {"at": at(seconds), "node": node, "kind": kind, "reason": reason}


REFUSED = "sweep: nvidia-smi-query: fleet limit: {} of 40 already unavailable (max 4, 10%)"


@pytest.mark.parametrize(
    "events, groups",
    [
        ([], []),
        # a sweep every 10 s refusing the same node: one row, counted, first and last seen
        (
            [event(10 * i, "gpu-003", "deny", REFUSED.format(4)) for i in range(41)],
            [EventGroup("gpu-003", "deny", REFUSED.format(4), 41, at(0), at(400))],
        ),
        # the figures in a reason change: the same repeat; the row says the latest
        (
            [event(0, "gpu-003", "deny", REFUSED.format(4)), event(10, "gpu-003", "deny", REFUSED.format(5))],
            [EventGroup("gpu-003", "deny", REFUSED.format(5), 2, at(0), at(10))],
        ),
        # another node, another kind, another reason: rows of their own, the one seen last first
        (
            [
                event(0, "gpu-003", "deny", REFUSED.format(4)),
                event(5, "gpu-004", "deny", REFUSED.format(4)),
                event(6, "gpu-003", "grant", "granted"),
                event(7, "gpu-003", "deny", "rack limit: 1 of 4 (max 1)"),
                event(20, "gpu-003", "deny", REFUSED.format(4)),
            ],
            [
                EventGroup("gpu-003", "deny", REFUSED.format(4), 2, at(0), at(20)),
                EventGroup("gpu-003", "deny", "rack limit: 1 of 4 (max 1)", 1, at(7), at(7)),
                EventGroup("gpu-003", "grant", "granted", 1, at(6), at(6)),
                EventGroup("gpu-004", "deny", REFUSED.format(4), 1, at(5), at(5)),
            ],
        ),
        # in any order (newest first, as the database gives them)
        (
            [
                event(10, None, "breaker_open", "storm: 5 of 40 failed in 60s"),
                event(0, None, "breaker_open", "storm: 4 of 40 failed in 60s"),
            ],
            [EventGroup(None, "breaker_open", "storm: 5 of 40 failed in 60s", 2, at(0), at(10))],
        ),
    ],
)
def test_collapse(events, groups) -> None:
    assert collapse(events) == groups


@pytest.mark.parametrize(
    "reason, cls",
    [
        ("fleet limit: 3 of 40 (10%)", "fleet limit: # of # (#%)"),
        ("unreachable 2.5 s", "unreachable # s"),
        ("  no figures  ", "no figures"),
    ],
)
def test_reason_class(reason, cls) -> None:
    assert reason_class(reason) == cls


def _command(node: str, minute: int, trigger: str = "adopt", actor: str = "alice", cause: str = "adopted") -> dict:
    return {
        "at": datetime(2026, 12, 5, 12, minute, tzinfo=UTC),
        "node": node,
        "trigger": trigger,
        "to": "production",
        "actor": actor,
        "cause": cause,
    }


def test_one_command_given_to_sixteen_nodes_is_one_row_naming_them_as_a_host_list() -> None:
    from fleetctl.nodes.event_groups import collapse_commands

    rows = collapse_commands(
        [_command(f"gpu-{i:03d}", 1) for i in range(1, 17)] + [_command("gpu-020", 3, "undrain", cause="cable done")]
    )
    assert [(r["trigger"], r["node"], len(r["nodes"])) for r in rows] == [
        ("undrain", "gpu-020", 1),
        ("adopt", "gpu-[001-016]", 16),
    ]


def test_other_actors_or_causes_are_other_rows() -> None:
    from fleetctl.nodes.event_groups import collapse_commands

    rows = collapse_commands(
        [_command("gpu-001", 1), _command("gpu-002", 2, actor="bob"), _command("gpu-003", 3, cause="swap optics")]
    )
    assert len(rows) == 3 and [r["node"] for r in rows] == ["gpu-003", "gpu-002", "gpu-001"]
