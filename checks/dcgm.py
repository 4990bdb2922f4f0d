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

from checks._text import UnjudgeableOutput, integer, verdict
from checks.profiles import GpuProfile
from checks.result import CheckResult, Finding

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

_JSON_MESSAGE_KEYS = (("warnings", "warn"), ("warning", "warn"), ("info", "info"))


def _parse_json(text: str) -> DcgmDiagResult:
    try:
        doc, _ = json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as exc:
        raise UnjudgeableOutput(f"dcgmi diag JSON does not parse: {exc.msg} at char {exc.pos}") from None
    root = next((v for k, v in doc.items() if k.startswith("DCGM") and isinstance(v, dict)), None)
    if root is None or not isinstance(root.get("test_categories"), list):
        raise UnjudgeableOutput("JSON is not dcgmi diag output (no 'DCGM ... Diagnostic' test_categories)")
    result = DcgmDiagResult(version=root.get("version"), complete=True)
    gpu_ids: set[int] = set()
    for category in root["test_categories"]:
        for test in category.get("tests") or []:
            if test is None:
                continue
            for entry in test.get("results") or []:
                gpus = _json_gpu_ids(entry.get("gpu_ids", entry.get("gpu_id", entry.get("entity_id"))))
                gpu_ids.update(gpus or [])
                status = str(entry.get("status", "")).lower()
                if status not in STATUSES:
                    raise UnjudgeableOutput(f"unknown dcgmi status {entry.get('status')!r} in {test.get('name')}")
                messages = [
                    DcgmMessage(severity, _json_message_text(m))
                    for key, severity in _JSON_MESSAGE_KEYS
                    for m in _as_list(entry.get(key))
                ]
                result.tests.append(DcgmTest(category.get("category", ""), test.get("name", "?"), status, gpus, messages))
    result.gpu_count = len(gpu_ids) or None
    return result


def _json_gpu_ids(value) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, int):
        return [value]
    return [integer(part) for part in str(value).split(",") if part.strip()]


def _json_message_text(message) -> str:
    return message.get("warning", message.get("message", json.dumps(message))) if isinstance(message, dict) else str(message)


def _as_list(value) -> list:
    return [] if value is None else value if isinstance(value, list) else [value]


# ---- text table -------------------------------------------------------------------------

_TABLE_ROW = re.compile(r"^\|(?P<left>[^|]*)\|(?P<right>.*?)\|?\s*$", re.MULTILINE)
_DIVIDER = re.compile(r"^[|+]-+\s+(?P<name>[A-Za-z][A-Za-z ]*?)\s+-+[+|]")
_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+\s*$")
_STATUS = re.compile(r"^(?P<status>Pass|Fail|Warn|Skip)(?:\s+-\s+(?P<scope>.+))?$")
_SCOPE = re.compile(r"^(?:All|GPUs?:\s*(?P<ids>\S.*))$")
_MESSAGE_ROWS = {"Warning": "warn", "Info": "info", "Error": "fail"}
_METADATA = {"DCGM Version": "version", "Driver Version Detected": "driver_version"}


def _parse_table(text: str) -> DcgmDiagResult:
    result = DcgmDiagResult()
    section = ""
    continues_test = False  # an empty-left row under a test row is a second status line
    current: DcgmMessage | None = None
    for line in text.splitlines():
        line = line.rstrip()
        if m := _DIVIDER.match(line):
            section, current, continues_test = m["name"].strip(), None, False
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
            if current is not None:
                current.text += cell
            elif continues_test:
                _add_status(result, result.tests[-1], cell.strip())
            continue
        current, continues_test = None, False
        if left in _METADATA:
            setattr(result, _METADATA[left], cell.strip())
        elif left == "GPU Device IDs Detected":
            result.gpu_count = len([d for d in cell.split(",") if d.strip()])
        elif left in _MESSAGE_ROWS:
            current = DcgmMessage(_MESSAGE_ROWS[left], cell)
            (result.tests[-1].messages if result.tests else result.node_messages).append(current)
        else:
            test = DcgmTest(section, left, "", None)
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


def judge_dcgm(text: str, profile: GpuProfile | None) -> CheckResult:
    if m := re.search(r"^Error: (.+)$", text, re.MULTILINE):
        if not _TABLE_ROW.search(text) and "{" not in text:
            raise UnjudgeableOutput(f"dcgmi failed to run: {m[1].strip()}")
    diag = parse_dcgm(text)
    if not diag.tests:
        raise UnjudgeableOutput("no dcgmi diag results in the output")
    findings: list[Finding] = [Finding(m.text, _gpu_of(m.text), m.severity) for m in diag.node_messages]
    for test in diag.tests:
        where = _where(test.gpus)
        explained = [m for m in test.messages if m.severity != "info"]
        if test.status in ("fail", "warn"):
            # One finding per DCGM message, so each failing GPU is named where DCGM names it.
            severity, verb = ("fail", "failed") if test.status == "fail" else ("warn", "warned")
            findings += [Finding(f"{test.name} {verb}: {m.text}", _gpu_of(m.text) or where, severity) for m in explained]
            findings += [] if explained else [Finding(f"{test.name} {verb}", where, severity)]
        else:
            if test.status == "skip":
                findings.append(Finding(f"{test.name} skipped", where, "info"))
            # A warning under a passing test still needs a look (e.g. thermal violations).
            findings += [Finding(f"{test.name}: {m.text}", _gpu_of(m.text) or where, m.severity) for m in explained]
        findings += [
            Finding(f"{test.name}: {m.text}", _gpu_of(m.text) or where, "info") for m in test.messages if m.severity == "info"
        ]
    metrics = {
        "tests": len(diag.tests),
        "passed": sum(t.status == "pass" for t in diag.tests),
        "failed": sum(t.status == "fail" for t in diag.tests),
        "warned": sum(t.status == "warn" for t in diag.tests),
        "skipped": sum(t.status == "skip" for t in diag.tests),
        "failed_tests": sorted({t.name for t in diag.tests if t.status == "fail"}),
        "gpu_count": diag.gpu_count,
        "dcgm_version": diag.version,
        "driver_version": diag.driver_version,
    }
    if any(f.severity == "fail" for f in findings):
        return verdict(findings, metrics, "")
    if not diag.complete:
        raise UnjudgeableOutput("dcgmi diag table is not closed: the output was cut short")
    if profile is not None and diag.gpu_count is not None and diag.gpu_count < profile.gpu_count:
        findings.append(Finding(f"dcgmi saw {diag.gpu_count} GPUs, {profile.name} has {profile.gpu_count}"))
    return verdict(findings, metrics, f"{metrics['passed']} of {metrics['tests']} dcgmi diag results passed")


def _where(gpus: list[int] | None) -> str | None:
    if gpus is None:
        return None
    return f"GPU {gpus[0]}" if len(gpus) == 1 else "GPUs " + ", ".join(map(str, gpus))


def _gpu_of(message: str) -> str | None:
    m = re.search(r"\bGPU (\d+)\b", message)
    return f"GPU {m[1]}" if m else None
