"""Property: a healthy output that is cut short, or has a number garbled, is never a pass.

"Result lines" are the lines a verdict rests on (table rows, footers, counters); a cut at or
before the start of the last one, anywhere in the text, and a non-number in place of any
number on one of them, must give warn, fail or error.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetctl.checks import Status, judge
from tests.support.fixtures import fixture_text

_NCCL = r"^\s*(?:\[1,0\]<stdout>:|\d+:)?\s*(?:\d+\s+\d+\s+\w+|#\s*(?:Out of bounds|Avg bus))"
_HPL = r"^\s*(?:W[RC][A-Z0-9]*\s|\|\|Ax-b\|\|_oo/)"
_Q_NUMERIC = r"^\s+(?:GPU Current Temp|Memory Current Temp|Power Draw|(?:SRAM|DRAM) (?:Unc|C)orrectable|Correctable Error|Uncorrectable Error|(?:Max|High|Partial|Low|None)\s+:\s*\d+ bank|Current\s+:\s*\d+x)"

# (fixture, kind, profile, result-line pattern, numbers on result lines may be garbled)
HEALTHY = [
    ("nccl/8xh100_full_sweep_ok.txt", "nccl", "h100-sxm", _NCCL, True),
    ("nccl/8xh200_218_header_ok.txt", "nccl", "h200-sxm", _NCCL, True),
    ("nccl/8xh100_srun_prefix_info_noise_ok.txt", "nccl", "h100-sxm", _NCCL, True),
    ("nccl/a100_old_error_column_ok.txt", "nccl", "a100-sxm-80gb", _NCCL, True),
    ("hpl/nvidia_8xh100_ok.txt", "hpl", "h100-sxm", _HPL, True),
    ("hpl/nvidia_8xh100_progress_and_nccl_noise_ok.txt", "hpl", "h100-sxm", _HPL, True),
    ("hpl/netlib_cpu_ok.txt", "hpl", None, _HPL, True),
    ("dcgm/r2_h100_text_ok.txt", "dcgm", "h100-sxm", r"^\| (?!Diagnostic)\S.*\| (?:Pass|Fail|Warn|Skip)", False),
    ("dcgm/r1_json_ok.txt", "dcgm", "h100-sxm", r'"status"', False),
    ("dcgm/r3_dcgm40_text_4gpu_ok.txt", "dcgm", None, r"^\| .*\| (?:GPU\d+: )?(?:Pass|Fail|Warn|Skip)", False),
    ("dcgm/r3_dcgm4_json_diagnostic_8gpu_ok.txt", "dcgm", "h100-sxm", r'"status"', False),
    ("nvidia_smi/csv_8xh100_ok.txt", "nvidia-smi", "h100-sxm", r"^\d+, ", True),
    ("nvidia_smi/q_8xh100_ok.txt", "nvidia-smi", "h100-sxm", _Q_NUMERIC, True),
    ("nvidia_smi/q_d_page_retirement_8xh100_ok.txt", "nvidia-smi", "h100-sxm", _Q_NUMERIC, True),
    ("ib/ibstat_h100_ndr_ok.txt", "ib", "h100-sxm", r"^\s+(?:State|Physical state|Rate|Link layer):", True),
    (
        "ib/ibstat_h100_8rails_3eth_down_ok.txt",
        "ib",
        "h100-sxm",
        r"^\s+(?:State|Physical state|Rate|Link layer):",
        True,
    ),
    ("ib/ibstatus_a100_hdr_ok.txt", "ib", "a100-sxm-80gb", r"^\s+(?:state|phys state|rate|link_layer):", True),
    ("ib/ib_write_bw_ndr_ok.txt", "ib", "h100-sxm", r"^\s*\d+\s+\d+\s+[\d.]+\s+[\d.]+", True),
    ("firmware/nvidia_smi_vbios_ok.txt", "firmware", "h100-sxm", r"^NVIDIA ", False),
    ("firmware/nvfwupd_table_gb200_ok.txt", "firmware", None, r"^[A-Z]\w+_\d+\s", False),
    ("firmware/redfish_expanded_ok.txt", "firmware", None, r'"Version"', False),
]
IDS = [case[0] for case in HEALTHY]

# Non-numbers a broken tool, terminal or copy-paste puts where a number was.
NOT_NUMBERS = st.one_of(
    st.sampled_from(["ERR!", "nan?", "--", "#", "?", "1.2.3", "12abc", "inf%", "0x", "e5", "<unknown>", "…", "1e400"]),
    st.text(alphabet="abcdfghijklmopqrstuvwxyzQWZ!?*&", min_size=1, max_size=6).filter(
        lambda s: s.lower() not in {"na", "n/a", "x"}
    ),
)
_NUMBER = re.compile(r"(?<![\w.+-])[+-]?\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w.])", re.IGNORECASE)

PROFILE_SETTINGS_DCGM = settings(max_examples=25, deadline=None, database=None)
PROPERTY_SETTINGS = settings(
    max_examples=40, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


def _result_line_starts(text: str, pattern: str) -> list[int]:
    starts, offset = [], 0
    for line in text.splitlines(keepends=True):
        if re.search(pattern, line):
            starts.append(offset)
        offset += len(line)
    return starts


@pytest.mark.parametrize(("name", "kind", "profile", "pattern", "_"), HEALTHY, ids=IDS)
def test_fixture_is_healthy_and_has_result_lines(name, kind, profile, pattern, _):
    text = fixture_text(name)
    assert judge(kind, text, profile).status is Status.PASS
    assert _result_line_starts(text, pattern)


@pytest.mark.parametrize(("name", "kind", "profile", "pattern", "_"), HEALTHY, ids=IDS)
@PROPERTY_SETTINGS
@given(data=st.data())
def test_cut_before_the_last_result_line_never_passes(name, kind, profile, pattern, _, data):
    text = fixture_text(name)
    last = _result_line_starts(text, pattern)[-1]
    cut = data.draw(st.integers(min_value=0, max_value=last), label="cut")
    result = judge(kind, text[:cut], profile)
    assert result.status is not Status.PASS, (cut, result.reason)


GARBLEABLE = [case for case in HEALTHY if case[4]]


@pytest.mark.parametrize(("name", "kind", "profile", "pattern", "_"), GARBLEABLE, ids=[c[0] for c in GARBLEABLE])
@PROPERTY_SETTINGS
@given(data=st.data())
def test_a_number_replaced_by_a_non_number_never_passes(name, kind, profile, pattern, _, data):
    text = fixture_text(name)
    lines = text.splitlines(keepends=True)
    spots = [
        (i, m.start(), m.end())
        for i, line in enumerate(lines)
        if re.search(pattern, line)
        for m in _NUMBER.finditer(line)
        if not _is_identity(line, m)
    ]
    i, start, end = data.draw(st.sampled_from(spots), label="number")
    garbage = data.draw(NOT_NUMBERS, label="replacement")
    lines[i] = lines[i][:start] + garbage + lines[i][end:]
    result = judge(kind, "".join(lines), profile)
    assert result.status is not Status.PASS, (lines[i], result.reason)


def _is_identity(line: str, match: re.Match) -> bool:
    """Digits that are part of a name, not a measurement: 'H100', a UUID, a PCI address,
    a serial, a version. Replacing those changes who the GPU is, not what it measured."""
    if ", " in line:  # CSV: only the numeric columns are measurements
        column = line[: match.start()].count(",")
        return column in _CSV_IDENTITY_COLUMNS
    return False


# index,name,uuid,serial,pci.bus_id,driver_version,vbios_version are columns 0..6 of the catalog query;
# index is a number, and garbling it must still be caught, so only 1..6 are identity.
_CSV_IDENTITY_COLUMNS = {1, 2, 3, 4, 5, 6}


DCGM_HEALTHY = [case for case in HEALTHY if case[1] == "dcgm"]


@pytest.mark.parametrize(("name", "kind", "profile", "pattern", "_"), DCGM_HEALTHY, ids=[c[0] for c in DCGM_HEALTHY])
@PROFILE_SETTINGS_DCGM
@given(data=st.data())
def test_a_dcgm_pass_turned_into_skip_or_not_run_never_passes(name, kind, profile, pattern, _, data):
    """Whatever test or GPU row DCGM says it skipped, the node is not shown healthy."""
    text = fixture_text(name)
    spots = [m.start() for m in re.finditer(r"\bPass\b|\bPASS\b", text)]
    at = data.draw(st.sampled_from(spots), label="status")
    word = data.draw(st.sampled_from(["Skip", "SKIP", "Not Run"] if '"status"' in pattern else ["Skip"]), label="word")
    garbled = text[:at] + word + text[at + 4 :]
    assert judge(kind, garbled, profile).status is not Status.PASS
