"""Which nodes a validation runs across, from the nodes' rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from fleetctl.validation.scope import Scope, ScopeError, select_nodes


@dataclass(frozen=True)
class Row:
    name: str
    rack: str = "r1"
    island: str = "ib-a"
    nvlink_domain: str = ""
    profile: str = "h100-sxm"
    state: str = "production"
    labels: dict[str, Any] = field(default_factory=dict)


FLEET = [
    Row("gpu-001", labels={"pool": "train"}),
    Row("gpu-002", labels={"pool": "train"}),
    Row("gpu-003", rack="r2"),
    Row("gpu-004", rack="r2", island="ib-b"),
    Row("gpu-005", state="maintenance"),
    Row("gb-01", rack="r9", island="nvl", nvlink_domain="nvl72-a", profile="gb200-nvl72"),
    Row("gb-02", rack="r9", island="nvl", nvlink_domain="nvl72-a", profile="gb200-nvl72"),
]


@pytest.mark.parametrize(
    ("scope", "expected"),
    [
        (Scope(names=("gpu-[001-003]",)), ["gpu-001", "gpu-002", "gpu-003"]),
        (Scope(names=("gpu-002", "gpu-001")), ["gpu-001", "gpu-002"]),
        (Scope(island="ib-a", rack="r2", names=("gpu-[001-004]",), labels={}), None),  # one node left
        (Scope(rack="r2"), ["gpu-003", "gpu-004"]),
        (Scope(domain="nvl72-a"), ["gb-01", "gb-02"]),
        (Scope(labels={"pool": "train"}), ["gpu-001", "gpu-002"]),
        (Scope(island="ib-a", idle=frozenset({"gpu-001", "gpu-003", "gpu-004"})), ["gpu-001", "gpu-003"]),
    ],
)
def test_select(scope: Scope, expected: list[str] | None) -> None:
    if expected is None:
        with pytest.raises(ScopeError, match="1 production node; an all-reduce across nodes needs 2 or more"):
            select_nodes(FLEET, scope)
    else:
        assert select_nodes(FLEET, scope) == expected


@pytest.mark.parametrize(
    ("scope", "message"),
    [
        (Scope(names=("gpu-009",)), "unknown node: gpu-009"),
        (Scope(names=("gpu-[001-002",)), "gpu-\\[001-002"),
        (Scope(names=("gpu-001", "gpu-005")), r"gpu-005: not in production \(maintenance\)"),
        (Scope(), r"nodes of 2 GPU profiles \(gb200-nvl72, h100-sxm\)"),
        (Scope(island="none"), "island none: 0 production nodes"),
    ],
)
def test_a_scope_with_no_usable_set_is_refused_in_one_line(scope: Scope, message: str) -> None:
    with pytest.raises(ScopeError, match=message) as caught:
        select_nodes(FLEET, scope)
    assert "\n" not in str(caught.value)
