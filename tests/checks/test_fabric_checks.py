"""Burn-in over the fabric, judged: two-node all-reduce pairs (which node is the straggler)
and every InfiniBand rail (ib_write_bw per HCA, error counters read around it).

The transcripts are put together from real outputs (cited in their fixtures' headers or
tables) under the step markers the worker writes (checks.transcript)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.checks import Status, judge
from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.ib import rails_script
from fleetctl.checks.nccl import pair_argv, pair_plan, plan_label
from fleetctl.checks.profiles import load_profile
from fleetctl.checks.transcript import read_transcript, section
from tests.support.fixtures import fixture_text

H100, A100 = "h100-sxm", "a100-sxm-80gb"
PASS, WARN, FAIL, ERROR = Status.PASS, Status.WARN, Status.FAIL, Status.ERROR

# Two-node runs: healthy at 338.82 GB/s (a real 2x8 H100 run, verbatim), one that corrupted
# data (2 nodes, #wrong in %g) and one that died (Test NCCL failure on every rank).
OK = fixture_text("nccl/2x8xh100_a3mega_verbatim_ok.txt")
WRONG = fixture_text("nccl/2node_wrong_gformat_fail.txt")
DIED = fixture_text("nccl/multinode_nccl_failure_fail.txt")
ONE_NODE = fixture_text("nccl/8xh100_full_sweep_ok.txt")


def pairs(*runs: tuple[str, str, str]) -> str:
    """The transcript the worker writes: the plan (x and its partners), then each pair."""
    partners = [b for a, b, _ in runs if a == "x"]
    return section(plan_label("x", partners), "") + "".join(section(f"pair {a} {b}", text) for a, b, text in runs)


@pytest.mark.parametrize(
    ("transcript", "profile", "status", "reason"),
    [
        # 338.82 GB/s is over A100's two-node floor, between H100's warn (368) and fail (330)
        (
            pairs(("x", "p", OK), ("x", "q", OK), ("p", "q", OK)),
            A100,
            PASS,
            r"busbw 338\.82 GB/s or more with each of 2",
        ),
        (
            pairs(("x", "p", OK), ("x", "q", OK), ("p", "q", OK)),
            H100,
            WARN,
            r"pair x-p: busbw with p 338\.82 GB/s is below 368",
        ),
        # x is slow (broken) with both partners, who are fine together: x is the straggler
        (
            pairs(("x", "p", WRONG), ("x", "q", DIED), ("p", "q", OK)),
            A100,
            FAIL,
            r"slow with all 2 partners.*the straggler",
        ),
        # q is slow with everyone; x is fine with p: x passes, q is named
        (
            pairs(("x", "p", OK), ("x", "q", WRONG), ("p", "q", DIED)),
            A100,
            PASS,
            r"busbw 338\.82 GB/s with p; slow only with q",
        ),
        # everything broken: the fabric, not x; nothing proves x good or bad
        (
            pairs(("x", "p", WRONG), ("x", "q", DIED), ("p", "q", WRONG)),
            A100,
            ERROR,
            r"slow with every partner.*fabric",
        ),
        # one partner, slow: either node could be the slow one
        (pairs(("x", "p", WRONG)), A100, ERROR, r"slow with every partner.*cannot tell"),
        # without a profile: no floor, but corrupted data with x is a failure
        (pairs(("x", "p", OK), ("x", "q", OK), ("p", "q", OK)), None, PASS, r"no profile, no multi-node floor"),
        (pairs(("x", "p", OK), ("x", "q", WRONG), ("p", "q", OK)), None, FAIL, r"pair with q: .*wrong values"),
        # not evidence of a two-node run
        (
            pairs(("x", "p", ONE_NODE), ("x", "q", OK), ("p", "q", OK)),
            A100,
            ERROR,
            r"pair x-p ran on 1 host\(s\), not 2",
        ),
        (
            pairs(("x", "p", OK[: OK.index("# Avg bus") + 25]), ("x", "q", OK), ("p", "q", OK)),
            A100,
            ERROR,
            r"pair x-p: the output ends inside its footer",
        ),
        ("", A100, ERROR, r"the output is empty"),
        (OK, A100, ERROR, r"no pair plan in the output"),
        # the partners' own pair is what names a straggler: without it, cut short
        (pairs(("x", "p", WRONG), ("x", "q", DIED)), A100, ERROR, r"no 'pair p q' step: the run was cut short"),
    ],
    ids=[
        "a100-pass",
        "h100-warn",
        "straggler",
        "partner-slow",
        "fabric",
        "one-partner",
        "no-profile",
        "no-profile-wrong",
        "one-host",
        "cut-pair",
        "empty",
        "not-a-transcript",
        "lost-pair",
    ],
)
def test_pairs_are_judged_by_who_is_slow_with_whom(transcript, profile, status, reason) -> None:
    result = judge("nccl-pairs", transcript, profile)
    assert result.status is status, result.reason
    summary = result.reason + " | " + " | ".join(f"{f.where}: {f.what}" for f in result.findings)
    assert re.search(reason, summary), summary


def test_a_pair_cut_inside_its_last_line_stays_cut_in_the_transcript() -> None:
    cut = OK[: OK.index("70.742") + 4]
    (step,) = read_transcript(section("pair x p", cut))
    assert step.cut and step.body == cut  # the marker after it did not end the cut line


def test_the_pair_plan_runs_the_partners_together_too() -> None:
    assert pair_plan("x", ["p", "q"]) == [("x", "p", "pair x p"), ("x", "q", "pair x q"), ("p", "q", "pair p q")]
    assert [label for *_, label in pair_plan("x", ["p", "q", "r"])][3:] == ["pair p q", "pair q r", "pair r p"]
    assert pair_argv("x", "p", 8, ("all_reduce_perf", "-g", "1")) == (
        "mpirun",
        "--host",
        "x:8,p:8",
        "-np",
        "16",
        "--npernode",
        "8",
        "all_reduce_perf",
        "-g",
        "1",
    )
    with pytest.raises(ValueError, match="other nodes"):
        pair_plan("x", ["x", "p"])


# ---- every rail ----------------------------------------------------------------------------

IBSTAT = fixture_text("ib/ibstat_h100_8rails_3eth_down_ok.txt")  # 8 NDR rails + 4 Ethernet ports
PERFQUERY = fixture_text("ib/perfquery_x_lid1719_before.out")
PORT_1 = PERFQUERY[
    PERFQUERY.index("# Port extended counters: Lid 1719 port 1") : PERFQUERY.index(
        "# Port extended counters: Lid 1719 port 2"
    )
]
BW_OK = fixture_text("ib/ib_write_bw_ndr_ok.txt")
BW_SLOW = fixture_text("ib/ib_write_bw_ndr_slow_fail.txt")
RAILS = ["mlx5_0", "mlx5_10", "mlx5_11", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9"]


def bump(block: str, counter: str, by: int) -> str:
    return re.sub(rf"^({counter}:\.+)(\d+)$", lambda m: m[1] + str(int(m[2]) + by), block, flags=re.M)


def rails(bw: dict | None = None, after: dict | None = None, drop: str | None = None) -> str:
    """The transcript the every-rail script prints: ibstat, counters, ib_write_bw, counters."""
    bw, after = bw or {}, after or {}
    steps = [("ibstat", IBSTAT)]
    steps += [(f"perfquery before {d} 1", PORT_1) for d in RAILS]
    steps += [(f"ib_write_bw {d} 1", bw.get(d, BW_OK).replace("mlx5_0", d)) for d in RAILS]
    steps += [(f"perfquery after {d} 1", after.get(d, PORT_1)) for d in RAILS]
    return "".join(section(label, text) for label, text in steps if label != drop)


@pytest.mark.parametrize(
    ("transcript", "status", "reason"),
    [
        (rails(), PASS, r"8 rails: ib_write_bw [\d.]+ Gb/s or more, no link error counter rose"),
        # a rail that is not mlx5_0 is slow: the one-HCA check would never have seen it
        (rails(bw={"mlx5_9": BW_SLOW}), FAIL, r"mlx5_9 port 1: ib_write_bw average [\d.]+ Gb/s is below 340"),
        # the link went down and came back during the run: it flaps
        (
            rails(after={"mlx5_4": bump(PORT_1, "LinkDownedCounter", 1)}),
            FAIL,
            r"mlx5_4 port 1: LinkDownedCounter rose by 1 during the check",
        ),
        (
            rails(after={"mlx5_4": bump(PORT_1, "SymbolErrorCounter", 40)}),
            WARN,
            r"mlx5_4 port 1: SymbolErrorCounter rose by 40",
        ),
        # a rail with no result is no evidence for that rail
        (
            rails(drop="ib_write_bw mlx5_6 1"),
            ERROR,
            r"mlx5_6 port 1: no 'ib_write_bw mlx5_6 1' step: the run was cut short",
        ),
        (rails(drop="perfquery after mlx5_11 1"), ERROR, r"mlx5_11 port 1: no 'perfquery after mlx5_11 1' step"),
        (rails()[:-40], ERROR, r"mlx5_9 port 1: no complete 'perfquery after mlx5_9 1' step"),
        # ib_write_bw of another device under a rail's marker
        (
            rails(bw={"mlx5_3": BW_OK.replace("mlx5_0", "mlx5_7")}),
            ERROR,
            r"the ib_write_bw step of mlx5_3 tested mlx5_7",
        ),
        # evidence of a failure wins over a rail that could not be judged
        (rails(bw={"mlx5_9": BW_SLOW}, after={"mlx5_0": PORT_1[:200]}), FAIL, r"mlx5_9 port 1: ib_write_bw average"),
        (IBSTAT, ERROR, r"no 'ibstat' step in the output"),
    ],
    ids=[
        "healthy",
        "slow-rail",
        "link-flapped",
        "symbol-errors",
        "missing-bw",
        "missing-counters",
        "cut",
        "wrong-device",
        "fail-wins",
        "not-a-transcript",
    ],
)
def test_every_rail_is_tested_and_judged(transcript, status, reason) -> None:
    result = judge("ib-rails", transcript, H100)
    assert result.status is status, result.reason
    assert re.search(reason, result.reason), result.reason


def test_fewer_rails_than_the_profile_needs_is_not_a_pass() -> None:
    seven = IBSTAT.replace("Link layer: InfiniBand", "Link layer: Ethernet", 1)  # mlx5_0 is Ethernet now
    text = rails().replace(IBSTAT, seven)
    result = judge("ib-rails", text, H100)
    assert result.status is FAIL and "7 InfiniBand rails tested, h100-sxm needs 8" in result.reason


def test_the_rails_script_tests_each_rail_ibstat_lists_and_quotes_what_it_runs() -> None:
    argv = rails_script(IBSTAT, load_profile(H100))
    assert argv[:2] == ("sh", "-c")
    for device in RAILS:
        assert f"perfquery -x -C {device} -P 1" in argv[2]
        assert f"ib_write_bw -d {device} -i 1 -F --report_gbits -D 5 localhost 2>&1" in argv[2]
    assert "mlx5_1 " not in argv[2] and "mlx5_2 " not in argv[2]  # Ethernet ports: not compute rails here
    hostile = IBSTAT.replace("CA 'mlx5_3'", "CA 'mlx5_3;touch /tmp/x'")
    with pytest.raises(UnjudgeableOutput, match="not a kernel device name"):
        rails_script(hostile, load_profile(H100))
    with pytest.raises(UnjudgeableOutput, match="no port of the expected link layer"):
        rails_script("CA 'mlx5_0'\n", load_profile(H100))


# ---- properties: a cut or garbled transcript never passes -----------------------------------

PROPERTY = settings(max_examples=60, deadline=None, database=None)
HEALTHY = [
    ("nccl-pairs", A100, pairs(("x", "p", OK), ("x", "q", OK), ("p", "q", OK))),
    ("ib-rails", H100, rails()),
]
# A measurement in a result row: nccl-tests' rows, ib_write_bw's rows, perfquery's counters.
_MEASURED = re.compile(r"^\s*\d+\s+\d+\s+(?:float\s|[\d.]+\s)|^[A-Za-z]+Counter:|^PortRcvErrors:")
_NUMBER = re.compile(r"(?<![\w.+-])\d+(?:\.\d+)?(?![\w.])")


@pytest.mark.parametrize(("kind", "profile", "text"), HEALTHY, ids=[h[0] for h in HEALTHY])
def test_the_healthy_transcripts_pass(kind, profile, text) -> None:
    assert judge(kind, text, profile).status is PASS


@pytest.mark.parametrize(("kind", "profile", "text"), HEALTHY, ids=[h[0] for h in HEALTHY])
@PROPERTY
@given(data=st.data())
def test_a_transcript_cut_anywhere_never_passes(kind, profile, text, data) -> None:
    cut = data.draw(st.integers(min_value=0, max_value=len(text) - 2), label="cut")
    result = judge(kind, text[:cut], profile)
    assert result.status is not PASS, (cut, text[:cut][-80:], result.reason)


@pytest.mark.parametrize(("kind", "profile", "text"), HEALTHY, ids=[h[0] for h in HEALTHY])
@PROPERTY
@given(data=st.data())
def test_a_measurement_garbled_never_passes(kind, profile, text, data) -> None:
    lines = text.splitlines(keepends=True)
    spots = [
        (i, m.start(), m.end()) for i, line in enumerate(lines) if _MEASURED.match(line) for m in _NUMBER.finditer(line)
    ]
    i, start, end = data.draw(st.sampled_from(spots), label="number")
    # not N/A: nccl-tests prints it in #wrong when validation is off, a legitimate cell
    garbage = data.draw(st.sampled_from(["ERR!", "nan", "1e400", "--", "?", "12abc", "0x"]), label="garbage")
    lines[i] = lines[i][:start] + garbage + lines[i][end:]
    result = judge(kind, "".join(lines), profile)
    assert result.status is not PASS, (lines[i], result.reason)
