"""HPL output: NVIDIA HPL (HPL-NVIDIA, per-GPU column) and netlib/vendor HPL (total only).

A run is judged on its result rows (T/V, N, NB, P, Q, Time, Gflops [per GPU]) and the
residual check HPL prints after each (PASSED/FAILED); the end-of-run summary counts are
cross-checked when present. `Prog=` progress lines, NCCL INFO lines and vendor extras
inside the result block are ignored.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetctl.checks._text import UnjudgeableOutput, integer, lines_of, number, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding

_HEADER = re.compile(r"^T/V\s+N\s+NB\s+P\s+Q\s+Time\s+Gflops")
_ROW_START = re.compile(r"^W[A-Z0-9]{2,}\s")  # the T/V code: WR00L2L4, WC0, WC03R2R2 ...
_ROW = re.compile(
    r"^(?P<tv>W[A-Z0-9]+)\s+(?P<n>\S+)\s+(?P<nb>\S+)\s+(?P<p>\S+)\s+(?P<q>\S+)\s+(?P<time>\S+)\s+(?P<gflops>\S+)"
    r"(?:\s+\(\s*(?P<per_gpu>\S+)\s*\))?$"
)
_RESIDUAL_START = "||Ax-b||_oo/(eps*"
_RESIDUAL = re.compile(r"^\|\|Ax-b\|\|_oo/\(eps\*.*\)=\s*(?P<value>\S+)\s+\.+\s+(?P<verdict>PASSED|FAILED)$")
_NORM = re.compile(r"^\|\|[A-Za-z-]+\|\|_(?:oo|1)\s+[. ]*=\s*(?P<value>\S+)$")
_SUMMARY = re.compile(r"^(?P<count>\S+)\s+tests? completed and (?P<kind>passed|failed) residual checks")
_FINISHED = re.compile(r"^Finished\s+(?P<count>\S+)\s+tests? with the following results")


@dataclass
class HplRun:
    tv: str
    n: int
    nb: int
    p: int
    q: int
    time_s: float
    gflops: float
    gflops_per_gpu: float | None  # HPL-NVIDIA prints it; netlib HPL does not know about GPUs
    residual: float | None = None
    residual_passed: bool | None = None


@dataclass
class HplResult:
    runs: list[HplRun] = field(default_factory=list)
    nvidia: bool = False
    finished: int | None = None
    summary_passed: int | None = None
    summary_failed: int | None = None


def parse_hpl(text: str) -> HplResult:
    result = HplResult()
    in_table = False
    for raw in lines_of(text):
        line = raw.strip()
        if _HEADER.match(line):
            in_table = True
            result.nvidia = result.nvidia or "per GPU" in line
        elif in_table and _ROW_START.match(line):
            result.runs.append(_read_row(line))
        elif line.startswith(_RESIDUAL_START):
            m = _RESIDUAL.match(line)
            if not m or not result.runs:
                raise UnjudgeableOutput(f"unreadable HPL residual line: {line[:80]!r}")
            run = result.runs[-1]
            run.residual = number(m["value"])
            run.residual_passed = m["verdict"] == "PASSED"
        elif m := _NORM.match(line):
            number(m["value"])  # read only to reject a garbled block
        elif m := _SUMMARY.match(line):
            count = integer(m["count"])
            if m["kind"] == "passed":
                result.summary_passed = count
            else:
                result.summary_failed = count
        elif m := _FINISHED.match(line):
            result.finished = integer(m["count"])
    return result


def _read_row(line: str) -> HplRun:
    m = _ROW.match(line)
    if not m:
        raise UnjudgeableOutput(f"unreadable HPL result row: {line[:80]!r}")
    per_gpu = m["per_gpu"]
    return HplRun(
        tv=m["tv"],
        n=integer(m["n"]),
        nb=integer(m["nb"]),
        p=integer(m["p"]),
        q=integer(m["q"]),
        time_s=number(m["time"]),
        gflops=number(m["gflops"]),
        gflops_per_gpu=number(per_gpu) if per_gpu is not None else None,
    )


def judge_hpl(text: str, profile: GpuProfile | None) -> CheckResult:
    hpl = parse_hpl(text)
    if not hpl.runs:
        raise UnjudgeableOutput("no HPL result row (T/V N NB P Q Time Gflops) in the output")
    worst = min(hpl.runs, key=lambda r: r.gflops)
    per_gpu = [r.gflops_per_gpu for r in hpl.runs if r.gflops_per_gpu is not None]
    checked = [r for r in hpl.runs if r.residual_passed is not None]
    metrics = {
        "gflops": worst.gflops,
        "gflops_per_gpu": min(per_gpu) if per_gpu else None,
        "tflops_per_gpu": round(min(per_gpu) / 1000, 3) if per_gpu else None,
        "residual": max((r.residual for r in checked if r.residual is not None), default=None),
        "residual_passed": all(r.residual_passed for r in checked) if checked else None,
        "n": worst.n,
        "ranks": worst.p * worst.q,
        "time_s": worst.time_s,
        "runs": len(hpl.runs),
    }
    findings: list[Finding] = []
    for run in hpl.runs:
        if run.residual_passed is False:
            findings.append(Finding(f"residual check FAILED ({run.residual:g}): wrong results", run.tv))
    if hpl.summary_failed:
        findings.append(Finding(f"{hpl.summary_failed} test(s) failed the residual check"))
    if findings:
        return verdict(findings, metrics, "")
    if len(checked) < len(hpl.runs):
        findings.append(
            Finding("no residual check after the result row: output cut short or excerpted", severity="warn")
        )
    if hpl.finished is not None and hpl.summary_passed is not None and hpl.summary_passed < hpl.finished:
        findings.append(Finding(f"only {hpl.summary_passed} of {hpl.finished} tests passed", severity="warn"))
    reason = f"{worst.gflops:g} GFLOPS"
    if metrics["gflops_per_gpu"] is not None:
        reason += f" ({metrics['gflops_per_gpu']:g} per GPU)"
    reason += ", residual PASSED" if metrics["residual_passed"] else ""
    if profile is not None:
        if metrics["gflops_per_gpu"] is None:
            reason += f"; no per-GPU figure (netlib HPL), {profile.name} floor not applied"
        elif finding := profile.hpl_gflops_per_gpu.judge(metrics["gflops_per_gpu"], "HPL per GPU", "GFLOPS"):
            findings.append(finding)
    return verdict(findings, metrics, reason)
