"""`dcgmi health -c` (`--check`): what DCGM's background health watches found, as the text
tree dcgmi prints (dcgmi/Health.cpp, CheckWatches with DcgmiOutputTree(28, 60)):

    | Health Monitor Report                                                                |
    | Overall Health            | Failure                                                  |
    | GPU                       |                                                          |
    | -> 1                      | Failure                                                  |
    |    -> Errors              |                                                          |
    |       -> Memory system    | Failure                                                  |
    |                           | Green can be emerald and beautiful, but there are        |
    |                           | shades of green which are sure to disappoint.            |

An entity group (GPU, Switch, ConnectX...), its entities by id with their health, each
entity's systems under Errors with theirs, and each system's messages cut at 54 characters
over continuation rows. Healthy is positive evidence only when the report and its Overall
Health row are there: "Error: Health watches not enabled" or anything else is unjudgeable.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetctl.checks._text import UnjudgeableOutput, lines_of, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding

HEALTH = {"Healthy": "pass", "Warning": "warn", "Failure": "fail"}
_ROW = re.compile(r"^\|\s?(?P<name>[^|]*?)\s*\|\s?(?P<value>.*?)\s*\|\s*$")


@dataclass
class SystemIncident:
    entity: str  # "GPU 1", "Switch 0", "ConnectX 2"
    system: str  # "Memory system", "PCIe system", "NVLINK system", "Driver"...
    health: str  # pass | warn | fail
    message: str = ""


@dataclass
class HealthReport:
    overall: str  # pass | warn | fail
    incidents: list[SystemIncident] = field(default_factory=list)


def _health(word: str, where: str) -> str:
    if word not in HEALTH:
        raise UnjudgeableOutput(f"{where}: health {word[:40]!r} is not one of {', '.join(HEALTH)}")
    return HEALTH[word]


def parse_dcgm_health(text: str) -> HealthReport:
    if m := re.search(r"^Error: (.+)$", text, re.MULTILINE):
        raise UnjudgeableOutput(f"dcgmi health failed: {m[1].strip()}")
    if "Health Monitor Report" not in text:
        raise UnjudgeableOutput("no dcgmi health report in the output")
    overall: str | None = None
    incidents: list[SystemIncident] = []
    group = entity = None
    for line in lines_of(text):
        m = _ROW.match(line.strip())
        if not m:
            continue  # a border (+---+), or the header row (one column)
        cell, value = m["name"], m["value"]
        name, nested = cell.strip(), cell != cell.lstrip()
        if name == "Overall Health":
            overall = _health(value, "Overall Health")
        elif name == "-> Errors":
            continue
        elif name.startswith("-> ") and not nested:  # an entity of the group above: "-> 3"
            if group is None:
                raise UnjudgeableOutput(f"an entity row before its group: {line.strip()[:60]!r}")
            entity = f"{group} {name[3:].strip()}"
            _health(value, entity)
        elif name.startswith("-> "):  # one of the entity's systems, under Errors
            if entity is None:
                raise UnjudgeableOutput(f"a system row before its entity: {line.strip()[:60]!r}")
            incidents.append(SystemIncident(entity, name[3:].strip(), _health(value, f"{entity} {name[3:]}")))
        elif not name and value:  # the message of the system above, continued
            if not incidents:
                raise UnjudgeableOutput(f"a message row before its system: {line.strip()[:60]!r}")
            incidents[-1].message = f"{incidents[-1].message} {value}".strip()
        elif name and not value and overall is not None:
            group = name  # an entity group: GPU, Switch, ConnectX...
    if overall is None:
        raise UnjudgeableOutput("the report has no Overall Health row")
    return HealthReport(overall, incidents)


def judge_dcgm_health(text: str, profile: GpuProfile | None) -> CheckResult:
    report = parse_dcgm_health(text)
    findings = [
        Finding(f"{i.system}: {i.message}" if i.message else i.system, i.entity, i.health) for i in report.incidents
    ]
    if report.overall != "pass" and not findings:
        # DCGM's overall health says something is wrong and names nothing: still a finding.
        findings.append(Finding("DCGM health watches report a problem without naming it", None, report.overall))
    metrics = {"incidents": len(report.incidents)}
    return verdict(findings, metrics, "DCGM health watches: healthy")
