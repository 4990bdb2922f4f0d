"""`dcgmi diag -r 1|2|3|4` output, as the text table or as `-j` JSON.

Text: rows are `| Test | Pass - All |`, with `- GPU: n` / `- GPUs: a, b` forms, a second
status line for a second group of GPUs, and Warning/Info/Error message rows wrapped over
several lines (DCGM cuts words at the column edge). Sections are marked by dividers in two
styles (`|----- Deployment ---+---|` and `+----- Hardware ---+---+`); DCGM 2.x says
"Blacklist" where 3.x says "Denylist". JSON: the `dcgmi diag -j` document, possibly after
stray non-JSON lines, with `null` entries between tests and gpu_ids as a CSV string or an
integer.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from fleetctl.checks._text import UnjudgeableOutput, integer, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding, Status

STATUSES = ("pass", "fail", "warn", "skip")


@dataclass
class DcgmMessage:
    severity: str  # "fail", "warn" or "info"
    text: str


@dataclass
class DcgmTest:
    category: str
    name: str
    status: str  # one of STATUSES
    gpus: list[int] | None  # None: all GPUs, or the test is not per GPU
    messages: list[DcgmMessage] = field(default_factory=list)


@dataclass
class DcgmDiagResult:
    tests: list[DcgmTest] = field(default_factory=list)
    version: str | None = None
    driver_version: str | None = None
    gpu_count: int | None = None
    complete: bool = False
    node_messages: list[DcgmMessage] = field(default_factory=list)  # messages before any test


def parse_dcgm(text: str) -> DcgmDiagResult:
    start = text.find("{")
    if start != -1 and not _TABLE_ROW.search(text[:start]):
        return _parse_json(text[start:])
    return _parse_table(text)


# ---- JSON -------------------------------------------------------------------------------

# DCGM 4.x reports a test it did not start as "Not Run"; to a judge that is a skip.
_STATUS_SYNONYMS = {"not run": "skip", "skipped": "skip"}
_JSON_MESSAGE_KEYS = (("warnings", "warn"), ("warning", "warn"), ("info", "info"))


def _parse_json(text: str) -> DcgmDiagResult:
    try:
        doc, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        raise UnjudgeableOutput(f"dcgmi diag JSON does not parse: {exc.msg} at char {exc.pos}") from None
    root = next((v for k, v in doc.items() if k.startswith("DCGM") and isinstance(v, dict)), None)
    if root is None or not isinstance(root.get("test_categories"), list):
        raise UnjudgeableOutput("JSON is not dcgmi diag output (no 'DCGM ... Diagnostic' test_categories)")
    # DCGM 4.x moved the version and driver into a "metadata" object and lists the GPUs
    # under "entity_groups"; 3.x keeps "version" in the diagnostic object.
    metadata = doc.get("metadata") if isinstance(doc.get("metadata"), dict) else {}
    result = DcgmDiagResult(
        version=root.get("version") or metadata.get("version"),
        complete=True,
        driver_version=metadata.get("Driver Version Detected"),
    )
    gpu_ids: set[int] = set()
    for category in root["test_categories"]:
        for test in category.get("tests") or []:
            if test is None:
                continue
            name = test.get("name", "?")
            entries = [e for e in test.get("results") or [] if e.get("entity_group", "GPU") == "GPU"]
            # 4.x: the test's own verdict beside the per-GPU ones (it can fail while every GPU passes)
            summary = test.get("test_summary")
            entries += [dict(summary, gpu_ids=None)] if isinstance(summary, dict) and "status" in summary else []
            for entry in entries:
                gpus = _json_gpu_ids(entry.get("gpu_ids", entry.get("gpu_id", entry.get("entity_id"))))
                gpu_ids.update(gpus or [])
                status = str(entry.get("status", "")).lower()
                status = _STATUS_SYNONYMS.get(status, status)
                if status not in STATUSES:
                    raise UnjudgeableOutput(f"unknown dcgmi status {entry.get('status')!r} in {name}")
                messages = [
                    DcgmMessage(severity, _json_message_text(m))
                    for key, severity in _JSON_MESSAGE_KEYS
                    for m in _as_list(entry.get(key))
                ]
                result.tests.append(DcgmTest(category.get("category", ""), name, status, gpus, messages))
    listed = [
        e
        for g in doc.get("entity_groups") or []
        if isinstance(g, dict) and g.get("entity_group") == "GPU"
        for e in g.get("entities") or []
    ]
    result.gpu_count = len(listed) or len(gpu_ids) or None
    return result


def _json_gpu_ids(value: object) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        return [value]
    return [integer(part) for part in str(value).split(",") if part.strip()]


def _json_message_text(message: object) -> str:
    return (
        str(message.get("warning", message.get("message", json.dumps(message))))
        if isinstance(message, dict)
        else str(message)
    )


def _as_list(value: object) -> list[Any]:
    return [] if value is None else value if isinstance(value, list) else [value]


# ---- text table -------------------------------------------------------------------------

_TABLE_ROW = re.compile(r"^\|(?P<left>[^|]*)\|(?P<right>.*?)\|?\s*$", re.MULTILINE)
_DIVIDER = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+[+|]")
_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+\s*$")
_STATUS = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)(?:\s+-\s+(?P<scope>.+))?$")
_SCOPE = re.compile(r"^(?:All|GPUs?:\s*(?P<ids>\S.*))$")
_GPU_STATUS = re.compile(r"^GPU(?P<gpu>\d+):\s*(?P<status>Pass|Fail|Warn|Skip)$")  # DCGM 4.x: a row per GPU
_MESSAGE_ROWS = {"Warning": "warn", "Info": "info", "Error": "fail"}
_METADATA = {"DCGM Version": "version", "Driver Version Detected": "driver_version"}


def _parse_table(text: str) -> DcgmDiagResult:
    result = DcgmDiagResult()
    section = ""
    continues_test = False  # an empty-left row under a test row is a second status line
    current: DcgmMessage | None = None
    owner: DcgmTest | None = None  # the test row the rows below it belong to
    for line in text.splitlines():
        line = line.rstrip()
        if m := _DIVIDER.match(line):
            section, current, continues_test, owner = m["name"].strip(), None, False, None
            continue
        if _BORDER.match(line) and section:
            result.complete = True  # the border after the first section closes the table
            break
        m = _TABLE_ROW.match(line)
        if not m:
            continue
        # The right cell is one pad space, a fixed-width chunk of text, two pad spaces and
        # "|"; keeping the chunk's own trailing spaces is what tells wrapped words apart.
        left, cell = m["left"].strip(), m["right"][1:-2] if line.endswith("|") else m["right"][1:]
        if not section:  # the "| Diagnostic | Result |" heading
            continue
        if not left:
            if owner is not None and (g := _GPU_STATUS.match(cell.strip())):
                result.tests.append(DcgmTest(owner.category, owner.name, g["status"].lower(), [integer(g["gpu"])]))
                current, continues_test = None, False
            elif current is not None:
                current.text += cell
            elif continues_test:
                _add_status(result, result.tests[-1], cell.strip())
            continue
        current, continues_test = None, False
        if left not in _MESSAGE_ROWS:
            owner = None
        if left in _METADATA:
            setattr(result, _METADATA[left], cell.strip())
        elif left == "GPU Device IDs Detected":
            result.gpu_count = len([d for d in cell.split(",") if d.strip()])
        elif left in _MESSAGE_ROWS:
            current = DcgmMessage(_MESSAGE_ROWS[left], cell)
            (result.tests[-1].messages if result.tests else result.node_messages).append(current)
        else:
            test = owner = DcgmTest(section, left, "", None)
            _add_status(result, test, cell.strip())
            result.tests.append(test)
            continues_test = True
    for message in result.node_messages + [m for t in result.tests for m in t.messages]:
        message.text = " ".join(message.text.split())
    return result


def _add_status(result: DcgmDiagResult, test: DcgmTest, cell: str) -> None:
    """Read 'Pass', 'Fail - All', 'Pass - GPUs: 1, 2'; a second line for the same test
    (e.g. 'Fail - GPU: 0' under 'Pass - GPUs: 1, ...') becomes its own entry."""
    m = _STATUS.match(cell)
    scope = _SCOPE.match(m["scope"]) if m and m["scope"] else None
    if not m or (m["scope"] and not scope):
        raise UnjudgeableOutput(f"unreadable dcgmi result {cell!r} for {test.name!r}")
    gpus = [integer(i) for i in scope["ids"].split(",")] if scope and scope["ids"] else None
    if test.status:  # continuation line: a second group of GPUs for the same test
        test = DcgmTest(test.category, test.name, "", None)
        result.tests.append(test)
    test.status, test.gpus = m["status"].lower(), gpus


# ---- judgement --------------------------------------------------------------------------


_SEVERITY_ORDER = ("pass", "skip", "warn", "fail")  # a test's worst entry is its status
_EUD = re.compile(r"(?:cpu_)?eud|extended utility diagnostics?", re.IGNORECASE)


def judge_dcgm(text: str, profile: GpuProfile | None) -> CheckResult:
    if (m := re.search(r"^Error: (.+)$", text, re.MULTILINE)) and not _TABLE_ROW.search(text) and "{" not in text:
        raise UnjudgeableOutput(f"dcgmi failed to run: {m[1].strip()}")
    diag = parse_dcgm(text)
    if not diag.tests:
        raise UnjudgeableOutput("no dcgmi diag results in the output")
    findings: list[Finding] = [Finding(m.text, _gpu_of(m.text), m.severity) for m in diag.node_messages]
    for test in diag.tests:
        where = _where(test.gpus)
        explained = [m for m in test.messages if m.severity != "info"]
        if test.status in ("fail", "warn") or (test.status == "skip" and explained):
            # One finding per DCGM message, so each failing GPU is named where DCGM names it.
            # A skip DCGM explains with a warning or error is the fault it names.
            severity, verb = {"fail": ("fail", "failed"), "warn": ("warn", "warned"), "skip": ("fail", "skipped")}[
                test.status
            ]
            findings += [
                Finding(f"{test.name} {verb}: {m.text}", _gpu_of(m.text) or where, severity) for m in explained
            ]
            findings += [] if explained else [Finding(f"{test.name} {verb}", where, severity)]
        else:
            # A warning under a passing test still needs a look (e.g. thermal violations).
            findings += [Finding(f"{test.name}: {m.text}", _gpu_of(m.text) or where, m.severity) for m in explained]
        findings += [
            Finding(f"{test.name}: {m.text}", _gpu_of(m.text) or where, "info")
            for m in test.messages
            if m.severity == "info"
        ]
    status_of: dict[str, str] = {}
    for test in diag.tests:
        if _SEVERITY_ORDER.index(test.status) >= _SEVERITY_ORDER.index(status_of.get(test.name, "pass")):
            status_of[test.name] = test.status
    # Level 4's Extended Utility Diagnostics run only where NVIDIA's EUD package is installed
    # (DCGM's eud plugin): skipped without a reason, it is absent, said and not counted.
    absent_eud = [name for name, status in status_of.items() if status == "skip" and _EUD.fullmatch(name)]
    skipped = [name for name, status in status_of.items() if status == "skip" and name not in absent_eud]
    findings += [Finding(f"{name} not run: the EUD package is not on this node", None, "info") for name in absent_eud]
    metrics = {
        "tests": len(status_of),
        "passed": sum(s == "pass" for s in status_of.values()),
        "failed": sum(s == "fail" for s in status_of.values()),
        "warned": sum(s == "warn" for s in status_of.values()),
        "skipped": len(skipped),
        "eud_not_run": bool(absent_eud),
        "failed_tests": sorted(n for n, s in status_of.items() if s == "fail"),
        "skipped_tests": skipped,
        "gpu_count": diag.gpu_count,
        "dcgm_version": diag.version,
        "driver_version": diag.driver_version,
    }
    if any(f.severity == "fail" for f in findings):
        return verdict(findings, metrics, "")
    if not diag.complete:
        raise UnjudgeableOutput("dcgmi diag table is not closed: the output was cut short")
    if skipped:
        # A test the run level asked for and DCGM did not run proves nothing: the node
        # cannot be judged (a pass needs evidence that the thing was tested).
        findings += [Finding(f"{name} skipped: not tested", None, "info") for name in skipped]
        reason = (
            f"dcgmi diag skipped {len(skipped)} of {len(status_of)} tests ({', '.join(skipped[:4])}"
            + (", ...)" if len(skipped) > 4 else ")")
            + ": what they test is unproven, cannot judge"
        )
        return CheckResult(Status.ERROR, metrics, findings, reason)
    if profile is not None and diag.gpu_count is not None and diag.gpu_count < profile.gpu_count:
        findings.append(Finding(f"dcgmi saw {diag.gpu_count} GPUs, {profile.name} has {profile.gpu_count}"))
    return verdict(
        findings,
        metrics,
        f"{metrics['passed']} of {metrics['tests']} dcgmi diag tests passed" + ("; EUD not run" if absent_eud else ""),
    )


def _where(gpus: list[int] | None) -> str | None:
    if gpus is None:
        return None
    return f"GPU {gpus[0]}" if len(gpus) == 1 else "GPUs " + ", ".join(map(str, gpus))


def _gpu_of(message: str) -> str | None:
    m = re.search(r"\bGPU (\d+)\b", message)
    return f"GPU {m[1]}" if m else None
