"""Storage: the NVMe drives' SMART / Health log (`nvme smart-log DEVICE`, its text table or
`-o json`), each drive judged by its critical-warning bits, its media errors, its spare and
its wear. Pure; the kernel's own lines for the storage (nfs not responding, a filesystem
remounted read-only, hung tasks) are signatures of checks/xid.py, read by the agent.

The check runs one `nvme smart-log` per controller the node may have (`nvme0` to
`nvme{MAX_NVME-1}`), each under its transcript step; a controller the node lacks answers
"No such file or directory" and is not judged.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fleetctl.checks._text import UnjudgeableOutput, integer, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding

# Controllers a check asks about: a DGX H100 has ten (two boot M.2, eight U.2 cache drives).
MAX_NVME = 16
# The critical-warning bits (NVMe Base Specification, SMART / Health Information log, byte 0),
# what each means and how grave it is.
CRITICAL_WARNING_BITS = (
    (0, "available spare below its threshold", "fail"),
    (1, "temperature past a threshold", "warn"),
    (2, "NVM subsystem reliability degraded (media errors, or wear past its rating)", "fail"),
    (3, "media placed in read-only mode", "fail"),
    (4, "volatile memory backup device failed", "fail"),
    (5, "persistent memory region read-only or unreliable", "fail"),
)
# The text table's names for the fields the JSON names (nvme-cli 1.x and 2.x).
_TEXT_NAMES = {
    "critical_warning": "critical_warning",
    "available_spare": "avail_spare",
    "available_spare_threshold": "spare_thresh",
    "percentage_used": "percent_used",
    "media_errors": "media_errors",
    "num_err_log_entries": "num_err_log_entries",
    "temperature": "temperature",
}
_TEXT_ROW = re.compile(r"^(?P<key>[A-Za-z_][A-Za-z0-9_ ]*?)\s*:\s*(?P<value>.*?)\s*$")
_CELSIUS = re.compile(r"^(?P<c>-?\d+)\s*(?:C|°C)\b")
_ABSENT = "No such file or directory"


def parse_smart_log(text: str) -> dict[str, int]:
    """The judged fields of one drive's `nvme smart-log`: critical_warning, avail_spare,
    spare_thresh, percent_used, media_errors, num_err_log_entries, and temperature in °C
    (the JSON gives Kelvin). critical_warning is required; the others where the tool gives them."""
    # A pasted output may keep a comment line above it (a fixture's source, an operator's note).
    stripped = "\n".join(line for line in text.strip().splitlines() if not line.startswith("# ")).strip()
    fields = _from_json(stripped) if stripped.startswith("{") else _from_text(stripped)
    if "critical_warning" not in fields:
        raise UnjudgeableOutput("not an nvme smart-log (no critical_warning)")
    return fields


def _from_json(text: str) -> dict[str, int]:
    try:
        doc: Any = json.loads(text)
    except ValueError as exc:
        raise UnjudgeableOutput(f"nvme smart-log JSON cut short or damaged: {exc}") from None
    if not isinstance(doc, dict):
        raise UnjudgeableOutput("nvme smart-log JSON is not an object")
    fields = {}
    for name in _TEXT_NAMES.values():
        if name in doc:
            value = doc[name]
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 2**128:
                raise UnjudgeableOutput(f"nvme smart-log {name} is not a count: {str(value)[:24]!r}")
            fields[name] = value
    if "temperature" in fields:  # Kelvin in the log page and in nvme-cli's JSON
        fields["temperature"] -= 273
    return fields


def _from_text(text: str) -> dict[str, int]:
    if not text.startswith("Smart Log for NVME device"):
        raise UnjudgeableOutput(f"not an nvme smart-log: {text[:60]!r}")
    fields = {}
    for line in text.splitlines()[1:]:
        if not (m := _TEXT_ROW.match(line)) or (name := _TEXT_NAMES.get(m["key"])) is None:
            continue
        value = m["value"]
        if name == "temperature":
            if not (c := _CELSIUS.match(value)):
                raise UnjudgeableOutput(f"nvme smart-log temperature {value[:24]!r} is not in °C")
            fields[name] = int(c["c"])
        else:
            fields[name] = integer(value.rstrip("%").replace(",", ""), strip_unit=False)
    return fields


def _drives(text: str) -> dict[str, str]:
    """Each drive's smart-log output: the transcript's steps, or one drive's output pasted."""
    from fleetctl.checks.transcript import read_transcript

    steps = read_transcript(text)
    if not steps:
        return {"nvme": text}
    drives = {}
    for step in steps:
        if step.cut:
            raise UnjudgeableOutput(f"{step.label}: its smart-log was cut short")
        if _ABSENT not in step.body:
            drives[step.label] = step.body
    return drives


def judge_nvme(text: str, profile: GpuProfile | None) -> CheckResult:
    """Every NVMe drive: a critical-warning bit set, media (data integrity) errors or a spare
    at its threshold fail; a temperature warning or wear past the rated endurance warns."""
    findings: list[Finding] = []
    logs = {drive: parse_smart_log(output) for drive, output in _drives(text).items()}
    if not logs:
        raise UnjudgeableOutput("no NVMe controller answered: no drive to judge")
    for drive, log in sorted(logs.items()):
        warning = log["critical_warning"]
        if not 0 <= warning <= 0xFF:
            raise UnjudgeableOutput(f"{drive}: critical_warning {warning} is not one byte")
        for bit, what, severity in CRITICAL_WARNING_BITS:
            if warning & (1 << bit):
                # Samsung drives set bit 2 once wear passes 100% with spare left (Samsung's word
                # on a MZVL2512HCJQ at "Critical Warning: 0x04", smartmontools): end of rated
                # life, not lost data.
                if bit == 2 and log.get("percent_used", 0) >= 100 and log.get("media_errors", 0) == 0:
                    severity = "warn"
                findings.append(Finding(f"critical warning: {what} (0x{warning:02x})", drive, severity))
        if (errors := log.get("media_errors", 0)) > 0:
            findings.append(
                Finding(f"{errors} media and data integrity errors (data the drive could not return)", drive, "fail")
            )
        if "avail_spare" in log and "spare_thresh" in log and log["avail_spare"] <= log["spare_thresh"]:
            findings.append(
                Finding(
                    f"available spare {log['avail_spare']}% at or below its threshold {log['spare_thresh']}%",
                    drive,
                    "fail",
                )
            )
        if (used := log.get("percent_used", 0)) >= 100:
            findings.append(Finding(f"{used}% of its rated endurance used", drive, "warn"))
    metrics = {"drives": len(logs), "smart": logs}
    return verdict(findings, metrics, f"{len(logs)} NVMe drives healthy")
