"""Slurm host lists in and out (fleetctl.inventory.hostlist), as scontrol show hostnames/hostlist."""

from __future__ import annotations

import re

import pytest

from fleetctl.inventory.hostlist import MAX_HOSTS, HostListError, compress, expand, expand_all


@pytest.mark.parametrize(
    "expression, names",
    [
        ("gpu-001", ["gpu-001"]),
        ("gpu-[002-004,017]", ["gpu-002", "gpu-003", "gpu-004", "gpu-017"]),
        ("gpu-[008-010]", ["gpu-008", "gpu-009", "gpu-010"]),  # padding from the range's start
        ("node[1-3],login1", ["node1", "node2", "node3", "login1"]),
        ("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"]),
        ("a1,a1,a[1-2]", ["a1", "a2"]),
    ],
)
def test_expand(expression, names) -> None:
    assert expand(expression) == names


@pytest.mark.parametrize(
    "expression, message",
    [
        ("gpu-[1-", "'[' without ']'"),
        ("gpu-1]", "']' without '['"),
        ("gpu-[a-b]", "is not a number"),
        ("gpu-[9-1]", "runs backwards"),
        ("gpu-[0-999999999]", f"more than {MAX_HOSTS} hosts"),
        ("a,,b", "an empty name"),
    ],
)
def test_bad_host_lists_are_one_line(expression, message) -> None:
    with pytest.raises(HostListError, match=re.escape(message)):
        expand(expression)


@pytest.mark.parametrize(
    "names, expression",
    [
        (["gpu-002", "gpu-003", "gpu-004", "gpu-005", "gpu-006", "gpu-007", "gpu-008", "gpu-017"], "gpu-[002-008,017]"),
        (["gpu-001"], "gpu-001"),
        (["node1", "node3", "login", "node2"], "node[1-3],login"),
        (["gpu-9", "gpu-10"], "gpu-9,gpu-10"),  # different widths are different groups
    ],
)
def test_compress(names, expression) -> None:
    assert compress(names) == expression
    assert sorted(expand(expression)) == sorted(set(names))


def test_expand_all_keeps_order_without_repeats() -> None:
    assert expand_all(["gpu-[1-2]", "gpu-2", "cpu1"]) == ["gpu-1", "gpu-2", "cpu1"]


@pytest.mark.parametrize(
    "expression, message",
    [
        ("gpu-[18446744073709551615-18446744073709551617]", "goes past 2^64-1"),
        ("gpu-[18446744073709551616]", "goes past 2^64-1"),
        ("gpu-[99999999999999999999999999-99999999999999999999999999]", "is not a number"),
        ("gpu-[\u00b2]", "is not a number"),  # str.isdigit() says yes, int() says no
        ("gpu-[\u0663-\u0665]", "is not a number"),  # Arabic-Indic digits: Slurm reads ASCII only
    ],
)
def test_numbers_slurm_would_misread_are_refused_in_one_line(expression, message) -> None:
    with pytest.raises(HostListError, match=re.escape(message)) as err:
        expand(expression)
    assert "\n" not in str(err.value)


def test_the_largest_number_slurm_reads_is_read() -> None:
    assert expand("gpu-[18446744073709551614-18446744073709551615]") == [
        "gpu-18446744073709551614",
        "gpu-18446744073709551615",
    ]


def test_compress_never_writes_a_range_past_2_64() -> None:
    names = ["gpu-18446744073709551616", "gpu-18446744073709551617", "gpu-1", "gpu-2"]
    written = compress(names)
    assert written == "gpu-18446744073709551616,gpu-18446744073709551617,gpu-[1-2]"
    assert "\u0663" in compress(["gpu\u0663", "gpu\u0664"])  # not digits Slurm reads: written whole


def test_host_lists_together_are_bounded_too() -> None:
    half = MAX_HOSTS // 2 + 1
    with pytest.raises(HostListError, match=f"more than {MAX_HOSTS} hosts"):
        expand_all([f"a[1-{half}]", f"b[1-{half}]"])
