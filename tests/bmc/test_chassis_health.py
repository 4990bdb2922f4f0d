"""The chassis checks' reports (RedfishClient.health_report) read from sushy-tools' emulator
and from a scripted BMC, and judged by checks/chassis.py.

sushy-tools' fake driver serves Chassis/<id>/Thermal (its thermal.json template: CPU and
intake temperatures with their thresholds, one fan) and neither Power nor any LogServices:
so the sensors report holds one Thermal document and the log report nothing, which the
bmc-log check calls unjudgeable rather than clean. The log's paging and a BMC's failures are
scripted, with the OCP usage guide's SEL entries (tests/fixtures/checks/chassis)."""

from __future__ import annotations

import json
import re

import pytest

from fleetctl.bmc.base import BmcError
from fleetctl.bmc.redfish import RedfishClient
from fleetctl.checks import judge
from fleetctl.checks.result import Status
from fleetctl.checks.transcript import read_transcript
from tests.bmc.redfish_stub import Answer, ScriptedRedfish
from tests.bmc.sushy_emulator import RedfishBmc
from tests.support.fixtures import fixture_text

SEL = json.loads(fixture_text("chassis/redfish_ocp_sel_temperature_fail.txt").split("\n", 2)[2])


def test_the_emulators_thermal_is_the_sensors_report_and_it_passes(redfish_bmc: RedfishBmc) -> None:
    client = redfish_bmc.client(allow_http=True)
    report = client.health_report("sensors")
    steps = read_transcript(report)
    assert [s.label.split(" ")[0] for s in steps] == ["thermal"]  # no Power: the fake driver serves none
    result = judge("bmc-sensors", report)
    assert result.status is Status.PASS and result.metrics["sensors"] >= 3, result
    # A reading past its own threshold fails: the emulator's CPU at 41 C with 45 critical, moved to 46.
    hot = report.replace('"ReadingCelsius": 41', '"ReadingCelsius": 46')
    failed = judge("bmc-sensors", hot)
    assert failed.status is Status.FAIL and "reading 46 at or above its UpperThresholdCritical 45" in failed.reason


def test_the_emulators_log_report_is_empty_and_unjudgeable(redfish_bmc: RedfishBmc) -> None:
    report = redfish_bmc.client(allow_http=True).health_report("log")
    assert report == ""
    assert judge("bmc-log", report).status is Status.ERROR


def test_a_paged_sel_is_read_whole_and_its_critical_entries_fail(scripted_redfish: ScriptedRedfish) -> None:
    systems, sel = "/redfish/v1/Systems", "/redfish/v1/Systems/1/LogServices/SEL"
    scripted_redfish.script("GET", systems, Answer(200, {"Members": [{"@odata.id": f"{systems}/1"}]}))
    scripted_redfish.script(
        "GET", f"{systems}/1", Answer(200, {"Id": "1", "LogServices": {"@odata.id": f"{systems}/1/LogServices"}})
    )
    scripted_redfish.script("GET", f"{systems}/1/LogServices", Answer(200, {"Members": [{"@odata.id": sel}]}))
    scripted_redfish.script("GET", sel, Answer(200, {"Id": "SEL", "Entries": {"@odata.id": f"{sel}/Entries"}}))
    first, second = SEL["Members"]
    scripted_redfish.script(
        "GET", f"{sel}/Entries", Answer(200, {"Members": [first], "Members@odata.nextLink": f"{sel}/Entries2"})
    )
    scripted_redfish.script("GET", f"{sel}/Entries2", Answer(200, {"Members": [second]}))
    scripted_redfish.script("GET", "/redfish/v1/Managers", Answer(200, {"Members": []}))
    client = RedfishClient(scripted_redfish.base_url, "fleetctl", "pw", allow_http=True)

    report = client.health_report("log")

    assert [s.label for s in read_transcript(report)] == ["log 1 SEL"]
    result = judge("bmc-log", report)
    assert result.status is Status.FAIL and result.metrics == {"entries": 2, "judged": 2}
    assert result.reason == "1 SEL: Temperature Temperature threshold exceeded (2 entries)"
    resolved = report.replace('"Severity": "Critical"', '"Severity": "Critical", "Resolved": true')
    assert judge("bmc-log", resolved).status is Status.PASS
    # A message of DMTF's ResourceEvent registry means what the registry says, whatever the severity beside it.
    recovered = report.replace('"MessageId": "0x592A28"', '"MessageId": "ResourceEvent.1.0.ResourceStatusChangedOK"')
    assert judge("bmc-log", recovered).metrics["judged"] == 1


def test_a_bmc_that_fails_other_than_404_fails_the_report(scripted_redfish: ScriptedRedfish) -> None:
    scripted_redfish.script(
        "GET", "/redfish/v1/Chassis", Answer(200, {"Members": [{"@odata.id": "/redfish/v1/Chassis/1"}]})
    )
    scripted_redfish.script(
        "GET",
        "/redfish/v1/Chassis/1",
        Answer(200, {"Id": "1", "Thermal": {"@odata.id": "/redfish/v1/Chassis/1/Thermal"}}),
    )
    scripted_redfish.script(
        "GET", "/redfish/v1/Chassis/1/Thermal", Answer(500, {"error": {"message": "sensor bus hung"}})
    )
    client = RedfishClient(scripted_redfish.base_url, "fleetctl", "pw", allow_http=True)
    with pytest.raises(BmcError, match=re.escape("HTTP 500")):
        client.health_report("sensors")
    with pytest.raises(ValueError, match="unknown BMC health report 'fans'"):
        client.health_report("fans")
