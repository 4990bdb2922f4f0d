"""Kernel log XID lines (dmesg, `dmesg -T`, journalctl -k) and NVIDIA's XID catalog.

    [Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, ...
    May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
    NVRM: Xid (PCI:0019:01:00): 149, NETIR Fatal XC0 i0 Link -1 (0x000fe406 ...)
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources

from checks._text import UnjudgeableOutput, verdict
from checks.profiles import GpuProfile
from checks.result import CheckResult, Finding

ACTIONS = ("ignore", "restart_app", "reset_gpu", "reboot", "rma")  # mildest first
SEVERITIES = ("info", "warning", "critical")

_XID = re.compile(
    r"NVRM: Xid \(PCI:(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (?P<code>\d+),\s*"
    r"(?:pid=(?P<pid>'[^']*'|[^,\s]+),\s*)?(?:name=(?P<name>[^,]*),\s*)?(?P<message>.*?)\s*$"
)
_TIMESTAMP = re.compile(
    r"^\s*(?:\[(?P<bracket>[^\]]+)\]"  # dmesg: [   10.73] or dmesg -T: [Fri Aug 30 11:43:09 2024]
    r"|(?P<journal>\d{4}-\d\d-\d\dT\S+|[A-Z][a-z]{2}\s+\d+\s+\d\d:\d\d:\d\d)\s)"  # journal: ISO or "May 18 19:02:39"
)


@dataclass(frozen=True)
class XidEvent:
    pci: str
    code: int
    pid: int | None
    process: str | None
    message: str
    timestamp: str | None


@dataclass(frozen=True)
class XidAction:
    code: int
    mnemonic: str
    description: str
    action: str  # one of ACTIONS
    severity: str  # one of SEVERITIES; critical: drain the node now
    nvidia_action: str  # NVIDIA's immediate resolution bucket, verbatim
    nvidia_followup: str


def parse_xid_lines(text: str) -> list[XidEvent]:
    events = []
    for line in text.splitlines():
        m = _XID.search(line)
        if not m:
            continue
        pid = m["pid"]
        name = m["name"].strip() if m["name"] is not None else None
        stamp = _TIMESTAMP.match(line)
        events.append(
            XidEvent(
                pci=m["pci"].lower(),
                code=int(m["code"]),
                pid=int(pid) if pid and pid.isdigit() else None,
                process=None if name in (None, "<unknown>", "'<unknown>'") else name,
                message=m["message"],
                timestamp=(stamp["bracket"] or stamp["journal"]).strip() if stamp else None,
            )
        )
    return events


@cache
def xid_catalog() -> dict[int, XidAction]:
    text = (resources.files("checks") / "catalog" / "xid.tsv").read_text()
    rows = csv.DictReader((line for line in text.splitlines() if not line.startswith("#")), delimiter="\t")
    return {
        int(row["code"]): XidAction(
            int(row["code"]), row["mnemonic"], row["description"], row["action"], row["severity"],
            row["nvidia_action"], row["nvidia_followup"],
        )
        for row in rows
    }


def xid_action(code: int) -> XidAction:
    """The catalog entry; a code NVIDIA has not catalogued gets a GPU reset and a warning,
    so a person looks at it without the node being drained on a guess."""
    return xid_catalog().get(
        code, XidAction(code, "UNKNOWN", "not in NVIDIA's Xid catalog", "reset_gpu", "warning", "", "")
    )


_FINDING_SEVERITY = {"critical": "fail", "warning": "warn", "info": "info"}


def judge_xid(text: str, profile: GpuProfile | None) -> CheckResult:
    del profile  # XIDs mean the same on every GPU model
    if not any(_TIMESTAMP.match(line) or "NVRM:" in line for line in text.splitlines()):
        raise UnjudgeableOutput("not a kernel log (no dmesg or journal lines)")
    events = parse_xid_lines(text)
    findings, worst_action = [], None
    seen: set[tuple[str, int]] = set()
    for event in events:
        entry = xid_action(event.code)
        if worst_action is None or ACTIONS.index(entry.action) > ACTIONS.index(worst_action):
            worst_action = entry.action
        if (event.pci, event.code) in seen:  # GSP timeouts repeat every few seconds
            continue
        seen.add((event.pci, event.code))
        findings.append(
            Finding(
                f"Xid {event.code} ({entry.description}): {entry.action.replace('_', ' ')}; {event.message}",
                event.pci,
                _FINDING_SEVERITY[entry.severity],
            )
        )
    metrics = {
        "xids": sorted({e.code for e in events}),
        "events": len(events),
        "action": worst_action or "none",
        "gpus": sorted({e.pci for e in events}),
    }
    return verdict(findings, metrics, f"{len(events)} XID events, none needs action" if events else "no XID events")
