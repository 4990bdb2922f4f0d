"""NVMe SMART / health judged (checks/storage.py) over the real outputs in
tests/fixtures/checks/storage, each changed in one field where a case needs a fault."""

from __future__ import annotations

import re

import pytest

from fleetctl.checks import judge
from fleetctl.checks.result import Status
from tests.support.fixtures import fixture_text

TEXT = fixture_text("storage/nvme_smart_log_text_ok.txt")
JSON = fixture_text("storage/nvme_smart_log_json_ok.txt")
TWO = fixture_text("storage/nvme_transcript_two_drives_ok.txt")


@pytest.mark.parametrize(
    ("text", "status", "reason"),
    [
        (TEXT, Status.PASS, r"1 NVMe drives healthy"),
        (TEXT.replace("media_errors                            : 0", "media_errors : 12"), Status.FAIL, r"12 media"),
        (
            TEXT.replace("available_spare                         : 100%", "available_spare : 9%"),
            Status.FAIL,
            r"spare 9%",
        ),
        (
            TEXT.replace("critical_warning                        : 0", "critical_warning : 2"),
            Status.WARN,
            "temperature",
        ),
        (TEXT.replace("percentage_used                         : 3%", "percentage_used : 104%"), Status.WARN, "104%"),
        # bit 2 set by wear alone (no media error, spare left): the end of rated life, a warning
        (
            JSON.replace('"critical_warning" : 0', '"critical_warning" : 4').replace(
                '"percent_used" : 0', '"percent_used" : 100'
            ),
            Status.WARN,
            "reliability",
        ),
        (JSON.replace('"critical_warning" : 0', '"critical_warning" : 8'), Status.FAIL, "read-only"),
        (JSON.replace('"critical_warning" : 0', '"critical_warning" : "0"'), Status.ERROR, "not a count"),
        (JSON.replace('"critical_warning" : 0', '"critical_warning" : 300'), Status.ERROR, "not one byte"),
        (JSON[: JSON.index('"spare_thresh"')], Status.ERROR, "cut short or damaged"),
        (TEXT.replace("critical_warning", "critical_warnings"), Status.ERROR, "no critical_warning"),
        (
            TWO.replace('"critical_warning" : 0', '"critical_warning" : 1', 1),
            Status.FAIL,
            r"nvme0: .*available spare below",
        ),
        (TWO[: TWO.index("### fleetctl step: nvme2") - 30], Status.ERROR, "nvme1: its smart-log was cut short"),
        ("### fleetctl step: nvme0\n/dev/nvme0: No such file or directory\n", Status.ERROR, "no NVMe controller"),
    ],
)
def test_nvme_smart_log_judged(text: str, status: Status, reason: str) -> None:
    result = judge("nvme", text)
    said = result.reason + " " + " ".join(f"{f.where}: {f.what}" for f in result.findings)
    assert result.status is status and re.search(reason, said), result
