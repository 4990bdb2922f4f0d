"""dcgmi diag -r 4 (the dcgm-r4 catalog check): level 3 plus the extended tests, and NVIDIA's
Extended Utility Diagnostics where the node has them. Each case changes one row of the real
level-4 table (DCGM 2.x, tests/fixtures/checks/dcgm/r4_dcgm2_blacklist_text_ok.txt)."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge
from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.suites import load_suite
from tests.support.fixtures import fixture_text

R4 = fixture_text("dcgm/r4_dcgm2_blacklist_text_ok.txt")
MEMTEST = "| Memtest                   | Pass - All                                     |"


def with_eud(status: str, message: str | None = None) -> str:
    assert MEMTEST in R4
    rows = [MEMTEST, f"| EUD                       | {status:<47}|"]
    if message:
        rows.append(f"| Warning                   | {message:<47}|")
    return R4.replace(MEMTEST, "\n".join(rows))


def test_dcgm_r4_and_the_health_watches_are_catalog_checks():
    assert CHECKS["dcgm-r4"].argv == ("dcgmi", "diag", "-r", "4", "-j") and CHECKS["dcgm-r4"].kind == "dcgm"
    assert CHECKS["dcgm-health"].argv == ("dcgmi", "health", "-c") and CHECKS["dcgm-health"].kind == "dcgm-health"
    assert "dcgm-health" in load_suite("quick").checks  # the sweep reads DCGM's watches
    assert "dcgm-r4" not in load_suite("burn-in").checks  # hours long: a site's suite adds it


def test_level_4_passes_on_its_own_tests():
    result = judge("dcgm", R4, None)
    assert result.status is Status.PASS and result.metrics["eud_not_run"] is False


def test_an_eud_the_node_does_not_have_is_said_not_counted():
    result = judge("dcgm", with_eud("Skip"), None)
    assert result.status is Status.PASS and "EUD not run" in result.reason
    assert result.metrics["eud_not_run"] is True and result.metrics["skipped"] == 0


@pytest.mark.parametrize(
    ("status", "message"),
    [
        ("Fail - All", None),
        ("Skip", "GPU 4 EUD process exited with non-zero exit code."),  # DCGM#190's warning
    ],
)
def test_an_eud_that_failed_or_could_not_run_fails(status, message):
    result = judge("dcgm", with_eud(status, message), None)
    assert result.status is Status.FAIL
    assert any("EUD" in f.what for f in result.findings if f.severity == "fail")


def test_any_other_skipped_test_still_leaves_the_run_unproven():
    result = judge("dcgm", R4.replace(MEMTEST, MEMTEST.replace("Pass - All", "Skip      ")), None)
    assert result.status is Status.ERROR and "Memtest" in result.reason
