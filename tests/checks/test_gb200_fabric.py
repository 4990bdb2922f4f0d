"""GB200 NVL72: the gb200 profile (a compute tray of 4 GPUs in an
NVLink domain of 72) and each GPU's fabric registration in nvidia-smi -q, judged on profiles
whose NVLink domain spans nodes. An HGX node's fabric section (CliqueId 0, a zero ClusterUUID:
its NVLink is its own) is no fault."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge, load_profile
from tests.support.fixtures import fixture_text


def test_the_gb200_profile_is_a_tray_of_four_in_a_domain_of_seventy_two():
    gb200 = load_profile("gb200")
    assert (gb200.gpu_count, gb200.nvlink_domain_gpus, gb200.ib_port_count) == (4, 72, 4)
    assert "nvidia-imex" in gb200.required_services and "nvidia-fabricmanager" not in gb200.required_services
    assert gb200.matches_gpu_name("NVIDIA GB200") and not gb200.matches_gpu_name("NVIDIA B200")


@pytest.mark.parametrize(
    ("fixture", "where", "what"),
    [
        (
            "nvidia_smi/q_gb200_fabric_insufficient_resources_fail.txt",
            "GPU 1",
            "registration failed: Insufficient Resources",
        ),
        ("nvidia_smi/q_gb200_fabric_unhealthy_fail.txt", "GPU 2", "fabric health: Unhealthy"),
        ("nvidia_smi/q_gb200_fabric_in_progress_fail.txt", "GPU 0", "registration 'In Progress', not Completed"),
    ],
)
def test_a_gpu_out_of_its_nvlink_domain_fails_the_tray(fixture, where, what):
    result = judge("nvidia-smi", fixture_text(fixture), "gb200")
    assert result.status is Status.FAIL
    assert any(f.where == where and what in f.what for f in result.findings)


def test_an_hgx_nodes_own_fabric_section_is_not_judged_as_a_domain():
    """The real H100 -q fixture reports CliqueId 0 and a zero ClusterUUID: normal off NVL72."""
    text = fixture_text("nvidia_smi/q_8xh100_ok.txt")
    assert "CliqueId                          : 0" in text
    assert judge("nvidia-smi", text, "h100-sxm").status is Status.PASS


def test_a_tray_reported_without_its_fabric_section_is_not_vouched_for():
    text = fixture_text("nvidia_smi/q_gb200_tray_fabric_ok.txt")
    block = text.index("    Fabric\n")
    stripped = text[:block] + text[text.index("    Processes", block) :]
    result = judge("nvidia-smi", stripped, "gb200")
    assert result.status is Status.WARN and "NVLink domain registration was not reported" in result.reason
