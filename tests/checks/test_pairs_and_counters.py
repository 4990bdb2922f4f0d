"""Pure parts of multi-node burn-in: which node of the slow pairs is the straggler, and
which InfiniBand error counters grew during a check."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.checks import Status
from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.ib import judge_counter_increase, parse_perfquery
from fleetctl.checks.stragglers import localise_by_pairs
from tests.support.fixtures import FIXTURES

FLOOR = 40.0  # GB/s, a two-node all-reduce floor


def _pairs(nodes, slow_node=None, slow=20.0, fast=48.0):
    return {(a, b): slow if slow_node in (a, b) else fast for a, b in itertools.combinations(nodes, 2)}


@pytest.mark.parametrize(
    ("busbw", "stragglers", "note"),
    [
        (_pairs("abcd"), set(), "all fast"),
        (_pairs("abcd", "c"), {"c"}, "slow with every partner"),
        # a ring of pairs (each node with two partners) still pins the slow one
        ({("a", "b"): 48, ("b", "c"): 20, ("c", "d"): 20, ("d", "a"): 48}, {"c"}, "ring"),
        # one slow pair alone: either node could be slow
        ({("a", "b"): 20, ("c", "d"): 48}, set(), "one partner each"),
        # a node slow with one partner only is not the straggler (the link between them may be)
        ({("a", "b"): 20, ("a", "c"): 48, ("b", "c"): 48}, set(), "one bad pair"),
        # everything slow: the fabric, not a node
        (_pairs("abcd", None, fast=20.0), set(), "fabric"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_a_node_slow_with_every_partner_is_the_straggler(busbw, stragglers, note):
    verdicts = localise_by_pairs(busbw, FLOOR)
    assert {n for n, v in verdicts.items() if v.straggler} == stragglers, note
    if note == "fabric":
        assert all("fabric" in v.reason for v in verdicts.values())


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -1.0, "48"])
def test_a_pair_that_is_not_a_measurement_is_refused(bad):
    with pytest.raises(ValueError, match="not a measurement"):
        localise_by_pairs({("a", "b"): bad, ("b", "c"): 48.0}, FLOOR)


def test_a_self_pair_and_a_bad_floor_are_refused():
    with pytest.raises(ValueError, match="one node"):
        localise_by_pairs({("a", "a"): 48.0}, FLOOR)
    with pytest.raises(ValueError, match="floor"):
        localise_by_pairs({("a", "b"): 48.0}, float("nan"))


@settings(max_examples=60, deadline=None, database=None)
@given(
    n=st.integers(min_value=3, max_value=8),
    victim=st.integers(min_value=0, max_value=7),
    jitter=st.lists(st.floats(min_value=-5, max_value=5), min_size=28, max_size=28),
)
def test_the_straggler_is_found_among_any_fast_peers(n, victim, jitter):
    nodes = [f"n{i}" for i in range(n)]
    slow_node = nodes[victim % n]
    busbw = {pair: value + j for (pair, value), j in zip(_pairs(nodes, slow_node).items(), jitter, strict=False)}
    verdicts = localise_by_pairs(busbw, FLOOR)
    assert {node for node, v in verdicts.items() if v.straggler} == {slow_node}


# ---- perfquery ---------------------------------------------------------------------------

BEFORE = (FIXTURES / "ib" / "perfquery_x_lid1719_before.out").read_text()


def _bump(text: str, port: int, counter: str, by: int) -> str:
    block = text.index(f"Lid 1719 port {port}")
    at = text.index(f"{counter}:", block)
    end = text.index("\n", at)
    dots, value = text[at:end].rsplit(".", 1)
    return text[:at] + dots + "." + str(int(value) + by) + text[end:]


def test_perfquery_blocks_are_read():
    ports = parse_perfquery(BEFORE)
    assert [(p.lid, p.port) for p in ports] == [(1719, 1), (1719, 2)]
    assert ports[1].counters["PortXmitWait"] == 36510964 and ports[0].counters["SymbolErrorCounter"] == 0


@pytest.mark.parametrize(
    ("counter", "by", "status"),
    [
        (None, 0, Status.PASS),
        ("LinkDownedCounter", 1, Status.FAIL),  # the link flapped during the check
        ("LinkErrorRecoveryCounter", 2, Status.FAIL),
        ("SymbolErrorCounter", 37, Status.WARN),
        ("PortRcvErrors", 1, Status.WARN),
        ("PortXmitWait", 10**6, Status.PASS),  # congestion, not an error
    ],
)
def test_counters_are_judged_by_their_increase_over_the_check(counter, by, status):
    after = _bump(BEFORE, 2, counter, by) if counter else BEFORE
    result = judge_counter_increase(BEFORE, after)
    assert result.status is status, result.reason
    if status is not Status.PASS:
        assert result.findings[0].where == "lid 1719 port 2" and f"rose by {by}" in result.findings[0].what


def test_counts_from_before_the_check_are_not_held_against_it():
    old_errors = _bump(BEFORE, 1, "SymbolErrorCounter", 500)
    assert judge_counter_increase(old_errors, old_errors).status is Status.PASS


@pytest.mark.parametrize(
    ("before", "after", "message"),
    [
        (_bump(BEFORE, 1, "LinkDownedCounter", 3), BEFORE, "reset during the check"),
        (_bump(BEFORE, 1, "LinkDownedCounter", 255), _bump(BEFORE, 1, "LinkDownedCounter", 255), "saturated"),
        (BEFORE, BEFORE[: BEFORE.index("# Port extended counters: Lid 1719 port 2")], "not after"),
        (BEFORE, BEFORE[: BEFORE.index("LinkDownedCounter", BEFORE.index("port 2"))], "cut short"),
        (
            BEFORE,
            BEFORE.replace("PortRcvErrors:...................0", "PortRcvErrors:...................1e400", 1),
            "expected a number",
        ),
        (
            BEFORE,
            BEFORE.replace(
                "PortXmitWait:....................22730501",
                "PortXmitWait:....................99999999999999999999999",
                1,
            ),
            "out of the counter range",
        ),
    ],
)
def test_counters_that_cannot_be_compared_are_an_error(before, after, message):
    with pytest.raises(UnjudgeableOutput, match=message):
        judge_counter_increase(before, after)
