"""The chassis as its BMC reports it over Redfish: the event log (SEL and Redfish event
entries, judged by severity and message id) and the sensors (Thermal temperatures and fans,
Power supplies and voltages, judged by their health and their own thresholds). Pure: the
documents come from fleetctl.bmc (RedfishClient.health_report), one per transcript step
(checks.transcript), labelled `log ...`, `thermal ...` or `power ...`.
"""

from __future__ import annotations

import json
from typing import Any

from fleetctl.checks._text import UnjudgeableOutput, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding

# A log entry's Severity (Redfish EventSeverity) as a finding's.
_LOG_SEVERITY = {"Critical": "fail", "Warning": "warn", "OK": None}
# Message keys of DMTF's ResourceEvent registry whose meaning holds whatever Severity the BMC
# wrote beside them (the registry's MessageId is "ResourceEvent.<version>.<key>").
_MESSAGE_KEYS = {
    "ResourceStatusChangedCritical": "fail",
    "ResourceErrorThresholdExceeded": "fail",
    "ResourceStatusChangedWarning": "warn",
    "ResourceErrorsDetected": "warn",
    "ResourceErrorsCorrected": None,
    "ResourceStatusChangedOK": None,
}
# A sensor's Status.Health as a finding's.
_HEALTH = {"Critical": "fail", "Warning": "warn", "OK": None, None: None}
# Status.State of a slot with nothing in it, or a sensor that is switched off: not judged.
_NOT_PRESENT = ("Absent", "Disabled", "UnavailableOffline", "StandbyOffline")
_READINGS = ("ReadingCelsius", "ReadingVolts", "Reading")
# (threshold, above or below, severity): a reading at or past it is the finding.
_THRESHOLDS = (
    ("UpperThresholdFatal", 1, "fail"),
    ("UpperThresholdCritical", 1, "fail"),
    ("UpperThresholdNonCritical", 1, "warn"),
    ("LowerThresholdFatal", -1, "fail"),
    ("LowerThresholdCritical", -1, "fail"),
    ("LowerThresholdNonCritical", -1, "warn"),
)


def _documents(text: str, prefixes: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    from fleetctl.checks.transcript import read_transcript

    steps = [s for s in read_transcript(text) if s.label.split(" ", 1)[0] in prefixes]
    if not steps:
        raise UnjudgeableOutput(f"no {' or '.join(prefixes)} document from the BMC: not a Redfish health report")
    out = []
    for step in steps:
        if step.cut:
            raise UnjudgeableOutput(f"{step.label}: the BMC's answer was cut short")
        try:
            doc = json.loads(step.body)
        except (ValueError, RecursionError) as exc:
            raise UnjudgeableOutput(f"{step.label}: not JSON ({exc})") from None
        if not isinstance(doc, dict):
            raise UnjudgeableOutput(f"{step.label}: not a Redfish resource")
        out.append((step.label, doc))
    return out


def _list(doc: dict[str, Any], key: str, where: str) -> list[dict[str, Any]]:
    items = doc.get(key) or []
    if not isinstance(items, list) or not all(isinstance(i, dict) for i in items):
        raise UnjudgeableOutput(f"{where}: {key} is not a list of objects")
    return items


def judge_bmc_log(text: str, profile: GpuProfile | None) -> CheckResult:
    """Every entry of the BMC's logs: a Critical one fails, a Warning one warns (a message of
    DMTF's ResourceEvent registry as the registry means it); an entry marked Resolved is not
    judged. Repeats of one message are one finding with their count."""
    counts: dict[tuple[str, str, str], int] = {}
    entries = 0
    for label, doc in _documents(text, ("log",)):
        for entry in _list(doc, "Members", label):
            entries += 1
            if entry.get("Resolved") is True:
                continue
            said = entry.get("Severity") or "OK"
            if said not in _LOG_SEVERITY:
                raise UnjudgeableOutput(
                    f"{label}: entry {entry.get('Id')!r} has no Redfish severity: {str(said)[:24]!r}"
                )
            key = str(entry.get("MessageId") or "").rsplit(".", 1)[-1]
            severity = _MESSAGE_KEYS[key] if key in _MESSAGE_KEYS else _LOG_SEVERITY[said]
            if severity:
                what = " ".join(str(entry.get(k) or "") for k in ("SensorType", "Message")).strip() or "(no message)"
                counts[(label, what[:300], severity)] = counts.get((label, what[:300], severity), 0) + 1
    findings = [
        Finding(f"{what}{f' ({n} entries)' if n > 1 else ''}", label.removeprefix("log "), severity)
        for (label, what, severity), n in sorted(counts.items())
    ]
    return verdict(
        findings, {"entries": entries, "judged": sum(counts.values())}, f"{entries} BMC log entries, none critical"
    )


def judge_bmc_sensors(text: str, profile: GpuProfile | None) -> CheckResult:
    """Every temperature, fan, power supply and voltage of the BMC's Thermal and Power
    resources: a health of Critical fails, Warning warns, and a reading at or past its own
    critical (fatal) threshold fails, past its non-critical one warns. Absent slots are not judged."""
    findings: list[Finding] = []
    sensors = 0
    for label, doc in _documents(text, ("thermal", "power")):
        for key in ("Temperatures", "Fans", "PowerSupplies", "Voltages"):
            for item in _list(doc, key, label):
                status = item.get("Status") or {}
                if not isinstance(status, dict) or status.get("State") in _NOT_PRESENT:
                    continue
                sensors += 1
                name = f"{label.split(' ', 1)[-1]} {item.get('Name') or item.get('MemberId') or key}"
                if (health := status.get("Health")) not in _HEALTH:
                    raise UnjudgeableOutput(f"{name}: health {str(health)[:24]!r} is not a Redfish health")
                if severity := _HEALTH[health]:
                    findings.append(Finding(f"{key[:-1].lower()} health {health}", name, severity))
                if (finding := _threshold(item, name)) is not None:
                    findings.append(finding)
    return verdict(findings, {"sensors": sensors}, f"{sensors} BMC sensors within their thresholds")


def _threshold(item: dict[str, Any], name: str) -> Finding | None:
    reading = next((item[r] for r in _READINGS if isinstance(item.get(r), int | float)), None)
    if reading is None or isinstance(reading, bool):
        return None
    for threshold, side, severity in _THRESHOLDS:
        limit = item.get(threshold)
        if isinstance(limit, int | float) and not isinstance(limit, bool) and (reading - limit) * side >= 0:
            word = "at or above" if side > 0 else "at or below"
            return Finding(f"reading {reading} {word} its {threshold} {limit}", name, severity)
    return None
