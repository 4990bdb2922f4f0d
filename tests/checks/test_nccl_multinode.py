"""nccl-tests runs over several hosts, judged with kind `nccl`, against the profile's
multi-node floor. Bus bandwidth is what nccl-tests' doc/PERFORMANCE.md makes independent of
the rank count (busbw = algbw * 2(n-1)/n), so the floor holds at any node count; the algbw
it means falls with n, and the verdict reports it."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge, load_profile
from tests.support.fixtures import fixture_text

H100 = "h100-sxm"


@pytest.mark.parametrize(
    ("fixture", "hosts", "status"),
    [
        ("nccl/2x8xh100_a3mega_verbatim_ok.txt", 2, Status.WARN),  # 338.82: under 368, over 330
        ("nccl/2x8xh100_multinode_half_fail.txt", 2, Status.FAIL),  # 163.93, half: nccl-tests#347's symptom
        ("nccl/2x8xh100_validation_off_ok.txt", 2, Status.FAIL),  # 91.35: nccl-tests#290's degraded pair
        ("nccl/4x8xh100_multinode_derived_warn.txt", 4, Status.WARN),  # the same busbw over 4 nodes, the same verdict
    ],
)
def test_a_multinode_run_is_held_to_the_multinode_floor(fixture, hosts, status):
    result = judge("nccl", fixture_text(fixture), H100)
    assert (result.metrics["hosts"], result.status) == (hosts, status)
    assert f"{hosts}-node out-of-place busbw" in result.findings[0].what


def test_the_floor_is_on_busbw_at_every_node_count_and_its_algbw_falls_with_n():
    floor = load_profile(H100).nccl_multinode_busbw_gbps.fail
    two = judge("nccl", fixture_text("nccl/2x8xh100_multinode_ok.txt"), H100).metrics
    four = judge("nccl", fixture_text("nccl/4x8xh100_multinode_derived_warn.txt"), H100).metrics
    assert two["multinode_floor_busbw_gbps"] == four["multinode_floor_busbw_gbps"] == floor
    assert two["multinode_floor_algbw_gbps"] == pytest.approx(floor * 16 / 30, abs=0.01)
    assert four["multinode_floor_algbw_gbps"] == pytest.approx(floor * 32 / 62, abs=0.01)


def test_a_single_node_run_keeps_the_single_node_floor():
    result = judge("nccl", fixture_text("nccl/8xh100_slow_fail.txt"), H100)
    assert result.status is Status.FAIL and "multinode_floor_busbw_gbps" not in result.metrics


def test_a_run_with_fewer_ranks_per_host_than_gpus_is_not_held_to_the_floor_and_says_so():
    """One rank per host uses one rail of eight: the node's floor does not apply, and the
    verdict says it was not applied rather than passing it silently."""
    text = fixture_text("nccl/2x8xh100_multinode_half_fail.txt")
    lines = [line for line in text.splitlines() if "Rank" not in line or " device  0 " in line]
    result = judge("nccl", "\n".join(lines) + "\n", H100)
    assert result.metrics["ranks"] == 2 and result.status is Status.PASS
    assert any("not applied" in f.what and f.severity == "info" for f in result.findings)
