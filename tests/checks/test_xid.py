from __future__ import annotations

import csv
from importlib import resources

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fleetctl.checks import Status, judge
from fleetctl.checks.signatures import signatures
from fleetctl.checks.xid import (
    ACTIONS,
    BUCKET_ACTIONS,
    SEVERITIES,
    XID_CODE_MAX,
    BadKernelLog,
    parse_kernel_log,
    parse_xid_lines,
    xid_action,
    xid_catalog,
)
from tests.support.fixtures import fixture_text


@pytest.mark.parametrize(
    ("line", "pci", "code", "pid", "process", "timestamp", "message"),
    [
        (
            "[Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008",
            "0000:cb:00",
            109,
            1797828,
            "pt_main_thread",
            "Fri Aug 30 11:43:14 2024",
            "Ch 00000008",
        ),
        (
            "[Fri Aug 30 11:43:09 2024] NVRM: Xid (PCI:0000:CB:00): 13, pid='<unknown>', name=<unknown>, Graphics SM",
            "0000:cb:00",
            13,
            None,
            None,
            "Fri Aug 30 11:43:09 2024",
            "Graphics SM",
        ),
        (
            "[ 8213.117342] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: reset gpu",
            "0000:10:1c",
            63,
            1896,
            None,
            "8213.117342",
            "Row Remapper: reset gpu",
        ),
        (
            "May 18 19:02:39 kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
            "0000:2b:00",
            79,
            None,
            None,
            "May 18 19:02:39",
            "GPU has fallen off the bus.",
        ),
        (
            "NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406)",
            "0019:01:00",
            149,
            None,
            None,
            None,
            "NETIR Fatal XC0 i0 Link -1 (0x000fe406)",
        ),
        (
            "2025-03-04T02:17:55.301822+00:00 n17 kernel: NVRM: Xid (PCI:00000000:9a:00.0): 48, pid=88121, name=python3, DBE",
            "00000000:9a:00.0",
            48,
            88121,
            "python3",
            "2025-03-04T02:17:55.301822+00:00",
            "DBE",
        ),
        # /dev/kmsg: microseconds since boot become dmesg's seconds
        (
            "6,3963,206764201,-;NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.",
            "0000:2b:00",
            79,
            None,
            None,
            "206.764201",
            "GPU has fallen off the bus.",
        ),
        # journalctl -o json: the record's own wall clock, in UTC
        (
            '{"__REALTIME_TIMESTAMP":"1747594959301822","MESSAGE":"NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus."}',
            "0000:2b:00",
            79,
            None,
            None,
            "2025-05-18T19:02:39.301822+00:00",
            "GPU has fallen off the bus.",
        ),
        # journalctl -o json writes a non-UTF-8 MESSAGE as a list of bytes
        (
            '{"__REALTIME_TIMESTAMP":"1747594959301822","MESSAGE":[78,86,82,77,58,32,88,105,100,32,40,80,67,73,58,48,48,48,48,58,50,98,58,48,48,41,58,32,52,56,44,32,255]}',
            "0000:2b:00",
            48,
            None,
            None,
            "2025-05-18T19:02:39.301822+00:00",
            "\ufffd",
        ),
        # the fallen-off-the-bus report without an Xid line is Xid 79
        (
            "May 18 19:02:39 kernel: NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
            "0000:2b:00.0",
            79,
            None,
            None,
            "May 18 19:02:39",
            "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.",
        ),
        (
            "NVRM: GPU at PCI:0000:65:00: GPU has fallen off the bus.",
            "0000:65:00",
            79,
            None,
            None,
            None,
            "NVRM: GPU at PCI:0000:65:00: GPU has fallen off the bus.",
        ),
        # a GSP RPC timeout without its Xid 119 line is Xid 119 on the GPU it names
        (
            "[ 99.1] NVRM: GPU4 Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 10 (FREE)",
            "GPU4",
            119,
            None,
            None,
            "99.1",
            "NVRM: GPU4 Timeout after 6s of waiting for RPC response from GPU4 GSP! Expected function 10 (FREE)",
        ),
    ],
)
def test_xid_line_forms(line, pci, code, pid, process, timestamp, message):
    [event] = parse_xid_lines(line)
    assert (event.pci, event.code, event.pid, event.process, event.timestamp, event.message) == (
        pci,
        code,
        pid,
        process,
        timestamp,
        message,
    )


def test_a_fault_logged_with_and_without_its_xid_line_is_one_event():
    events = parse_xid_lines(fixture_text("xid/kmsg_raw_xid79_fail.txt"))
    assert [(e.code, e.pci, e.signature) for e in events] == [(79, "0000:2b:00", None)]
    only_report = parse_xid_lines(fixture_text("xid/journal_fallen_off_bus_no_xid_line_fail.txt"))
    assert [(e.code, e.signature) for e in only_report] == [(79, "gpu_fallen_off_bus")]


# ---- the catalog ---------------------------------------------------------------------------


def _nvidia_rows() -> list[dict]:
    text = (resources.files("fleetctl.checks") / "catalog" / "xid.tsv").read_text()
    return list(csv.DictReader((line for line in text.splitlines() if not line.startswith("#")), delimiter="\t"))


def test_catalog_has_every_code_of_nvidia_catalog_version():
    assert sorted(xid_catalog()) == list(range(1, 173))  # the 2025-10-29 catalog: codes 1..172
    header = (resources.files("fleetctl.checks") / "catalog" / "xid.tsv").read_text().splitlines()[:12]
    assert any("Generated at 2025-10-29" in line for line in header)


@pytest.mark.parametrize("row", _nvidia_rows(), ids=lambda row: row["code"])
def test_no_code_maps_to_an_invented_action(row):
    """fleetctl's action comes from NVIDIA's immediate bucket through one table; a code
    whose bucket is empty or unmapped says 'unknown'."""
    entry = xid_action(int(row["code"]))
    assert entry.nvidia_action == row["nvidia_action"] and entry.nvidia_followup == row["nvidia_followup"]
    assert entry.action == BUCKET_ACTIONS.get(row["nvidia_action"], "unknown")
    assert entry.action in ACTIONS and entry.severity in SEVERITIES
    if entry.action == "unknown":
        assert entry.severity == "warning"


@pytest.mark.parametrize(
    ("code", "action", "severity", "nvidia"),
    [
        (13, "restart_app", "info", "RESTART_APP"),
        (31, "restart_app", "info", "RESTART_APP"),
        (32, "restart_app", "info", "RESTART_APP"),  # was "not in the catalog: reset gpu"
        (38, "ignore", "warning", "IGNORE"),  # ignorable; contact support if it recurs
        (44, "ignore", "warning", "IGNORE"),
        (48, "reset_gpu", "critical", "WORKFLOW_XID_48"),
        (54, "check_hardware", "critical", "CHECK_MECHANICALS"),
        (63, "ignore", "info", "IGNORE"),
        (64, "reset_gpu", "critical", "RESET_GPU"),
        (74, "reset_gpu", "critical", "WORKFLOW_NVLINK_ERR"),
        (79, "reboot", "critical", "RESTART_BM"),
        (92, "ignore", "warning", "IGNORE"),
        (94, "restart_app", "warning", "RESTART_APP"),  # fleetctl watches its repeats
        (95, "reset_gpu", "critical", "RESET_GPU"),
        (119, "reset_gpu", "critical", "RESET_GPU"),
        (137, "ignore", "info", "IGNORE"),
        (140, "reset_gpu", "critical", "RESET_GPU"),
        (151, "reboot", "critical", "RESTART_VM"),
        (1, "contact_support", "critical", "CONTACT_SUPPORT"),
        (167, "unknown", "warning", ""),  # NVIDIA gives no bucket for it in this version
    ],
)
def test_xid_catalog_actions(code, action, severity, nvidia):
    entry = xid_action(code)
    assert (entry.action, entry.severity, entry.nvidia_action) == (action, severity, nvidia)


@pytest.mark.parametrize("code", [0, 173, 201, 9999, XID_CODE_MAX])
def test_a_code_outside_the_catalog_is_unknown_not_an_invented_action(code):
    entry = xid_action(code)
    assert (entry.mnemonic, entry.action, entry.severity) == ("UNKNOWN", "unknown", "warning")


def test_every_signature_has_a_known_action_and_the_kernel_ones_a_pattern():
    from fleetctl.checks.xid import _SIGNATURE_PATTERNS

    table = signatures()
    assert all(s.action in ACTIONS and s.severity in SEVERITIES and s.source for s in table.values())
    kernel = {n for n, s in table.items() if s.tool == "kernel" and not n.startswith("nvswitch_sxid")}
    assert kernel == set(_SIGNATURE_PATTERNS)


# ---- judging a log -------------------------------------------------------------------------


def test_judge_reports_codes_and_the_strongest_action():
    result = judge("xid", fixture_text("xid/journal_xid79_nvlink_fail.txt"))
    assert result.metrics["xids"] == [45, 79, 94, 144, 145, 149]
    assert result.metrics["action"] == "reboot"
    assert any(f.where == "0000:2b:00" and "79" in f.what for f in result.findings)


def test_repeated_events_give_one_finding_per_gpu_and_code():
    result = judge("xid", fixture_text("xid/dmesg_T_xid119_gsp_fail.txt"))
    assert result.metrics["events"] == 5 and len(result.findings) == 1


def test_a_burst_of_45_after_a_79_is_one_fault():
    result = judge("xid", fixture_text("xid/journal_json_xid79_burst_45_fail.txt"))
    assert result.metrics["events"] == 5 and result.metrics["faults"] == 1
    forty_fives = [f for f in result.findings if f.what.startswith("Xid 45")]
    assert len(forty_fives) == 4 and all(f.severity == "info" and "follows Xid 79" in f.what for f in forty_fives)


def test_a_solo_45_follows_nvidia_solo_rule():
    result = judge("xid", fixture_text("xid/dmesg_xid45_solo_warn.txt"))
    assert result.metrics["action"] == "restart_fabric_manager" and result.status is Status.WARN


def test_catalogued_codes_are_not_called_uncatalogued():
    result = judge("xid", fixture_text("xid/dmesg_xid32_38_44_catalogued_warn.txt"))
    assert result.metrics["xids"] == [32, 38, 44]
    assert not any("not in NVIDIA" in f.what for f in result.findings)


def test_an_unknown_code_says_unknown():
    result = judge("xid", fixture_text("xid/dmesg_unknown_code_warn.txt"))
    assert result.metrics["action"] == "unknown" and "not in NVIDIA's Xid catalog of 2025-10-29" in result.reason
    assert result.metrics["xid_catalog"] == "2025-10-29"


@pytest.mark.parametrize(
    ("message", "action", "status"),
    [
        ("GPU recovery action changed from 0x0 (None) to 0x2 (OS Reboot)", "reboot", Status.FAIL),
        ("GPU recovery action changed from 0x0 (None) to 0x1 (GPU Reset Required)", "reset_gpu", Status.FAIL),
        ("GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)", "ignore", Status.PASS),
        ("GPU recovery action changed", "unknown", Status.WARN),
    ],
)
def test_xid_154_takes_the_recovery_action_it_names(message, action, status):
    result = judge("xid", f"[ 1.0] NVRM: Xid (PCI:0000:01:00): 154, {message}")
    assert (result.metrics["action"], result.status) == (action, status)


@pytest.mark.parametrize(
    "line",
    [
        "[ 1.0] NVRM: Xid (PCI:0000:01:00): 99999999999999999999, GPU has fallen off the bus.",
        "[ 1.0] NVRM: Xid (PCI:0000:01:00): 65536, something",
        "[ 1.0] NVRM: Xid (PCI:0000:01:00): 79, pid=99999999999, name=x, GPU has fallen off the bus.",
        "[ 1.0] nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 1000000, Fatal, Link 1",
        "6,1,99999999999999999999,-;NVRM: Xid (PCI:0000:01:00): 79, GPU has fallen off the bus.",
        '{"__REALTIME_TIMESTAMP":"99999999999999999999","MESSAGE":"NVRM: Xid (PCI:0000:2b:00): 79, x"}',
        "[ 1.0] NVRM: Xid (PCI:0000:01:00): " + "9" * 5000 + ", x",
    ],
)
def test_out_of_range_numbers_are_bad_input_with_one_reason(line):
    with pytest.raises(BadKernelLog) as caught:
        parse_xid_lines(line)
    assert "out of range" in str(caught.value) and "\n" not in str(caught.value)
    result = judge("xid", line)
    assert result.status is Status.ERROR and "out of range" in result.reason


@settings(max_examples=60, deadline=None, database=None)
@given(code=st.integers(min_value=XID_CODE_MAX + 1, max_value=10**40))
def test_no_code_past_the_bound_is_accepted(code):
    with pytest.raises(BadKernelLog):
        parse_xid_lines(f"[ 1.0] NVRM: Xid (PCI:0000:01:00): {code}, GPU has fallen off the bus.")


@settings(max_examples=60, deadline=None, database=None)
@given(cut=st.integers(min_value=1, max_value=400), data=st.data())
def test_garbled_journal_json_is_never_a_pass(cut, data):
    """A journal record cut or garbled is not a clean log: error, never 'no Xid events'."""
    text = fixture_text("xid/journal_json_xid79_burst_45_fail.txt")
    lines = [line for line in text.splitlines() if line.startswith("{")]
    i = data.draw(st.integers(min_value=0, max_value=len(lines) - 1))
    lines[i] = lines[i][: min(cut, len(lines[i]) - 1)]
    result = judge("xid", "\n".join(lines))
    assert result.status is not Status.PASS


def test_signatures_in_the_log_without_xids():
    log = parse_kernel_log(fixture_text("xid/dmesg_nvswitch_sxid_fatal_fail.txt"))
    assert {(s.name, s.code) for s in log.signatures} == {("nvswitch_sxid_fatal", 20034), ("nvswitch_sxid", 12028)}
    assert log.xids == []


_FAILING_LOGS = [
    "xid/journal_xid79_nvlink_fail.txt",
    "xid/dmesg_T_xid119_gsp_fail.txt",
    "xid/kmsg_raw_xid79_fail.txt",
    "xid/journal_iso_xid48_dbe_fail.txt",
    "xid/dmesg_nvswitch_sxid_fatal_fail.txt",
]


@pytest.mark.parametrize("name", _FAILING_LOGS)
@settings(max_examples=30, deadline=None, database=None)
@given(data=st.data())
def test_a_garbled_report_never_turns_a_failing_log_into_a_pass(name, data):
    """The code of an Xid or SXid report replaced by garbage: the log is damaged, not clean."""
    import re

    text = fixture_text(name)
    spots = list(re.finditer(r"(?<=Xid \()[^)]*\): (\d+)", text))
    spot = data.draw(st.sampled_from(spots), label="report")
    garbage = data.draw(st.sampled_from(["", "x", "7x9", "-1", "٧٩", "0x4f", "79.5", " "]), label="garbage")
    garbled = text[: spot.start(1)] + garbage + text[spot.end(1) :]
    assert judge("xid", garbled).status is not Status.PASS


@pytest.mark.parametrize(
    ("line", "pci"),
    [
        ("NVRM: GPU at 0000:01:00.0 has fallen off the bus.", "0000:01:00.0"),
        (
            "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b80) installed in this system has fallen off the bus and "
            "is not responding to commands.",
            "0000:01:00.0",
        ),
        ("NVRM: GPU has fallen off the bus.", "unknown GPU"),
    ],
)
def test_every_form_of_the_fallen_off_the_bus_report_is_xid_79(line, pci):
    [event] = parse_xid_lines(line)
    assert (event.code, event.pci, event.signature) == (79, pci, "gpu_fallen_off_bus")
