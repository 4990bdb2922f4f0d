from __future__ import annotations

import pytest

from checks import judge
from checks.xid import ACTIONS, SEVERITIES, parse_xid_lines, xid_action, xid_catalog
from tests.checks.conftest import fixture_text


@pytest.mark.parametrize(
    ("line", "pci", "code", "pid", "process", "timestamp", "message"),
    [
        (
            "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008",
            "0000:cb:00", 109, 1797828, "pt_main_thread", "Fri Aug 30 11:43:14 2024", "Ch 00000008",
        ),
        (
            "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:CB:00): 13, pid='<unknown>', name=<unknown>, Graphics SM",
            "0000:cb:00", 13, None, None, "Fri Aug 30 11:43:09 2024", "Graphics SM",
        ),
        ("[ 8213.117342] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: reset gpu", "0000:10:1c", 63, 1896, None, "8213.117342", "Row Remapper: reset gpu"),
        ("May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.", "0000:2b:00", 79, None, None, "May 18 19:02:39", "GPU has fallen off the bus."),
        ("NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406)", "0019:01:00", 149, None, None, None, "NETIR Fatal XC0 i0 Link -1 (0x000fe406)"),
        (
            "2025-03-04T02:17:55.301822+00:00 n17 kernel: NVRM: Xid (PCI:00000000:9a:00.0): 48, pid=88121, name=python3, DBE",
            "00000000:9a:00.0", 48, 88121, "python3", "2025-03-04T02:17:55.301822+00:00", "DBE",
        ),
    ],
)
def test_xid_line_forms(line, pci, code, pid, process, timestamp, message):
    [event] = parse_xid_lines(line)
    assert (event.pci, event.code, event.pid, event.process, event.timestamp, event.message) == (
        pci, code, pid, process, timestamp, message,
    )


@pytest.mark.parametrize(
    ("code", "action", "severity"),
    [
        (13, "restart_app", "info"),
        (31, "restart_app", "info"),
        (48, "reset_gpu", "critical"),
        (63, "ignore", "warning"),
        (64, "rma", "critical"),
        (74, "reset_gpu", "critical"),
        (79, "reboot", "critical"),
        (92, "ignore", "warning"),
        (94, "restart_app", "warning"),
        (95, "reset_gpu", "critical"),
        (119, "reset_gpu", "critical"),
        (120, "reset_gpu", "critical"),
        (140, "reset_gpu", "critical"),
    ],
)
def test_xid_catalog_actions(code, action, severity):
    entry = xid_action(code)
    assert (entry.action, entry.severity) == (action, severity)


def test_catalog_is_complete_and_valid():
    catalog = xid_catalog()
    assert len(catalog) >= 50
    assert all(e.action in ACTIONS and e.severity in SEVERITIES for e in catalog.values())


def test_unknown_code_gets_a_cautious_default():
    entry = xid_action(9999)
    assert entry.mnemonic == "UNKNOWN" and entry.severity == "warning"


def test_judge_reports_codes_and_the_strongest_action():
    result = judge("xid", fixture_text("xid/journal_xid79_nvlink_fail.txt"))
    assert result.metrics["xids"] == [45, 79, 94, 144, 145, 149]
    assert result.metrics["action"] == "reboot"
    assert any(f.where == "0000:2b:00" and "79" in f.what for f in result.findings)


def test_repeated_events_give_one_finding_per_gpu_and_code():
    result = judge("xid", fixture_text("xid/dmesg_T_xid119_gsp_fail.txt"))
    assert result.metrics["events"] == 5 and len(result.findings) == 1
