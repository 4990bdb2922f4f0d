"""Which collective ran and over how many nodes, read from what the output carries, and the
floor each is held to (checks/nccl.py: collective_of, _judge_bandwidth)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from fleetctl.checks import Status, judge
from fleetctl.checks.nccl import collective_of, judge_nccl, parse_nccl
from fleetctl.checks.profiles import Floor, NcclCollective, load_profile
from tests.support.fixtures import fixture_text

H100 = "h100-sxm"
ALL_GATHER = fixture_text("nccl/8xh100_all_gather_ok.txt")
ALL_GATHER_HEADER = "# Collective test starting: all_gather_perf\n"


def without_header(text: str) -> str:
    assert ALL_GATHER_HEADER in text
    return text.replace(ALL_GATHER_HEADER, "")


def test_a_run_whose_output_lists_no_hosts_is_multinode_by_its_rank_count():
    result = judge("nccl", fixture_text("nccl/4x8xh100_nranks_only_no_host_list_warn.txt"), H100)
    assert result.metrics["hosts"] == 0 and result.metrics["nodes"] == 4
    # 341 GB/s: under the 2-node floor's warning (368), far over its failure (330); the
    # single-node floor (415) would have failed a healthy multi-rack run.
    assert result.status is Status.WARN and "4-node" in result.reason


def test_the_rank_lines_alone_count_the_nodes_too():
    text = fixture_text("nccl/2x8xh100_multinode_ok.txt")
    run = parse_nccl(text)
    assert run.ranks == 16 and len(run.hosts) == 2 and collective_of(run) == "all_reduce"


def test_an_all_gather_without_its_header_is_not_held_to_the_all_reduce_floor():
    text = without_header(ALL_GATHER)
    run = parse_nccl(text)
    assert run.collective is None
    # Its rows' count is per rank (size = 8 x count x 4 B): not an all-reduce, and an
    # all_gather prints as an alltoall does, so no floor is applied, and the verdict says so.
    assert collective_of(run) is None
    result = judge("nccl", text, H100)
    assert result.status is Status.PASS
    assert any("floor not applied" in f.what for f in result.findings)


def test_a_reduce_scatter_is_told_by_its_reduction_and_held_to_its_own_floor():
    rows = ALL_GATHER.replace(ALL_GATHER_HEADER, "").replace("float    none", "float     sum")
    # reduce_scatter's busbw is algbw (n-1)/n: 208.69 x 7/8 at the largest size.
    rows = rows.replace("208.69  365.20", "208.69  182.60")
    run = parse_nccl(rows)
    assert collective_of(run) == "reduce_scatter"
    profile = load_profile(H100)
    assert judge_nccl(rows, profile).status is Status.PASS  # no packaged reduce_scatter floor
    site = dataclasses.replace(profile, nccl_collective_busbw_gbps={NcclCollective.REDUCE_SCATTER: Floor(300, 250)})
    result = judge_nccl(rows, site)
    assert result.status is Status.FAIL and "reduce_scatter out-of-place busbw" in result.reason


def test_a_named_collective_uses_its_floor_from_the_profile():
    profile = load_profile(H100)
    site = dataclasses.replace(profile, nccl_collective_busbw_gbps={NcclCollective.ALL_GATHER: Floor(370, 340)})
    result = judge_nccl(ALL_GATHER, site)
    assert result.status is Status.WARN  # 365.2 GB/s under 370
    assert judge_nccl(ALL_GATHER, profile).status is Status.PASS


def test_a_run_that_lists_no_ranks_cannot_be_held_to_a_floor():
    text = "".join(line for line in fixture_text("nccl/8xh100_slow_fail.txt").splitlines(True) if "Rank" not in line)
    result = judge("nccl", text, H100)
    assert result.status is Status.ERROR and "lists no ranks" in result.reason
    assert judge("nccl", text, None).status is Status.PASS  # no profile, no floor: nothing to tell


def test_a_profile_floor_for_an_unknown_collective_or_out_of_order_is_refused():
    from fleetctl.checks.profiles import ProfileError, parse_profile
    from fleetctl.checks.safe_yaml import load_file

    raw = load_file(Path(__file__).resolve().parents[2] / "checks" / "profiles" / "h100-sxm.yaml")
    raw["nccl_collective_busbw_gbps"] = {"all_to_everyone": {"warn": 1, "fail": 1}}
    with pytest.raises(ProfileError, match="unknown collective 'all_to_everyone'"):
        parse_profile(raw, "h100-sxm")
    raw["nccl_collective_busbw_gbps"] = {"alltoall": {"warn": 10, "fail": 20}}
    with pytest.raises(ProfileError, match=r"^nccl_collective_busbw_gbps.alltoall: warn 10"):
        parse_profile(raw, "h100-sxm")
