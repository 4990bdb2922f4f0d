"""The simulated GB200 NVL72 tray: its NVLink domain as IMEX and nvidia-smi show it, the faults
of the domain and of the GPUs, each judged by the real parser (healthy: pass; faulted: fail
or error, never pass), and tools that refuse more GPUs than the tray has."""

from __future__ import annotations

import os

import pytest
import yaml
from typer.testing import CliRunner

from fleetctl.checks import judge
from fleetctl.checks.result import Status
from fleetctl.cli.main import app as fleetctl_app
from fleetctl.cli.sim import app as sim_app
from fleetctl.db.engine import get_engine
from fleetctl.executors.base import NodeTarget
from fleetctl.sim.executor import SimExecutor
from fleetctl.sim.faults import CURED_BY, SimFaultSpec
from fleetctl.sim.inventory import render_inventory
from fleetctl.sim.store import faults_for
from tests.support.sim_fleet import make_fleet

NOW = 1_750_000_000.0
TRAYS = [f"gpu-{i:03d}" for i in range(1, 19)]  # one rack: one NVL72 domain of 18 trays


def executor(faults: dict[str, list[SimFaultSpec]] | None = None) -> SimExecutor:
    faults = faults or {}
    return SimExecutor(
        lambda name: list(faults.get(name, [])),
        seed=5,
        now=lambda: NOW,
        domain_members=lambda name: TRAYS if name in TRAYS else [],
    )


def run(ex: SimExecutor, node: str, *argv: str, profile: str = "gb200"):
    return ex.run(NodeTarget(node, f"sim://{node}", profile=profile), argv, timeout_s=3600)


def status(ex: SimExecutor, node: str, kind: str, *argv: str, profile: str = "gb200") -> Status:
    result = run(ex, node, *argv, profile=profile)
    return judge(kind, result.stdout + result.stderr, profile).status


def test_sim_inventory_makes_each_gb200_rack_an_nvl72_domain() -> None:
    entries = render_inventory(36, 2, "gb200", seed=1)
    assert {e["nvlink_domain"] for e in entries[:18]} == {"nvl72-rack-01"}
    assert {e["nvlink_domain"] for e in entries[18:]} == {"nvl72-rack-02"}
    assert all("nvlink_domain" not in e for e in render_inventory(4, 1, "h100-sxm", seed=1))
    with pytest.raises(ValueError, match="more than 18 trays"):
        render_inventory(19, 1, "gb200", seed=1)


def test_healthy_domain_lists_every_tray_up() -> None:
    result = run(executor(), "gpu-004", "nvidia-imex-ctl", "-N")
    verdict = judge("imex", result.stdout, "gb200")
    assert verdict.status is Status.PASS, verdict.reason
    assert (verdict.metrics["nodes"], verdict.metrics["ready"], verdict.metrics["domain_state"]) == (18, 18, "UP")
    # Each tray has its own address in the domain's subnet, the same from every tray.
    assert result.stdout == run(executor(), "gpu-011", "nvidia-imex-ctl", "-N").stdout
    assert len({line.split(" - ")[1] for line in result.stdout.splitlines() if line.startswith("Node #")}) == 18


def test_imex_down_on_a_tray_fails_the_domain_seen_from_the_others_and_is_unreadable_on_itself() -> None:
    ex = executor({"gpu-007": [SimFaultSpec("imex-down")]})
    seen = judge("imex", run(ex, "gpu-002", "nvidia-imex-ctl", "-N").stdout, "gb200")
    assert seen.status is Status.FAIL
    assert (seen.metrics["domain_state"], seen.metrics["ready"]) == ("DEGRADED", 17)
    assert any(f.where and "node #6" in f.where and "UNAVAILABLE" in f.what for f in seen.findings)
    own = run(ex, "gpu-007", "nvidia-imex-ctl", "-N")
    assert own.exit_status != 0 and judge("imex", own.stdout + own.stderr, "gb200").status is Status.ERROR
    assert (
        status(
            ex,
            "gpu-007",
            "services",
            "systemctl",
            "show",
            "-p",
            "Id,LoadState,ActiveState,SubState",
            "nvidia-persistenced.service",
            "nvidia-fabricmanager.service",
            "nvidia-imex.service",
        )
        is Status.FAIL
    )


def test_an_unreachable_tray_is_down_to_its_domain() -> None:
    ex = executor({"gpu-018": [SimFaultSpec("unreachable")]})
    assert status(ex, "gpu-001", "imex", "nvidia-imex-ctl", "-N") is Status.FAIL


def test_fabric_section_is_gb200s_and_fabric_unhealthy_fails_it() -> None:
    healthy = run(executor(), "gpu-003", "nvidia-smi", "-q")
    assert "CliqueId" in healthy.stdout and "ClusterUUID" in healthy.stdout
    assert judge("nvidia-smi", healthy.stdout, "gb200").status is Status.PASS
    ex = executor({"gpu-003": [SimFaultSpec("fabric-unhealthy")]})
    verdict = judge("nvidia-smi", run(ex, "gpu-003", "nvidia-smi", "-q").stdout, "gb200")
    assert verdict.status is Status.FAIL
    assert sum("NVLink fabric registration failed: Insufficient Resources" in f.what for f in verdict.findings) == 4
    # The other trays of the domain keep their registration.
    assert judge("nvidia-smi", run(ex, "gpu-004", "nvidia-smi", "-q").stdout, "gb200").status is Status.PASS


def test_gpu_that_never_initialised_is_missing_and_logged() -> None:
    ex = executor({"gpu-001": [SimFaultSpec("gpu-init-failed", gpu=2)]})
    query = judge("nvidia-smi", run(ex, "gpu-001", "nvidia-smi", "-q").stdout, "gb200")
    assert query.status is Status.FAIL and query.metrics["gpu_count"] == 3
    log = judge("xid", run(ex, "gpu-001", "dmesg", "-T").stdout, "gb200")
    assert log.status is Status.FAIL
    assert {"gpu_init_failed", "gsp_boot_failed"} <= set(log.metrics["signatures"])
    # Still on the PCI bus: lspci lists all four GPUs.
    assert run(ex, "gpu-001", "lspci", "-vv").stdout.count("3D controller: NVIDIA") == 4


def test_nvswitch_fatal_sxid_on_hgx_is_xid_scan_failure_with_its_signature() -> None:
    ex = SimExecutor(lambda name: [SimFaultSpec("nvswitch-sxid-fatal")], seed=5, now=lambda: NOW)
    log = judge("xid", run(ex, "gpu-001", "dmesg", "-T", profile="h100-sxm").stdout, "h100-sxm")
    assert log.status is Status.FAIL
    assert "nvswitch_sxid_fatal" in log.metrics["signatures"] and log.metrics["sxids"]
    healthy = SimExecutor(lambda name: [], seed=5, now=lambda: NOW)
    assert (
        judge("xid", run(healthy, "gpu-001", "dmesg", "-T", profile="h100-sxm").stdout, "h100-sxm").status
        is Status.PASS
    )


@pytest.mark.parametrize(
    "fault,cure",
    [("imex-down", "reboot"), ("nvswitch-sxid-fatal", "reboot"), ("gpu-init-failed", None), ("fabric-unhealthy", None)],
)
def test_what_cures_each_fault(fault, cure) -> None:
    assert [repair for repair, kinds in CURED_BY.items() if fault in kinds] == ([cure] if cure else [])


def test_tools_refuse_more_gpus_than_the_tray_has() -> None:
    """A tray has 4 GPUs: an 8-GPU run dies on CUDA's invalid device ordinal, as nccl-tests and
    HPL do on real nodes; the catalog's argv for the tray's profile asks for its 4."""
    ex = executor()
    nccl = run(ex, "gpu-001", "all_reduce_perf", "-b", "8", "-e", "8G", "-f", "2", "-g", "8")
    assert "'invalid device ordinal'" in nccl.stdout and nccl.exit_status != 0
    assert judge("nccl", nccl.stdout, "gb200").status is not Status.PASS
    hpl = run(ex, "gpu-001", "mpirun", "--bind-to", "none", "-np", "8", "xhpl")
    assert "invalid device ordinal" in hpl.stderr and hpl.exit_status != 0
    assert judge("hpl", hpl.stdout + hpl.stderr, "gb200").status is Status.ERROR
    assert status(ex, "gpu-001", "hpl", "mpirun", "--bind-to", "none", "-np", "4", "xhpl") is Status.PASS


def test_sim_fleet_cli_writes_domains_and_refuses_an_overfull_rack_in_one_line() -> None:
    ok = CliRunner().invoke(sim_app, ["fleet", "--nodes", "18", "--racks", "1", "--profile", "gb200"])
    assert ok.exit_code == 0, ok.output
    assert {n["nvlink_domain"] for n in yaml.safe_load(ok.output)["nodes"]} == {"nvl72-rack-01"}
    bad = CliRunner().invoke(sim_app, ["fleet", "--nodes", "36", "--racks", "1", "--profile", "gb200"])
    assert bad.exit_code == 2 and len(bad.output.strip().splitlines()) == 1, bad.output
    assert "use at least 2 racks" in bad.output


@pytest.mark.parametrize(
    "profile,fault,accepted",
    [
        ("gb200", "imex-down", True),
        ("h100-sxm", "imex-down", False),
        ("h100-sxm", "fabric-unhealthy", False),
        ("gb200", "nvswitch-sxid-fatal", False),
        ("h100-sxm", "nvswitch-sxid-fatal", True),
        ("gb200", "fabricmanager-down", False),
        ("h100-sxm", "fabricmanager-down", True),
    ],
)
def test_sim_inject_refuses_a_fault_with_nothing_to_act_on_in_one_line(
    make_settings, sqlite_url, profile, fault, accepted
) -> None:
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1, profile, racks=1)
    result = CliRunner().invoke(
        fleetctl_app, ["--db-url", settings.db_url, "sim", "inject", node, fault], env={"FLEETCTL_CONFIG": os.devnull}
    )
    stored = [f.kind for f in faults_for(get_engine(settings.db_url), node)]
    if accepted:
        assert result.exit_code == 0 and stored == [fault], result.output
    else:
        assert result.exit_code == 2 and stored == [], result.output
        assert len(result.output.strip().splitlines()) == 1 and "has nothing to act on" in result.output


@pytest.mark.parametrize("profile,imex", [("gb200", True), ("h100-sxm", False)])
def test_the_prologs_suite_run_judges_imex_on_trays_only_and_gives_the_tools_the_profiles_gpus(
    make_settings, sqlite_url, profile, imex
) -> None:
    """`fleetctl node prolog --suite standard|quick` runs the suite in its own process: imex
    only where it applies, all-reduce and HPL on the node's GPU count; all pass on healthy nodes."""
    from fleetctl.workflows.activities.prejob import run_prejob_suite

    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1, profile, racks=1)
    for suite in ("quick", "standard"):
        finding = run_prejob_suite(settings, get_engine(settings.db_url), node, suite, f"job-{suite}")
        assert finding.status == "pass", finding
        assert ("imex" in finding.checked) is (imex and suite == "quick")
