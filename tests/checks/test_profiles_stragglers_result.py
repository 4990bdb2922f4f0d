from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from fleetctl.checks import CheckResult, Finding, Status
from fleetctl.checks.profiles import Floor, GpuProfile, UnknownProfile, load_profile, profile_names
from fleetctl.checks.stragglers import find_stragglers


def test_required_profiles_exist_and_load():
    assert {"h100-sxm", "h200-sxm", "a100-sxm-80gb", "b200"} <= set(profile_names())
    for name in profile_names():
        profile = load_profile(name)
        assert isinstance(profile, GpuProfile) and profile.gpu_count > 0
        assert profile.nccl_allreduce_busbw_gbps.fail < profile.nccl_allreduce_busbw_gbps.warn
        assert profile.gpu_temperature_c.warn < profile.gpu_temperature_c.fail


@pytest.mark.parametrize("name", ["h100-sxm", "h200-sxm", "a100-sxm-80gb", "b200", "gb200"])
def test_every_threshold_line_cites_a_source(name):
    text = (resources.files("fleetctl.checks") / "profiles" / f"{name}.yaml").read_text()
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if re.match(r"^(?!name:|description:)[a-z_]+:\s*(\{|\d+\s*(#|$))", line):
            cited = "#" in line or lines[i - 1].startswith("#")
            assert cited, f"{name}.yaml: {line!r} has no source comment"


def test_h100_figures_match_published_numbers():
    h100 = load_profile("h100-sxm")
    assert 440 <= h100.nccl_allreduce_busbw_gbps.warn <= 480
    assert 34000 <= h100.hpl_gflops_per_gpu.warn <= 42000
    assert h100.ib_rate_gbps == 400 and h100.gpu_count == 8
    assert h100.matches_gpu_name("NVIDIA H100 80GB HBM3") and not h100.matches_gpu_name("NVIDIA A100-SXM4-80GB")


def test_unknown_profile_message_lists_the_known_ones():
    with pytest.raises(UnknownProfile, match="h100-sxm"):
        load_profile("h100-pcie-nope")


def test_floor_judgement():
    floor = Floor(warn=460, fail=415)
    assert floor.judge(470, "busbw", "GB/s") is None
    assert floor.judge(450, "busbw", "GB/s").severity == "warn"
    assert floor.judge(400, "busbw", "GB/s", "node").severity == "fail"


def test_straggler_below_peers_is_flagged_even_above_the_floor():
    values = {f"n{i}": v for i, v in enumerate([478, 476, 479, 477, 475, 478, 480, 455])}
    verdicts = find_stragglers(values)
    assert verdicts["n7"].straggler and verdicts["n7"].robust_z < -3.5
    assert not any(v.straggler for k, v in verdicts.items() if k != "n7")


def test_one_outlier_does_not_hide_another():
    values = {f"n{i}": 470.0 + (i % 3) for i in range(20)} | {"bad1": 200.0, "bad2": 430.0}
    verdicts = find_stragglers(values)
    assert verdicts["bad1"].straggler and verdicts["bad2"].straggler


def test_lower_is_better_metrics():
    temps = {f"n{i}": 60.0 + (i % 2) for i in range(10)} | {"hot": 79.0}
    verdicts = find_stragglers(temps, higher_is_better=False)
    assert verdicts["hot"].straggler and sum(v.straggler for v in verdicts.values()) == 1


def test_too_few_peers_flags_nobody_and_says_so():
    verdicts = find_stragglers({"a": 470.0, "b": 100.0, "c": 471.0})
    assert not any(v.straggler for v in verdicts.values())
    assert "need 5" in verdicts["b"].reason


def test_uniform_fleet_flags_nobody():
    assert not any(v.straggler for v in find_stragglers({f"n{i}": 470.0 for i in range(10)}).values())


def test_result_round_trips_through_json():
    result = CheckResult(
        Status.WARN,
        {"busbw_gbps": 450.0, "gpus": [1, 2], "nan": float("nan")},
        [Finding("slow", "GPU 1", "warn")],
        "slow",
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert set(data) == {"status", "metrics", "findings", "reason"} and data["status"] == "warn"
    assert data["metrics"]["nan"] is None
    back = CheckResult.from_dict(data)
    assert back.status is Status.WARN and back.findings == result.findings
