"""`dcgmi health -c` judged (checks.dcgm_health): healthy only on the report's own word, each
system's incident a finding on its entity, anything else unjudgeable."""

from __future__ import annotations

import pytest

from fleetctl.checks import Status, judge
from tests.support.fixtures import fixture_text


def output(name: str) -> str:
    return fixture_text(f"dcgm_health/{name}")  # its "# " source header is not a report row


@pytest.mark.parametrize(
    "name, status, findings",
    [
        ("healthy.txt", Status.PASS, []),
        (
            "gpu0_memory_warn.txt",
            Status.WARN,
            [
                (
                    "GPU 0",
                    "warn",
                    "Memory system: The car is red? Are you sure because that doesn't seem like the color I ordered.",
                )
            ],
        ),
        (
            "gpu1_memory_fail_sm_warn.txt",
            Status.FAIL,
            [
                (
                    "GPU 0",
                    "warn",
                    "Memory system: The car is red? Are you sure because that doesn't seem like the color I ordered.",
                ),
                (
                    "GPU 1",
                    "fail",
                    "Memory system: Green can be emerald and beautiful, but there are shades of green which are "
                    "sure to disappoint.",
                ),
                ("GPU 1", "warn", "SM system: The guards wear Kholin blue because otherwise they'd be lame."),
            ],
        ),
        ("watches_not_enabled_error.txt", Status.ERROR, []),
    ],
)
def test_dcgmi_health_fixtures(name, status, findings) -> None:
    result = judge("dcgm-health", output(name))
    assert result.status is status, result.reason
    assert [(f.where, f.severity, f.what) for f in result.findings] == findings


@pytest.mark.parametrize(
    "text, words",
    [
        ("", "empty"),
        ("+----+\n| Overall Health | Healthy |\n", "no dcgmi health report"),  # not the report: no positive evidence
        ("| Health Monitor Report |\n", "no Overall Health row"),  # cut short before the verdict
        ("| Health Monitor Report |\n| Overall Health | Fine |\n", "not one of Healthy, Warning, Failure"),
        (
            "| Health Monitor Report |\n| Overall Health | Warning |\n| -> 0 | Warning |\n",
            "entity row before its group",
        ),
    ],
)
def test_output_that_cannot_be_judged_is_an_error_never_a_pass(text, words) -> None:
    result = judge("dcgm-health", text)
    assert result.status is Status.ERROR and words in result.reason, result.reason


def test_a_report_that_says_warning_and_names_nothing_is_still_a_warning() -> None:
    result = judge("dcgm-health", "| Health Monitor Report |\n| Overall Health | Warning |\n")
    assert result.status is Status.WARN and "without naming it" in result.reason
