from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from fleetctl.checks import KINDS
from fleetctl.checks.catalog import CHECKS, CheckSpec
from fleetctl.cli.check import app
from tests.support.fixtures import FIXTURES

runner = CliRunner()


def test_catalog_has_the_agreed_checks():
    required = {
        "nvidia-smi-query",
        "nvidia-smi-q",
        "xid-scan",
        "dcgm-r1",
        "dcgm-r2",
        "dcgm-r3",
        "nccl-allreduce",
        "hpl",
        "ib-ports",
        "ib-bw",
        "firmware-inventory",
    }
    assert required <= set(CHECKS)
    for name, spec in CHECKS.items():
        assert isinstance(spec, CheckSpec) and spec.name == name and spec.kind in KINDS
        assert spec.argv and all(isinstance(a, str) for a in spec.argv) and spec.typical_duration_s > 0
    assert CHECKS["nccl-allreduce"].argv == ("all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8")


def test_check_list_json():
    result = runner.invoke(app, ["list", "-o", "json"])
    assert result.exit_code == 0
    rows = json.loads(result.output)
    assert {r["name"] for r in rows} == set(CHECKS)
    assert {"name", "tool", "kind", "typical_duration_s"} <= set(rows[0])
    assert {r["name"]: r["judges"] for r in rows if r["judges"] != "all"} == {"imex": "nvlink-domain"}


def test_check_list_table():
    result = runner.invoke(app, ["list"])
    assert result.exit_code == 0 and "nccl-allreduce" in result.output


@pytest.mark.parametrize(
    ("kind", "fixture", "profile", "code", "status"),
    [
        ("nccl", "nccl/8xh100_full_sweep_ok.txt", "h100-sxm", 0, "pass"),
        ("nccl", "nccl/8xh100_slow_warn.txt", "h100-sxm", 0, "warn"),
        ("nccl", "nccl/8xh100_slow_fail.txt", "h100-sxm", 3, "fail"),
        ("nccl", "nccl/8xh100_hung_no_footer_error.txt", None, 4, "error"),
        ("hpl", "hpl/nvidia_8xh100_ok.txt", "h100-sxm", 0, "pass"),
        ("xid", "xid/journal_xid79_nvlink_fail.txt", None, 3, "fail"),
        ("dcgm", "dcgm/r1_json_ok.txt", None, 0, "pass"),
        ("nvidia-smi", "nvidia_smi/csv_8xh100_ok.txt", "h100-sxm", 0, "pass"),
        ("ib", "ib/ibstat_polling_fail.txt", None, 3, "fail"),
        ("firmware", "firmware/redfish_collection_only_error.txt", None, 4, "error"),
    ],
)
def test_check_parse_exit_codes_and_json(kind, fixture, profile, code, status):
    args = ["parse", kind, str(FIXTURES / fixture), "-o", "json"] + (["--profile", profile] if profile else [])
    result = runner.invoke(app, args)
    assert result.exit_code == code, result.output
    data = json.loads(result.stdout)
    assert data["status"] == status and {"status", "metrics", "findings", "reason"} <= set(data)


def test_check_parse_required_metric_keys():
    nccl = json.loads(
        runner.invoke(app, ["parse", "nccl", str(FIXTURES / "nccl/8xh100_full_sweep_ok.txt"), "-o", "json"]).stdout
    )
    assert {"busbw_gbps", "avg_busbw_gbps", "wrong"} <= set(nccl["metrics"])
    hpl = json.loads(
        runner.invoke(app, ["parse", "hpl", str(FIXTURES / "hpl/nvidia_8xh100_ok.txt"), "-o", "json"]).stdout
    )
    assert {"gflops", "gflops_per_gpu", "residual_passed"} <= set(hpl["metrics"])
    xid = json.loads(
        runner.invoke(app, ["parse", "xid", str(FIXTURES / "xid/dmesg_T_xid119_gsp_fail.txt"), "-o", "json"]).stdout
    )
    assert xid["metrics"]["xids"] == [119] and xid["metrics"]["action"] == "reset_gpu"


def test_check_parse_table_output():
    result = runner.invoke(app, ["parse", "ib", str(FIXTURES / "ib/ibstat_h100_ndr_ok.txt")])
    assert result.exit_code == 0 and "pass" in result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["parse", "bogus", "x.txt"], "unknown check kind"),
        (["parse", "nccl", "/nonexistent/out.txt"], "no such file"),
        (
            ["parse", "nccl", str(FIXTURES / "nccl/8xh100_full_sweep_ok.txt"), "--profile", "h900"],
            "unknown GPU profile",
        ),
    ],
)
def test_check_parse_usage_errors(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.stderr and result.stderr.count("\n") == 1


# --- checks limited to a profile, GPU counts from the profile --------------------------------


@pytest.mark.parametrize("profile,applies", [("gb200", True), ("h100-sxm", False), ("b200", False), (None, True)])
def test_imex_judges_only_nodes_of_a_multi_node_nvlink_domain(profile, applies) -> None:
    """An HGX node has no IMEX domain: the check neither runs nor counts there. A node whose
    profile is unknown is not known to lack one: it runs (and judges what the node answers)."""
    from fleetctl.checks import load_profile

    spec = CHECKS["imex"]
    assert (spec.kind, spec.argv) == ("imex", ("nvidia-imex-ctl", "-N"))
    assert spec.applies_to(load_profile(profile) if profile else None) is applies
    # Every other check judges every profile.
    assert all(s.applies_to(load_profile(profile) if profile else None) for s in CHECKS.values() if s is not spec)


@pytest.mark.parametrize("suite", ["quick", "burn-in"])
def test_quick_and_burn_in_list_imex(suite) -> None:
    from fleetctl.checks.suites import load_suite

    assert "imex" in load_suite(suite).checks


@pytest.mark.parametrize("profile,gpus", [("gb200", "4"), ("h100-sxm", "8")])
def test_gpu_counts_come_from_the_profile(profile, gpus) -> None:
    from fleetctl.checks import load_profile

    gpu_profile = load_profile(profile)
    assert CHECKS["nccl-allreduce"].argv_for(gpu_profile)[-2:] == ("-g", gpus)
    assert CHECKS["hpl"].argv_for(gpu_profile) == ("mpirun", "--bind-to", "none", "-np", gpus, "xhpl")
    # A check that names no GPU count runs as the catalog has it.
    assert CHECKS["ib-ports"].argv_for(gpu_profile) == CHECKS["ib-ports"].argv
