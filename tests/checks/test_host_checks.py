"""The host around the GPUs (checks/host.py): at least six areas in the catalog and in the quick
and burn-in suites, each judged against the profile, none passing output it cannot read, and
held-out real outputs (never used to write a parser) judged without a false pass."""

from __future__ import annotations

import shutil

import pytest

from fleetctl.checks import Status, judge
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.suites import load_suite
from tests.support.fixtures import FIXTURES, fixture_text

H100, A100 = "h100-sxm", "a100-sxm-80gb"
HOST_KINDS = {"pcie", "pcie-aer", "memory", "cpu", "disk", "services", "versions", "clock"}
# The areas the kinds cover: PCIe (links and their error counters), memory, CPUs, disks,
# daemons, versions, clock.
AREAS = {
    "pcie": "pcie",
    "pcie-aer": "pcie",
    "memory": "memory",
    "cpu": "cpu",
    "disk": "disk",
    "services": "services",
    "versions": "versions",
    "clock": "clock",
}


def test_at_least_six_host_areas_are_in_the_catalog_and_run_in_quick_and_burn_in():
    host_checks = [name for name, spec in CHECKS.items() if spec.kind in HOST_KINDS]
    assert len({AREAS[CHECKS[c].kind] for c in host_checks}) >= 6
    for suite in ("quick", "burn-in"):
        assert set(host_checks) <= set(load_suite(suite).checks), suite


@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site profile that requires /lustre and pins the fleet's driver and kernel."""
    directory = tmp_path / "profiles"
    shutil.copytree(FIXTURES / "site_profiles", directory)
    monkeypatch.setenv("FLEETCTL_PROFILES_DIR", str(directory))
    return "h100-roce-1x400"


def test_a_required_mount_missing_fails_against_the_site_profile_that_requires_it(site):
    assert judge("disk", fixture_text("host/disk_dgx_lustre_ok.txt"), site).status is Status.PASS
    result = judge("disk", fixture_text("host/disk_lustre_missing_fail.txt"), site)
    assert result.status is Status.FAIL and [(f.where, f.what) for f in result.findings] == [
        ("/lustre", "required filesystem not mounted")
    ]


def test_driver_and_kernel_are_held_to_the_fleet_baseline_of_the_profile(site):
    assert judge("versions", fixture_text("host/versions_550_ok.txt"), site).status is Status.PASS
    result = judge("versions", fixture_text("host/versions_off_baseline_kernel_warn.txt"), site)
    assert result.status is Status.WARN and "kernel 5.15.0-124-generic is not the fleet's" in result.reason
    # the packaged profile has no baseline, and says so rather than vouching for one
    assert "no fleet baseline" in judge("versions", fixture_text("host/versions_550_ok.txt"), H100).reason


def test_the_cpu_count_is_a_site_override_and_none_offline_the_rule(site):
    text = fixture_text("host/lscpu_epyc8434p_96_online_ok.txt")
    assert judge("cpu", text, "h100-sxm").status is Status.PASS  # the packaged profile counts none
    result = judge("cpu", text, site)  # the site's profile requires its 224
    assert result.status is Status.FAIL and "96 CPUs online, h100-roce-1x400 has 224" in result.reason
    # Fewer online than the kernel counts, with no Off-line line to say which: still offline.
    short = text.replace("On-line CPU(s) list: 0-95", "On-line CPU(s) list: 0-93")
    result = judge("cpu", short, "h100-sxm")
    assert result.status is Status.FAIL and "94 of 96 CPUs online" in result.reason


def test_the_other_forms_name_the_form_the_check_needs_and_never_pass():
    lspci = fixture_text("host/lspci_nn_8xa100_no_link_status_error.txt")
    assert "lspci -vv" in judge("pcie", lspci, "a100-sxm-80gb").reason
    # lspci (no -vv) still counts the GPUs on the bus: a board short of one fails.
    seven = "\n".join(line for line in lspci.splitlines() if not line.startswith("000e:00:00.0")) + "\n"
    result = judge("pcie", seven, "a100-sxm-80gb")
    assert result.status is Status.FAIL and "7 GPUs on the PCI bus" in result.reason
    df_h = fixture_text("host/df_h_azure_hpc_no_fault_error.txt")
    assert "df -P, df -Pi" in judge("disk", df_h, "h100-sxm").reason
    # A warning is a fault it shows too: / at 88% (warn 85, fail 95).
    assert judge("disk", df_h.replace("66% /", "88% /"), "h100-sxm").status is Status.WARN
    # Snap images (loop devices) are full by design: never judged.
    loop = df_h + "/dev/loop0                92M   92M     0 100% /snap/core/8689\n"
    assert judge("disk", loop, "h100-sxm").status is Status.ERROR


def test_a_unit_the_status_does_not_show_is_not_a_fault():
    text = fixture_text("host/services_status_fabricmanager_failed_fail.txt")
    only_persistenced = text[: text.index("\u00d7 nvidia-fabricmanager")]
    # nvidia-fabricmanager is required on h100-sxm but was not asked about: no evidence, refused.
    assert judge("services", only_persistenced, "h100-sxm").status is Status.ERROR
    missing = "Unit nvidia-fabricmanager.service could not be found.\n"
    result = judge("services", only_persistenced + missing, "h100-sxm")
    assert result.status is Status.FAIL and "not-found" in result.reason


def test_a_downtrained_gpu_fails_and_an_idle_gpus_lower_speed_does_not():
    narrow = judge("pcie", fixture_text("host/lspci_vv_8xh100_gpu_x8_fail.txt"), H100)
    assert narrow.metrics["narrow_links"] == ["3a:00.0"]
    idle = judge("pcie", fixture_text("host/lspci_vv_idle_gpu_gen1_ok.txt"))
    assert idle.status is Status.PASS and [f.severity for f in idle.findings] == ["info"]


def test_required_services_come_from_the_profile():
    text = fixture_text("host/services_fabricmanager_failed_fail.txt")
    result = judge("services", text, H100)
    assert [(f.where, f.severity) for f in result.findings] == [
        ("nvidia-fabricmanager", "fail"),
        ("nvidia-imex", "info"),
    ]


# Held out: real outputs, each from its cited source, that no fixture or pattern was written from.
HELD_OUT = [
    # a Jetson Nano's lscpu with two of four CPUs offline (public CUDA notes on GitHub)
    ("cpu", None, "CPU(s):               4\nOn-line CPU(s) list:  0,1\nOff-line CPU(s) list: 2,3\n", Status.FAIL),
    # lscpu of a container host limited to 12 CPUs (RoseLab docs on GitHub): 44 offline
    (
        "cpu",
        None,
        "CPU(s):                  56\n  On-line CPU(s) list:   4,6,11,13,18,19,23,29,34,38,41,42\n"
        "  Off-line CPU(s) list:  0-3,5,7-10,12,14-17,20-22,24-28,30-33,35-37,39,40,43-55\n",
        Status.FAIL,
    ),
    # the cloud-hypervisor docs' `lscpu | grep list:`: no CPU(s) line, so nothing to count against
    ("cpu", None, "On-line CPU(s) list:             0-3\nOff-line CPU(s) list:            4-7\n", Status.ERROR),
    # an nagios-style ntp-offset plugin's documented chronyc output (107.969 us slow)
    (
        "clock",
        H100,
        "Reference ID    : 54104921 (tick.ntp.infomaniak.ch)\nStratum         : 2\n"
        "Ref time (UTC)  : Thu Jul 14 11:58:14 2022\nSystem time     : 0.000107969 seconds slow of NTP time\n"
        "Last offset     : +0.000050926 seconds\nLeap status     : Normal\n",
        Status.PASS,
    ),
    # a tutorial's "expected output" with its keys lower-cased: not chronyc's own text
    (
        "clock",
        H100,
        "reference id : 91F20D03 (ntp.ubuntu.com)\nstratum : 2\n"
        "system time : 0.000234567 seconds slow of NTP time\nleap status : Normal\n",
        Status.ERROR,
    ),
    # syslog of a host with thousands of corrected errors per DIMM (public ops notes on GitHub)
    (
        "xid",
        None,
        "Nov  3 17:40:22 dct-liberty-ctldb-001 kernel: EDAC MC0: 29589 CE memory read error on "
        "CPU_SrcID#0_Ha#0_Chan#0_DIMM#1 (channel:0 slot:1 page:0x17374e offset:0x0 grain:32 syndrome:0x0 -  "
        "OVERFLOW area:DRAM err_code:0001:0090 socket:0 ha:0 channel_mask:1 rank:4)\n",
        Status.WARN,
    ),
    # a laptop's thermald bug report: package throttling
    (
        "xid",
        None,
        "Oct 14 22:30:59 p5520 kernel: [ 9481.033687] CPU3: Package temperature above threshold, cpu clock "
        "throttled (total events = 5845)\n",
        Status.WARN,
    ),
    # github.com/Dasharo/coreboot/pull/815: a newer kernel's "Correctable" wording, dmesg -T
    (
        "xid",
        None,
        "[Fri Aug 29 20:09:52 2025] pcieport 0000:00:1d.3: PCIe Bus Error: severity=Correctable, "
        "type=Data Link Layer, (Transmitter ID)\n",
        Status.WARN,
    ),
]


@pytest.mark.parametrize(("kind", "profile", "text", "expected"), HELD_OUT)
def test_held_out_real_outputs_are_judged_without_a_false_pass(kind, profile, text, expected):
    assert judge(kind, text, profile).status is expected


# What becomes of each kind's real fixture when it is damaged: never a pass.
DAMAGED = [
    ("pcie", "host/lspci_vv_8xh100_cx7_ok.txt", lambda t: t.replace("LnkSta:", "LnkStat:", 1)),
    ("pcie", "host/lspci_vv_8xh100_cx7_ok.txt", lambda t: t.replace("Width x16", "Width xQ", 1)),
    ("pcie-aer", "host/aer_two_gpus_ok.txt", lambda t: t.replace("TOTAL_ERR_FATAL 0\n", "", 1)),
    ("pcie-aer", "host/aer_two_gpus_ok.txt", lambda t: t.replace("Bad TLP 0", "Bad TLP zero", 1)),
    ("memory", "host/memory_2tb_edac_clean_ok.txt", lambda t: t.replace("MemTotal:", "MemTotl:", 1)),
    ("memory", "host/memory_2tb_edac_clean_ok.txt", lambda t: t.split("### fleetctl step: edac")[0]),
    ("memory", "host/memory_2tb_edac_clean_ok.txt", lambda t: t.replace("ce_count:0", "ce_count:-", 1)),
    ("cpu", "host/lscpu_epyc7742_all_online_ok.txt", lambda t: t.replace("0-255", "0-x", 1)),
    ("disk", "host/disk_dgx_lustre_ok.txt", lambda t: t.replace("      11% /", "      eleven /", 1)),
    ("disk", "host/disk_dgx_lustre_ok.txt", lambda t: t.split("### fleetctl step: mounts")[0]),
    ("services", "host/services_hgx_h100_ok.txt", lambda t: t.replace("ActiveState=active\n", "", 1)),
    ("versions", "host/versions_550_ok.txt", lambda t: t.replace("\nNVRM version", "\nNVRM versio", 1)),
    ("versions", "host/versions_550_ok.txt", lambda t: t.replace("550.90.07\n", "550.90.07x\n", 1)),
    (
        "clock",
        "host/chrony_aws_synced_ok.txt",
        lambda t: t.replace("0.000000626 seconds slow", "0.000000626 s slow", 1),
    ),
]


@pytest.mark.parametrize(("kind", "fixture", "damage"), DAMAGED)
def test_output_a_host_parser_cannot_read_is_an_error_never_a_pass(kind, fixture, damage):
    text = fixture_text(fixture)
    assert judge(kind, text, H100).status is Status.PASS
    damaged = damage(text)
    assert damaged != text
    assert judge(kind, damaged, H100).status is Status.ERROR


def test_nvidia_smi_refused_by_a_mismatched_driver_is_a_failure_not_unreadable():
    """What nvidia-smi prints when the loaded module is not the installed driver (the host-versions
    fixture's own lines): the node's GPUs are unusable until it reboots."""
    text = (
        fixture_text("host/versions_library_mismatch_fail.txt").split("### fleetctl step: driver\n")[1].split("###")[0]
    )
    result = judge("nvidia-smi", text, H100)
    assert result.status is Status.FAIL and "reboot" in result.reason
