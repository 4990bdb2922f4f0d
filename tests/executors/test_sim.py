"""The simulated node: every catalog check judged on its output, faults, time, determinism."""

from __future__ import annotations

import dataclasses
import json
import re
import statistics
from pathlib import Path

import pytest

from fleetctl.checks import judge, load_profile
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.result import Status
from fleetctl.executors.base import CommandResult, CommandTimeout, NodeTarget, NodeUnreachable
from fleetctl.sim.bmc import SimBmc
from fleetctl.sim.executor import SimExecutor
from fleetctl.sim.faults import FAULT_KINDS, SimFaultSpec, active_faults, fault_onset
from fleetctl.sim.inventory import render_inventory
from fleetctl.sim.profiles import SimProfile, _typed, sim_profile, sim_profiles
from fleetctl.workflows.activities.check_plans import run_pairs, run_rails

FIXTURES = Path(__file__).parent.parent / "fixtures" / "sim"
NOW = 1_750_000_000.0
NODE = "gpu-007"

PASS, WARN, FAIL, ERROR = Status.PASS, Status.WARN, Status.FAIL, Status.ERROR
_DCGM_ALL = {"dcgm-r1": {FAIL}, "dcgm-r2": {FAIL}, "dcgm-r3": {FAIL}, "dcgm-r4": {FAIL}}
_SMI_BOTH = {"nvidia-smi-query": {FAIL}, "nvidia-smi-q": {FAIL}}
# The GPU memory faults fail the memory-only judgement of the same query too; a hot GPU or a
# lost one does not (the reset runbook's RMA rests on exactly that difference).
_MEMORY = {"nvidia-smi-memory": {FAIL}}
# DCGM's memory watch (dcgmi health -c) reports the same GPU memory faults.
_HEALTH = {"dcgm-health": {FAIL}}
# What each fault does to the catalog's checks (the statuses the judge may give); every
# check not named must still pass.
FAULT_EFFECTS: dict[str, dict[str, set[Status]]] = {
    # HPL dies before its result table: the judge calls that unjudgeable, not failed.
    "xid79": {
        **_SMI_BOTH,
        **_DCGM_ALL,
        "xid-scan": {FAIL},
        "nccl-allreduce": {FAIL},
        "nccl-pairs": {FAIL},  # its pairs die; its partners together do not: the straggler
        "hpl": {ERROR},
        "firmware-inventory": {FAIL},  # the lost GPU's VBIOS cannot be read
        "pcie-link": {FAIL},  # listed, answering all-ones (rev ff)
        "host-versions": {ERROR},  # nvidia-smi cannot read the lost GPU's driver version
    },
    "xid48": {**_SMI_BOTH, **_MEMORY, **_HEALTH, **_DCGM_ALL, "xid-scan": {FAIL}},
    "row-remap-failure": {**_SMI_BOTH, **_MEMORY, **_HEALTH, **_DCGM_ALL, "xid-scan": {FAIL}},
    # The DBE's row found a spare: pending until the GPU's reset, which clears it (CURED_BY).
    "xid48-remapped": {**_SMI_BOTH, **_MEMORY, **_HEALTH, **_DCGM_ALL, "xid-scan": {FAIL}},
    # Xid 63 is NVIDIA's "ignore" bucket; the pending remap itself fails nvidia-smi and DCGM.
    "row-remap-pending": {**_SMI_BOTH, **_MEMORY, **_HEALTH, **_DCGM_ALL},
    # A straggler: 75-85% of healthy lands between the profile's warn and fail floors.
    "nvlink-degraded": {"nccl-allreduce": {WARN, FAIL}},
    "thermal-throttle": {**_SMI_BOTH, "dcgm-r3": {FAIL}, "dcgm-r4": {FAIL}, "hpl": {FAIL}},
    # Its share of the all-reduce moves to 7 rails: 7/8 of healthy, near the fail floor.
    "ib-port-down": {"ib-ports": {FAIL}, "ib-bw": {FAIL}, "ib-rails": {FAIL}, "nccl-pairs": {WARN, FAIL}},
    # ibstat sees nothing wrong with these two: only every rail's bandwidth and counters do,
    # and the pairs (the slow or retraining rail paces every ring through it).
    "ib-rail-slow": {"ib-rails": {FAIL}, "nccl-pairs": {FAIL}, "pcie-link": {FAIL}},  # its link at x8: lspci sees why
    "ib-link-flap": {"ib-rails": {FAIL}, "nccl-pairs": {FAIL}},
    # Beyond the node's own ports: nothing local sees it, only the pairs.
    "fabric-slow": {"nccl-pairs": {FAIL}},
    # A leaf's uplinks: only a run across leaves crosses them (test_sim_leaf.py); these nodes are on none.
    "leaf-uplink-slow": {},
    # Drift across the whole node is consistent; the roll-out compares with the baseline.
    "firmware-drift": {},
    # The host around the GPUs: each seen by its own check, and by the kernel log where it logs.
    "pcie-downtrained": {"pcie-link": {FAIL}},
    "pcie-aer-fatal": {"pcie-aer": {FAIL}, "xid-scan": {FAIL}},
    "memory-dimm-lost": {"host-memory": {FAIL}},
    "memory-uncorrected": {"host-memory": {FAIL}, "xid-scan": {FAIL}},
    "cpu-offline": {"host-cpu": {FAIL}},
    "disk-full": {"host-disk": {FAIL}},
    # The kernel's own line for the remount ("EXT4-fs (md1): Remounting filesystem read-only") is a
    # critical signature of the log too.
    "fs-readonly": {"host-disk": {FAIL}, "xid-scan": {FAIL}},
    "fabricmanager-down": {"host-services": {FAIL}},
    # NVML and CUDA refuse a driver whose kernel module is not the installed one: every tool
    # that needs the driver fails or cannot be read; host-versions says why.
    "driver-mismatch": {
        **_SMI_BOTH,
        **{c: {ERROR} for c in ("firmware-inventory", "hpl", "nvidia-smi-memory")},
        **{c: {ERROR} for c in (*_DCGM_ALL, "dcgm-health")},
        "nccl-allreduce": {FAIL},
        "nccl-pairs": {FAIL},
        "host-versions": {FAIL},
    },
    "clock-drift": {"host-clock": {FAIL}},
    # A GPU that never initialised: missing from NVML (and so from every tool that needs it),
    # named by the kernel log; HPL's rank past the last GPU dies before a result.
    "gpu-init-failed": {
        **_SMI_BOTH,
        **_DCGM_ALL,
        "xid-scan": {FAIL},
        "nccl-allreduce": {FAIL},
        "nccl-pairs": {FAIL},
        "hpl": {ERROR},
        "firmware-inventory": {FAIL},
    },
    # The baseboard's NVSwitch: the kernel log's fatal SXid, and the all-reduce over NVLink.
    "nvswitch-sxid-fatal": {"xid-scan": {FAIL}, "nccl-allreduce": {FAIL}},
    # Faults of a multi-node NVLink domain: an HGX node has no IMEX and no domain fabric.
    "imex-down": {},
    "fabric-unhealthy": {},
}
# What faults do on a tray of a multi-node NVLink domain (gb200) where it differs: no fabric
# manager nor NVSwitch in the tray; its IMEX daemon and its fabric registration.
DOMAIN_FAULT_EFFECTS: dict[str, dict[str, set[Status]]] = {
    "fabricmanager-down": {},
    "nvswitch-sxid-fatal": {},
    # Its own nvidia-imex-ctl reaches no daemon: unreadable, never a pass.
    "imex-down": {"imex": {ERROR}, "host-services": {FAIL}},
    "fabric-unhealthy": {"nvidia-smi-q": {FAIL}, "nccl-allreduce": {FAIL}},
}


def fault_effects(fault: str, profile: str) -> dict[str, set[Status]]:
    if load_profile(profile).nvlink_domain_gpus and fault in DOMAIN_FAULT_EFFECTS:
        return DOMAIN_FAULT_EFFECTS[fault]
    return FAULT_EFFECTS[fault]


# The GPU (HCA for ib-port-down) each fault hits in that table: mlx5_0 is the port the
# ib-bw check loops back through; None drifts every component.
FAULT_GPU = {"ib-port-down": 0, "firmware-drift": None}  # ib-rail-slow and ib-link-flap: HCA 3, not mlx5_0


def target(profile: str = "h100-sxm", name: str = NODE) -> NodeTarget:
    return NodeTarget(name, f"sim://{name}", profile=profile)


def executor(faults: list[SimFaultSpec] | None = None, **kwargs) -> SimExecutor:
    kwargs.setdefault("now", lambda: NOW)
    return SimExecutor(lambda name: list(faults or []) if name == NODE else [], seed=11, **kwargs)


def judged(result: CommandResult, kind: str, profile: str) -> Status:
    # Tools report failures on stderr (perftest's "Couldn't ..."); judge what an operator sees.
    return judge(kind, result.stdout + result.stderr, profile).status


PARTNERS = ["gpu-008", "gpu-009"]  # healthy: the executors here give faults to NODE only


def run_check(ex: SimExecutor, check: str, profile: str = "h100-sxm", name: str = NODE) -> CommandResult:
    """What the worker runs for the check: its argv, or its plan's commands."""
    spec = CHECKS[check]

    def run_on(node: str, argv) -> CommandResult:
        return ex.run(target(profile, node), argv, timeout_s=3600)

    if spec.plan == "bmc":  # read from the node's BMC, not run on the node (the worker's _read_bmc)
        return CommandResult(spec.argv, 0, SimBmc(None, name).health_report(spec.argv[1]), "", 0.0)
    if spec.plan == "rails":
        return run_rails(lambda argv: run_on(name, argv), spec, load_profile(profile))
    if spec.plan == "pairs":
        return run_pairs(run_on, spec, name, PARTNERS, load_profile(profile).gpu_count)
    return run_on(name, spec.argv_for(load_profile(profile)))


def checks_for(profile: str) -> dict:
    """The catalog's checks that judge a node of `profile` (the worker runs no other)."""
    return {name: spec for name, spec in CHECKS.items() if spec.applies_to(load_profile(profile))}


def busbw_at_largest_size(text: str) -> float:
    rows = [line.split() for line in text.splitlines() if re.match(r"\s*\d+\s+\d+\s+float", line)]
    return float(rows[-1][7])  # out-of-place busbw


# --- every check, every profile, every fault -----------------------------------------------


@pytest.mark.parametrize("profile", sorted(sim_profiles()))
def test_healthy_node_passes_every_check(profile: str) -> None:
    ex = executor()
    for name, spec in checks_for(profile).items():
        result = run_check(ex, name, profile)
        verdict = judge(spec.kind, result.stdout, profile)
        assert verdict.status is PASS, f"{name}: {verdict.reason}"
        assert result.exit_status == 0, name


@pytest.mark.parametrize("profile", sorted(sim_profiles()))
@pytest.mark.parametrize("fault", sorted(FAULT_EFFECTS))
def test_fault_affects_its_checks_and_no_others(fault: str, profile: str) -> None:
    ex = executor([SimFaultSpec(fault, gpu=FAULT_GPU.get(fault, 3))])
    unexpected = {}
    for name, spec in checks_for(profile).items():
        status = judged(run_check(ex, name, profile), spec.kind, profile)
        if status not in fault_effects(fault, profile).get(name, {PASS}):
            unexpected[name] = status
    assert unexpected == {}


def test_fault_kinds_all_have_a_test() -> None:
    assert set(FAULT_EFFECTS) | {"flaky", "unreachable"} == set(FAULT_KINDS)


@pytest.mark.parametrize("profile", sorted(sim_profiles()))
def test_nvlink_degraded_node_is_a_straggler_at_75_to_85_percent(profile: str) -> None:
    healthy = busbw_at_largest_size(run_check(executor(), "nccl-allreduce", profile).stdout)
    for seed in range(5):
        degraded_run = run_check(executor([SimFaultSpec("nvlink-degraded", seed=seed)]), "nccl-allreduce", profile)
        ratio = busbw_at_largest_size(degraded_run.stdout) / healthy
        assert 0.73 < ratio < 0.87, ratio  # 75-85% of the node's own healthy value, plus jitter


def test_xid79_hides_the_gpu_from_nvidia_smi() -> None:
    result = run_check(executor([SimFaultSpec("xid79", gpu=2)]), "nvidia-smi-query")
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Unable to determine the device handle for GPU0000:") and lines[0].endswith(
        ": Unknown Error"
    )
    assert [line.split(",")[0] for line in lines[2:]] == ["0", "1", "3", "4", "5", "6", "7"]
    assert result.exit_status != 0


def test_thermal_throttle_on_one_gpu_reports_hw_thermal_slowdown() -> None:
    text = run_check(executor([SimFaultSpec("thermal-throttle", gpu=5)]), "nvidia-smi-q").stdout
    blocks = text.split("\nGPU 0000")[1:]
    assert "HW Thermal Slowdown           : Active" in blocks[5]
    assert all("HW Thermal Slowdown           : Not Active" in b for i, b in enumerate(blocks) if i != 5)


def test_firmware_drift_shows_older_vbios_and_connectx_versions() -> None:
    profile = sim_profile("h100-sxm")
    ex = executor([SimFaultSpec("firmware-drift")])
    vbios = run_check(ex, "firmware-inventory").stdout
    nic = run_check(ex, "nic-firmware").stdout
    assert profile.drifted_vbios_version in vbios and profile.vbios_version not in vbios
    assert profile.hca.drifted_firmware in nic and profile.hca.firmware not in nic
    # One drifted GPU is visible to the judge as a mixed node.
    one = executor([SimFaultSpec("firmware-drift", gpu=4)])
    assert judged(run_check(one, "firmware-inventory"), "firmware", "h100-sxm") is WARN


def test_unreachable_node_raises_for_every_command() -> None:
    ex = executor([SimFaultSpec("unreachable")])
    for spec in CHECKS.values():
        with pytest.raises(NodeUnreachable) as caught:
            ex.run(target(), spec.argv, timeout_s=60)
        assert caught.value.node == NODE and caught.value.kind == "unreachable"


def test_flaky_node_fails_stress_tests_intermittently_and_deterministically() -> None:
    def outcomes() -> list[Status]:
        ex = executor([SimFaultSpec("flaky", seed=3)])
        return [judged(run_check(ex, "nccl-allreduce"), "nccl", "h100-sxm") for _ in range(16)]

    first = outcomes()
    assert set(first) == {PASS, FAIL}
    assert outcomes() == first
    ex = executor([SimFaultSpec("flaky", seed=3)])
    hpl = [judged(run_check(ex, "hpl"), "hpl", "h100-sxm") for _ in range(16)]
    assert set(hpl) == {PASS, FAIL}
    # Read-only queries are not stress runs: they stay clean.
    assert all(judged(run_check(ex, "nvidia-smi-query"), "nvidia-smi", "h100-sxm") is PASS for _ in range(8))


# --- faults over time ----------------------------------------------------------------------


def test_unknown_fault_kind_names_the_valid_ones() -> None:
    with pytest.raises(ValueError) as caught:
        SimFaultSpec("xid999")
    assert all(kind in str(caught.value) for kind in FAULT_KINDS)


def test_fault_appears_at_not_before() -> None:
    clock = [NOW]
    ex = executor([SimFaultSpec("xid48", gpu=1, not_before=NOW + 30)], now=lambda: clock[0])
    assert judged(run_check(ex, "nvidia-smi-query"), "nvidia-smi", "h100-sxm") is PASS
    clock[0] = NOW + 29.9
    assert judged(run_check(ex, "nvidia-smi-query"), "nvidia-smi", "h100-sxm") is PASS
    clock[0] = NOW + 30
    assert judged(run_check(ex, "nvidia-smi-query"), "nvidia-smi", "h100-sxm") is FAIL
    # The kernel log line carries the time the fault appeared.
    assert "] NVRM: Xid (PCI:0000:" in run_check(ex, "xid-scan").stdout


def test_rate_fault_appears_at_its_seeded_time() -> None:
    spec = SimFaultSpec("thermal-throttle", not_before=NOW, rate_per_hour=2.0, seed=5)
    onset = fault_onset(spec)
    assert onset > NOW
    assert active_faults([spec], onset - 0.001) == []
    assert active_faults([spec], onset) == [spec]
    assert fault_onset(SimFaultSpec("thermal-throttle", not_before=NOW, rate_per_hour=2.0, seed=5)) == onset
    # Exponential waiting times: the mean over many seeds is 1/rate.
    waits = [fault_onset(SimFaultSpec("xid79", rate_per_hour=2.0, seed=s)) for s in range(4000)]
    assert statistics.mean(waits) == pytest.approx(1800, rel=0.08)


def test_active_faults_keeps_those_due() -> None:
    due, later = SimFaultSpec("xid79", not_before=10.0), SimFaultSpec("flaky", not_before=20.0)
    assert active_faults([due, later], 15.0) == [due]
    assert active_faults([due, later], 20.0) == [due, later]


# --- determinism ---------------------------------------------------------------------------


def test_same_seed_same_output_and_nodes_differ() -> None:
    first, second = executor(), executor()
    for name in CHECKS:
        assert run_check(first, name).stdout == run_check(second, name).stdout, name
    mine = run_check(executor(), "nvidia-smi-query").stdout
    other = run_check(executor(), "nvidia-smi-query", name="gpu-008").stdout
    serials = lambda text: {line.split(", ")[3] for line in text.splitlines()[1:]}  # noqa: E731
    uuids = lambda text: {line.split(", ")[2] for line in text.splitlines()[1:]}  # noqa: E731
    assert len(serials(mine)) == 8 and serials(mine).isdisjoint(serials(other))
    assert uuids(mine).isdisjoint(uuids(other))
    reseeded = SimExecutor(lambda name: [], seed=12, now=lambda: NOW)
    assert serials(run_check(reseeded, "nvidia-smi-query").stdout).isdisjoint(serials(mine))


def test_repeated_runs_jitter_bandwidth_slightly() -> None:
    ex = executor()
    values = [busbw_at_largest_size(run_check(ex, "nccl-allreduce").stdout) for _ in range(4)]
    assert len(set(values)) > 1
    assert max(values) / min(values) < 1.03


# --- time ----------------------------------------------------------------------------------


def test_time_scale_scales_the_real_duration() -> None:
    slept: list[float] = []
    ex = executor(time_scale=0.01, sleep=slept.append)
    result = run_check(ex, "dcgm-r3")
    assert slept == [pytest.approx(9.0)]  # dcgmi diag -r 3 takes 900 s on a real node
    assert result.duration_s == pytest.approx(9.0)
    hpl = run_check(ex, "hpl")
    assert 0.5 < hpl.duration_s < 2.0  # ~40 s setup + the solve, scaled by 1/100
    instant = executor(sleep=slept.append)
    assert run_check(instant, "dcgm-r3").duration_s == 0.0


def test_run_longer_than_timeout_raises_after_the_timeout() -> None:
    slept: list[float] = []
    ex = executor(time_scale=1.0, sleep=slept.append)
    with pytest.raises(CommandTimeout):
        ex.run(target(), CHECKS["hpl"].argv, timeout_s=30)
    assert slept == [30]


# --- formats -------------------------------------------------------------------------------


def test_query_gpu_renders_exactly_the_requested_fields_in_order() -> None:
    ex = executor()
    argv = ["nvidia-smi", "--query-gpu=power.draw,gpu_name,index", "--format=csv"]
    lines = ex.run(target(), argv, 10).stdout.splitlines()
    assert lines[0] == "power.draw [W], name, index"
    assert re.fullmatch(r"\d+\.\d\d W, NVIDIA H100 80GB HBM3, 0", lines[1])
    bare = ex.run(
        target(), ["nvidia-smi", "--query-gpu=power.draw,index", "--format=csv,noheader,nounits", "-i", "3"], 10
    )
    assert re.fullmatch(r"\d+\.\d\d, 3\n", bare.stdout)
    unknown = ex.run(target(), ["nvidia-smi", "--query-gpu=index,bogus", "--format=csv"], 10)
    assert unknown.exit_status != 0 and '"bogus"' in unknown.stdout


def test_nccl_layout_matches_the_real_tool_and_sweeps_its_flags() -> None:
    real = (FIXTURES / "nccl_allreduce_8xh100_real.txt").read_text().splitlines()
    argv = ["/opt/nccl-tests/build/all_reduce_perf", "-b", "128M", "-e", "4G", "-f", "2", "-g", "8", "-n", "2"]
    text = executor().run(target(), argv, 600).stdout
    lines = text.splitlines()
    assert lines[0] == real[0]  # the parameter line
    column_headers = [line for line in real if line.startswith(("#   ", "#       "))]
    assert column_headers and all(header in lines for header in column_headers)
    rows = [line for line in lines if not line.startswith("#")]
    assert [int(row.split()[0]) for row in rows] == [2**k for k in range(27, 33)]
    assert all(
        len(row) == len(real_row)
        for row, real_row in zip(rows, [r for r in real if not r.startswith("#")], strict=False)
    )
    assert lines[-3] == "# Out of bounds values : 0 OK" and lines[-2].startswith("# Avg bus bandwidth    : ")


def test_dcgmi_text_table_matches_the_real_layout() -> None:
    real = (FIXTURES / "dcgmi_diag_r2_real.txt").read_text().splitlines()
    text = executor().run(target("a100-sxm-80gb"), ["dcgmi", "diag", "-r", "2"], 600).stdout
    lines = text.splitlines()
    assert all(len(line) == 78 for line in lines[1:])
    structure = [line for line in real if not line.startswith("| ") or line.startswith("| Diagnostic ")]
    assert [line for line in lines if not line.startswith("| ") or line.startswith("| Diagnostic ")] == structure
    assert judge("dcgm", text, "a100-sxm-80gb").status is PASS
    for level in ("1", "3", "4"):
        table = executor().run(target(), ["dcgmi", "diag", "-r", level], 6000).stdout
        assert judge("dcgm", table, "h100-sxm").status is PASS, level
    failing = (
        executor([SimFaultSpec("thermal-throttle", gpu=0)]).run(target(), ["dcgmi", "diag", "-r", "3"], 6000).stdout
    )
    assert "| Targeted Stress           | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |" in failing
    assert judge("dcgm", failing, "h100-sxm").status is FAIL


def test_dcgmi_json_lists_each_gpu_of_plugin_tests() -> None:
    text = executor([SimFaultSpec("thermal-throttle", gpu=6)]).run(target(), CHECKS["dcgm-r3"].argv, 6000).stdout
    document = json.loads(text)["DCGM GPU Diagnostic"]
    stress = next(c for c in document["test_categories"] if c["category"] == "Stress")
    power = next(t for t in stress["tests"] if t["name"] == "Targeted Power")
    assert [(r["gpu_ids"], r["status"]) for r in power["results"]] == [
        (i, "FAIL" if i == 6 else "PASS") for i in range(8)
    ]


def test_hpl_result_block_matches_the_real_layout_and_the_rank_count() -> None:
    real = (FIXTURES / "hpl_8gpu_real.txt").read_text().splitlines()
    text = executor().run(target(), ["mpirun", "--allow-run-as-root", "-np", "4", "./xhpl"], 600).stdout
    lines = text.splitlines()
    assert real[1] in lines and real[2] in lines  # column header and rule
    row = lines[lines.index(real[1]) + 2]
    assert len(row) == len(real[3])
    assert row.split()[3:5] == ["2", "2"]  # P x Q for 4 ranks
    assert judge("hpl", text, "h100-sxm").status is PASS


def test_kernel_log_formats() -> None:
    ex = executor([SimFaultSpec("xid79", gpu=0, not_before=NOW - 3600)])
    journal = ex.run(target(), ["journalctl", "-k", "--no-pager"], 10).stdout
    assert re.search(
        rf"^\w{{3}} \d\d \d\d:\d\d:\d\d {NODE} kernel: NVRM: Xid \(PCI:0000:[0-9a-f]{{2}}:00\): 79, ", journal, re.M
    )
    plain = ex.run(target(), ["dmesg"], 10).stdout
    assert re.search(r"^\[ *\d+\.\d{6}\] NVRM: Xid", plain, re.M)
    for text in (journal, plain):
        assert judge("xid", text, "h100-sxm").status is FAIL


def test_other_firmware_and_ib_tools() -> None:
    ex = executor([SimFaultSpec("firmware-drift", gpu=2)])
    flint = ex.run(target(), ["flint", "-d", "mlx5_2", "query"], 10)
    assert re.search(r"^FW Version:            28\.39\.1002$", flint.stdout, re.M)
    assert ex.run(target(), ["flint", "-d", "mlx5_99", "query"], 10).exit_status != 0
    shown = ex.run(target(), ["nvfwupd.py", "-t", "ip=10.0.0.1", "show_version", "-j"], 30).stdout
    devices = {d["AP Name"]: d["Sys Version"] for d in json.loads(shown)["Firmware Devices"]}
    assert devices["HGX_FW_GPU_SXM_3"] == sim_profile("h100-sxm").drifted_vbios_version
    assert devices["HGX_FW_GPU_SXM_1"] == sim_profile("h100-sxm").vbios_version
    table = ex.run(target(), ["nvfwupd", "show_version", "-p", "pkg.fwpkg"], 30).stdout
    assert judge("firmware", table, "h100-sxm").status is WARN  # runs older than the package
    rail_5_down = executor([SimFaultSpec("ib-port-down", gpu=5)])
    one_port = rail_5_down.run(target(), ["ibstat", "mlx5_5"], 10).stdout
    assert one_port.startswith("CA 'mlx5_5'\n") and "\t\tState: Down\n\t\tPhysical state: Polling\n" in one_port
    assert judged(run_check(rail_5_down, "ib-bw"), "ib", "h100-sxm") is PASS  # it loops through mlx5_0


def test_shell_scripts_and_unknown_commands() -> None:
    ex = executor()
    script = executor().run(target(), ["sh", "-c", "ibstat >/dev/null && hostname; nosuchtool || hostname"], 10)
    assert script.stdout == f"{NODE}\n{NODE}\n" and "nosuchtool" in script.stderr
    assert ex.run(target(), ["nosuchtool"], 10).exit_status == 127
    assert ex.run(target(), ["sh", "-c", "dmesg | grep Xid"], 10).exit_status != 0  # pipes are not simulated


def test_target_must_be_a_sim_address() -> None:
    with pytest.raises(ValueError):
        executor().run(NodeTarget(NODE, "10.0.0.7", profile="h100-sxm"), ["hostname"], 10)


@pytest.mark.parametrize("profile", [None, "h999"])
def test_target_needs_a_known_profile(profile: str | None) -> None:
    """No profile is assumed: a node without one (or with one the simulator lacks) is refused."""
    with pytest.raises(ValueError, match="profile"):
        executor().run(NodeTarget(NODE, f"sim://{NODE}", profile=profile), ["hostname"], 10)


# --- inventory -----------------------------------------------------------------------------


def test_render_inventory() -> None:
    nodes = render_inventory(10, 3, "h200-sxm", seed=4)
    assert [n["name"] for n in nodes[:2]] == ["gpu-001", "gpu-002"]
    assert nodes[0] == {
        "name": "gpu-001",
        "address": "sim://gpu-001",
        "bmc": "sim://gpu-001-bmc",
        "rack": "rack-01",
        "profile": "h200-sxm",
        "scheduler": "sim",
        "labels": {"rack": "rack-01", "sim-seed": "4"},
    }
    racks = [n["rack"] for n in nodes]
    assert sorted(set(racks)) == ["rack-01", "rack-02", "rack-03"] and racks == sorted(racks)
    assert render_inventory(2, 1, "b200", seed=0, name_prefix="dgx")[1]["address"] == "sim://dgx-002"
    with pytest.raises(ValueError):
        render_inventory(4, 1, "h900", seed=0)
    with pytest.raises(ValueError):
        render_inventory(2, 3, "b200", seed=0)


def test_render_inventory_with_islands_is_an_inventory_with_a_tree() -> None:
    import yaml

    from fleetctl.inventory.parse import parse_inventory
    from fleetctl.inventory.topology import slurm_topology_conf

    specs = parse_inventory(yaml.safe_dump({"nodes": render_inventory(7, 3, "h100-sxm", seed=0, islands=2)}))
    assert [(s.rack, s.position, s.switch, s.island) for s in specs] == [
        ("rack-01", 1, "leaf-01", "ib-01"),
        ("rack-01", 2, "leaf-01", "ib-01"),
        ("rack-01", 3, "leaf-01", "ib-01"),
        ("rack-02", 1, "leaf-02", "ib-01"),
        ("rack-02", 2, "leaf-02", "ib-01"),
        ("rack-03", 1, "leaf-03", "ib-02"),
        ("rack-03", 2, "leaf-03", "ib-02"),
    ]
    assert slurm_topology_conf(specs).splitlines()[-1] == "SwitchName=spine Switches=ib-[01-02]"
    assert "switch" not in render_inventory(7, 3, "h100-sxm", seed=0)[0]  # no islands asked: no topology
    with pytest.raises(ValueError, match="4 islands for 3 racks"):
        render_inventory(7, 3, "h100-sxm", seed=0, islands=4)


# --- profile data ----------------------------------------------------------------------------


def test_profiles_load_from_the_package_data() -> None:
    profiles = sim_profiles()
    assert set(profiles) == {"a100-sxm-80gb", "b200", "gb200", "h100-sxm", "h200-sxm"}
    assert (profiles["gb200"].gpu_count, profiles["gb200"].cpu_architecture) == (4, "aarch64")
    h100 = profiles["h100-sxm"]
    assert (h100.pci_device_id, h100.power_limit_w, h100.cuda_version) == (0x2330, 700.0, "12.4")
    assert isinstance(h100.power_limit_w, float) and h100.hca.device_type == "ConnectX7"
    assert profiles["a100-sxm-80gb"].gpu_bus_layouts[0][:2] == (0x07, 0x0F)


def _h100_raw() -> dict:
    h100 = sim_profile("h100-sxm")
    skip = ("name", "hca", "gpu_bus_layouts")
    return {f.name: getattr(h100, f.name) for f in dataclasses.fields(h100) if f.name not in skip}


def _typed_h100(raw: dict):
    h100 = sim_profile("h100-sxm")
    return _typed(SimProfile, "h100-sxm.yaml", raw, name="h100-sxm", hca=h100.hca, gpu_bus_layouts=h100.gpu_bus_layouts)


def test_an_int_where_a_float_is_due_reads_as_that_float() -> None:
    assert _typed_h100({**_h100_raw(), "power_limit_w": 700}) == sim_profile("h100-sxm")


@pytest.mark.parametrize(
    "change, problem",
    [
        ({"power_limit_w": "700 W"}, "power_limit_w must be float"),
        ({"gpu_count": 8.0}, "gpu_count must be int"),
        ({"cuda_version": 12.4}, "cuda_version must be str"),
        ({"gpu_count": True}, "gpu_count must be int"),
        ({"gpu_name": None}, "gpu_name must be str"),
        ({"watts": 1}, "unknown \\['watts'\\]"),
    ],
)
def test_profile_values_are_checked_against_their_types(change: dict, problem: str) -> None:
    """One float read as an int already changes what nvidia-smi prints: nothing is coerced but int -> float."""
    with pytest.raises(ValueError, match=problem):
        _typed_h100({**_h100_raw(), **change})


def test_a_profile_missing_a_value_is_refused() -> None:
    raw = _h100_raw()
    del raw["gpu_count"]
    with pytest.raises(ValueError, match="missing \\['gpu_count'\\]"):
        _typed_h100(raw)


@pytest.mark.parametrize("profile", sorted(sim_profiles()))
def test_ibv_devinfo_is_judged_like_ibstat_and_plain_ibv_devinfo_is_no_evidence(profile: str) -> None:
    """ibv_devinfo -v answers as ibstat does (a down port fails); plain ibv_devinfo prints no
    physical state nor speed, as the real one: unreadable, never a pass."""
    healthy, down = executor(), executor([SimFaultSpec("ib-port-down", gpu=1)])
    assert judged(healthy.run(target(profile), ("ibv_devinfo", "-v"), 60), "ib", profile) is PASS
    assert judged(down.run(target(profile), ("ibv_devinfo", "-v"), 60), "ib", profile) is FAIL
    assert judged(healthy.run(target(profile), ("ibv_devinfo",), 60), "ib", profile) is ERROR
    # The same ports, states and rates as ibstat's.
    devinfo = judge("ib", down.run(target(profile), ("ibv_devinfo", "-v"), 60).stdout, profile)
    ibstat = judge("ib", down.run(target(profile), ("ibstat",), 60).stdout, profile)
    assert (devinfo.status, devinfo.reason) == (ibstat.status, ibstat.reason)


def test_a_gpu_reset_by_bus_id_clears_a_pending_remap_and_never_a_failed_one() -> None:
    """nvidia-smi -i takes the GPU's PCI bus id (nvidia-smi(1)); the reset of that GPU cures the
    faults a real reset cures (the pending row remap of a DBE), never the remap that failed."""
    for kind, cured in (("xid48-remapped", ["xid48-remapped"]), ("xid48", [])):
        faults = [SimFaultSpec(kind, gpu=4)]
        seen: list[frozenset[str]] = []
        ex = executor(faults, cure=lambda name, kinds, seen=seen: seen.append(kinds))
        (line,) = [
            row
            for row in ex.run(
                target(), ["nvidia-smi", "--query-gpu=index,pci.bus_id", "--format=csv,noheader"], 60
            ).stdout.splitlines()
            if row.startswith("4,")
        ]
        bus = line.split(", ")[1]
        one = ex.run(target(), ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader", "-i", bus.lower()[4:]], 60)
        assert one.stdout == "4\n"
        reset = ex.run(target(), ["nvidia-smi", "-r", "-i", bus], 60)
        assert reset.exit_status == 0 and reset.stdout == f"GPU {bus} was successfully reset.\nAll done.\n"
        assert sorted({f.kind for f in faults} & seen[0]) == cured
    wrong = executor().run(target(), ["nvidia-smi", "-r", "-i", "0000:07:00"], 60)
    assert wrong.exit_status != 0 and "No devices were found matching '0000:07:00'" in wrong.stdout + wrong.stderr


def test_a_healthy_fleet_draws_no_hpl_straggler() -> None:
    """The peer rule drains a node well below its peers; a healthy node's own draw (its
    slowest GPU, then the run's spread) never puts it there. 1,500 fleets of eight: uncut,
    about five of them held one."""
    import random

    from fleetctl.checks.stragglers import find_stragglers
    from fleetctl.sim.node import HPL_RUN_SPREAD, build_node_state, healthy_spread
    from fleetctl.sim.profiles import sim_profiles

    profile = sim_profiles()["h200-sxm"]
    names = random.Random(0)
    flagged = []
    for fleet in range(1_500):
        hpl = {}
        for i in range(8):
            name = f"s{names.getrandbits(24):06x}-{i:03d}"
            slowest = min(g.hpl_gflops for g in build_node_state(name, profile, 1, [], 1.75e9).gpus)
            hpl[name] = slowest * healthy_spread(random.Random(name), HPL_RUN_SPREAD)
        flagged += [(fleet, v.reason) for v in find_stragglers(hpl).values() if v.straggler]
    assert flagged == []
