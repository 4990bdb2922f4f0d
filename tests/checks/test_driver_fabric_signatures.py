"""GPUs that never initialised and NVSwitch fabric faults, reported without an Xid line: read
from the kernel log and Fabric Manager's log through the one signature table
(checks/catalog/signatures.tsv) that both `xid-scan` and the node agent use."""

from __future__ import annotations

import pytest

from fleetctl.agent.detect import detect
from fleetctl.checks import Status, judge
from fleetctl.checks.signatures import signatures
from fleetctl.checks.xid import parse_kernel_log
from fleetctl.checks.xid_policy import CATALOG
from tests.support.fixtures import fixture_text

# (fixture, signature, where, SXid, findings): one finding per GPU or switch and fault,
# however often the driver repeats it.
CASES = [
    ("xid/journal_rminitadapter_repeated_no_xid_fail.txt", "gpu_init_failed", "0000:0a:00.0", None, 1),
    ("xid/dmesg_cannot_attach_gpu_fail.txt", "gpu_init_failed", "0000:01:00.0", None, 1),
    ("xid/dmesg_gsp_firmware_init_fail.txt", "gsp_boot_failed", None, None, 2),
    ("xid/fabricmanager_log_sxid_fatal_fail.txt", "nvswitch_sxid_fatal", "0000:86:00.0", 20034, 2),
    ("xid/fabricmanager_log_sxid_nonfatal_warn.txt", "nvswitch_sxid_nonfatal", "0000:86:00.0", 12028, 1),
    ("xid/fabricmanager_topology_mismatch_fail.txt", "fabric_manager_topology_mismatch", None, None, 1),
]


@pytest.mark.parametrize(("fixture", "name", "where", "sxid", "findings"), CASES)
def test_each_report_is_read_as_its_signature(fixture, name, where, sxid, findings):
    text = fixture_text(fixture)
    log = parse_kernel_log(text)
    assert log.xids == []  # none of these carries an Xid: before, each log judged "pass"
    assert (name, where, sxid) in {(s.name, s.where, s.code) for s in log.signatures}
    result = judge("xid", text)
    expected = Status.FAIL if signatures()[name].severity == "critical" else Status.WARN
    assert result.status is expected
    assert len(result.findings) == findings
    assert name in result.metrics["signatures"]


def test_the_agent_reads_the_same_signatures_as_xid_scan():
    """detect() is the agent's reading of one kernel message: the same table, the same severity."""
    for fixture, _name, _, _, _ in CASES:
        line = next(line for line in fixture_text(fixture).splitlines() if not line.startswith("#"))
        faults = detect(line, CATALOG)
        assert faults, fixture
        assert faults[0].code is None
        assert faults[0].severity == signatures()[parse_kernel_log(line).signatures[0].name].severity


def test_the_kernel_and_fabric_manager_name_one_switch_alike():
    """An SXid the kernel logged and Fabric Manager logged again is one switch, one finding."""
    text = (
        "[131453.740743] nvidia-nvswitch3: SXid (PCI:0000:86:00.0): 20034, Fatal, Link 33 LTSSM Fault Up\n"
        + fixture_text("xid/fabricmanager_log_sxid_fatal_fail.txt")
    )
    result = judge("xid", text)
    fatal = [f for f in result.findings if "fatal SXid" in f.what and "non-fatal" not in f.what]
    assert [f.where for f in fatal] == ["0000:86:00.0"] and "x2" in fatal[0].what


# Held out: real lines no fixture or pattern was written from. None of them may pass.
HELD_OUT = [
    # github.com/NVIDIA/open-gpu-kernel-modules discussions/725, via a Raspberry Pi 5 write-up (GSP RM init failing)
    "[    6.079619] NVRM: RmInitAdapter: Cannot initialize GSP firmware RM\n"
    "[    6.080914] NVRM: GPU 0000:01:00.0: RmInitAdapter failed! (0x62:0xffff:1863)\n"
    "[    6.081257] NVRM: GPU 0000:01:00.0: rm_init_adapter failed, device minor number 0\n",
    # Bumblebee-Project/Bumblebee#722: an old driver's form, no PCI address
    "[87669.726564] NVRM: RmInitAdapter failed! (0x26:0xffff:1375)\n"
    "[87669.726572] NVRM: rm_init_adapter failed for device bearing minor number 0\n",
    # Bumblebee-Project/Bumblebee#204: older still
    "[  139.885299] NVRM: RmInitAdapter failed! (0x30:0xffffffff:858)\n[  139.885306] NVRM: rm_init_adapter(0) failed\n",
    # An RTX 5090 host's GSP boot refused (a public write-up's dmesg)
    "NVRM: _kgspBootGspRm: unexpected WPR2 already up, cannot proceed with booting GSP\n"
    "NVRM: (the GPU is likely in a bad state and may need to be reset)\n",
    # leptonai/gpud fabric-manager tests: another switch, another code
    "[Feb 15 2025 12:34:56] [ERROR] [tid 1234] detected NVSwitch fatal error 98765 on fid 0 on NVSwitch pci bus id "
    "00000000:47:00.0 physical id 1 port 12\n",
]


@pytest.mark.parametrize("text", HELD_OUT)
def test_held_out_real_reports_never_pass(text):
    assert judge("xid", text).status is Status.FAIL


@pytest.mark.parametrize(
    "line",
    [
        "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error twenty on fid 0",
        "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error 999999 on fid 0 on NVSwitch pci bus id "
        "00000000:86:00.0 physical id 3 port 33",
    ],
)
def test_a_fabric_manager_report_it_cannot_read_is_an_error_not_a_pass(line):
    assert judge("xid", line).status is Status.ERROR
