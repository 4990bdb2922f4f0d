"""The host tools' other common forms, the ones operators paste: `systemctl status` for
`systemctl show`, `lspci` or `lspci -v` for `lspci -vv`, `df -h` for `df -P`. Each shows part
of what its check needs: a fault it shows is judged (a required daemon failed, a GPU gone
from the bus, a full filesystem); otherwise it is refused, naming the form the check needs.
Never a pass: what such a form leaves out (link widths, inodes, mount options, units not
shown) is where the fault may be.
"""

from __future__ import annotations

import re
from typing import Any

from fleetctl.checks._text import UnjudgeableOutput, integer, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding


def judged_or_refused(findings: list[Finding], metrics: dict[str, Any], form: str, needed: str) -> CheckResult:
    """The verdict of a form's faults, or UnjudgeableOutput naming the form the check needs."""
    if any(f.severity in ("fail", "warn") for f in findings):
        return verdict(findings, metrics, "")
    raise UnjudgeableOutput(f"{form} shows no fault, but not all the check judges: run {needed}")


# ---- systemctl status UNIT... ---------------------------------------------------------------

# "<marker> nvidia-fabricmanager.service - NVIDIA fabric manager service": the marker is U+25CF
# (active), U+00D7 (failed, systemd 246+), U+25CB (inactive) or * where the terminal has no Unicode.
_STATUS_UNIT = re.compile(r"^[\u25cf\u00d7\u25cb*]?\s*(?P<unit>[\w@:.\\-]+\.service)(?: - .*)?$")
_STATUS_LOADED = re.compile(r"^\s+Loaded:\s+(?P<state>[\w-]+)")
_STATUS_ACTIVE = re.compile(r"^\s+Active:\s+(?P<state>[\w-]+)(?: \((?P<sub>[^)]+)\))?")
_STATUS_NOT_FOUND = re.compile(r"^Unit (?P<unit>[\w@:.\\-]+\.service) could not be found\.$")


def is_systemctl_status(text: str) -> bool:
    return any(_STATUS_ACTIVE.match(line) for line in text.splitlines()) and "ActiveState=" not in text


def parse_systemctl_status(text: str) -> dict[str, dict[str, str]]:
    """unit (without ".service") -> Id, LoadState, ActiveState, SubState, as `systemctl show`
    gives them, from each unit's block of `systemctl status` (its journal lines ignored)."""
    units: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        if m := _STATUS_NOT_FOUND.match(line.strip()):
            name = m["unit"]
            units[name.removesuffix(".service")] = {
                "Id": name,
                "LoadState": "not-found",
                "ActiveState": "inactive",
                "SubState": "dead",
            }
        elif (m := _STATUS_UNIT.match(line)) and not line.startswith(" "):
            current = {"Id": m["unit"]}
            units[m["unit"].removesuffix(".service")] = current
        elif current is not None and (m := _STATUS_LOADED.match(line)):
            current["LoadState"] = m["state"]
        elif current is not None and (m := _STATUS_ACTIVE.match(line)):
            current["ActiveState"], current["SubState"] = m["state"], m["sub"] or ""
    for name, props in units.items():
        if "LoadState" not in props or "ActiveState" not in props:
            raise UnjudgeableOutput(f"systemctl status of {name} has no Loaded or Active line: cut short")
    return units


# ---- df -h -------------------------------------------------------------------------------

_DF_H_HEADER = re.compile(r"^Filesystem\s+Size\s+Used\s+Avail\s+Use%\s+Mounted on\s*$")
_DF_H_ROW = re.compile(r"^(?P<source>\S+)?\s+\S+\s+\S+\s+\S+\s+(?P<pct>\d+)%\s+(?P<mount>/.*?)\s*$")
# Sources of filesystems with no data of the node's own (memory, kernel interfaces) and of
# read-only images (snap loop devices are always 100% full): never judged full.
_DF_H_PSEUDO = frozenset(["tmpfs", "devtmpfs", "udev", "overlay", "shm", "none", "efivarfs", "cgroup", "cgroup2"])


def is_df_h(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip() and not line.startswith("#")), "")
    return bool(_DF_H_HEADER.match(first.strip()))


def judge_df_h(text: str, profile: GpuProfile | None) -> CheckResult:
    """`df -h`'s Use% of each real filesystem against the profile; a long source that df
    prints on a line of its own is joined to the numbers on the next."""
    rows: dict[str, tuple[str, int]] = {}
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")][1:]
    source = ""
    for line in lines:
        if len(line.split()) == 1:
            source = line.strip()
            continue
        if not (m := _DF_H_ROW.match(line)):
            raise UnjudgeableOutput(f"unreadable df -h row: {line.strip()[:80]!r}")
        rows[m["mount"]] = (m["source"] or source, integer(m["pct"]))
        source = ""
    real = {
        mount: row for mount, row in rows.items() if row[0] not in _DF_H_PSEUDO and not row[0].startswith("/dev/loop")
    }
    if "/" not in real:
        raise UnjudgeableOutput("df -h lists no root filesystem: nothing to judge")
    findings = [
        f
        for mount, (_, used) in sorted(real.items())
        if profile is not None and (f := profile.filesystem_use_percent.judge(used, "space used", "%", mount))
    ]
    metrics = {"filesystems": len(real), "max_use_percent": max(used for _, used in real.values()), "form": "df -h"}
    return judged_or_refused(
        findings, metrics, "df -h", "the host-disk check's df -P, df -Pi and /proc/mounts (inodes, read-only mounts)"
    )
