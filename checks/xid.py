"""Kernel logs (dmesg, `dmesg -T`, journalctl short and `-o json`, raw /dev/kmsg records) and
Fabric Manager's log: NVIDIA Xid reports, judged by NVIDIA's Xid catalog, and GPU, NVSwitch
and fabric failures that carry no Xid line (checks/catalog/signatures.tsv).

    [Fri Aug 30 11:43:14 2024] NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, ...
    May 18 19:02:39 host kernel: NVRM: Xid (PCI:0000:2b:00): 79, GPU has fallen off the bus.
    6,3964,206764307,-;NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.
    {"__REALTIME_TIMESTAMP":"1747594959000000","MESSAGE":"NVRM: Xid (PCI:0000:2b:00): 79, ..."}

Each event keeps the log's own timestamp: dmesg's seconds since boot, the wall clock of
`dmesg -T` and journal lines, /dev/kmsg's microseconds as seconds since boot, and a
journal JSON record's __REALTIME_TIMESTAMP as ISO 8601 UTC.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from fleetctl.checks._text import UnjudgeableOutput, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import SEVERITIES, CheckResult, Finding
from fleetctl.checks.signatures import ACTIONS, FINDING_SEVERITY, signatures
from fleetctl.checks.xid_catalog import (
    BUCKET_ACTIONS,
    NODE_ACTIONS,
    UNKNOWN,
    XidAction,
    xid_action,
    xid_catalog,
    xid_catalog_version,
)

__all__ = [
    "ACTIONS",
    "BUCKET_ACTIONS",
    "SEVERITIES",
    "XidAction",
    "XidEvent",
    "judge_xid",
    "parse_kernel_log",
    "parse_xid_lines",
    "xid_action",
    "xid_catalog",
    "xid_catalog_version",
]

# Bounds on the numbers a log line may carry. NVIDIA's codes are below 200 and SXids five
# digits; Linux pids stop at PID_MAX_LIMIT (2^22). A larger number is not a report this
# parser understands, and it must not travel on to an INTEGER column or a retry loop.
XID_CODE_MAX = 65_535
SXID_CODE_MAX = 99_999
PID_MAX = 1 << 22
KMSG_USEC_MAX = 10**15  # ~31 years of uptime
REALTIME_USEC_MAX = 4_102_444_800 * 10**6  # 2100-01-01
_MAX_DIGITS = 20  # longer digit runs are rejected before int() reads them

_XID = re.compile(
    r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)\): (?P<code>\d+),\s*"
    r"(?:pid=(?P<pid>'[^']*'|[^,\s]+),\s*)?(?:name=(?P<name>[^,]*),\s*)?(?P<message>.*?)\s*$"
)
_TIMESTAMP = re.compile(
    r"^\s*(?:\[(?P<bracket>[^\]]+)\]"  # dmesg: [   10.73] or dmesg -T: [Fri Aug 30 11:43:09 2024]
    r"|(?P<journal>\d{4}-\d\d-\d\dT\S+|[A-Z][a-z]{2}\s+\d+\s+\d\d:\d\d:\d\d)\s)"  # journal: ISO or "May 18 19:02:39"
)
_KMSG = re.compile(r"^(?P<prio>\d+),(?P<seq>\d+),(?P<usec>\d+),[^;]*;(?P<message>.*)$")
_PCI = r"(?P<pci>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}(?:\.[0-7])?)"
# Signatures of checks/catalog/signatures.tsv that are read from kernel logs, each behind
# the substrings a line must contain for its pattern to be tried (a long log is mostly
# lines that match nothing, and a substring test costs far less than a regex search).
_SIGNATURE_GATES = {
    "gpu_fallen_off_bus": ("fallen off the bus",),
    "gsp_rpc_timeout": ("waiting for RPC", "GSP Timeout"),
    "gpu_reset_required": ("NV_ERR_RESET_REQUIRED",),
    "nvlink_link_detect_failure": ("RxDet", "Rx Detect", "raining"),
    "gpu_init_failed": ("RmInitAdapter failed", "rm_init_adapter", "Cannot attach gpu"),
    "gsp_boot_failed": ("GSP firmware", "GFW boot", "booting GSP"),
    "fabric_manager_topology_mismatch": ("supported system topology",),
    # The host's own hardware, read from the same kernel log (passive signals of the host checks).
    "mce_fatal": ("Fatal machine check", "Processor context corrupt"),
    "mce_hardware_error": ("[Hardware Error]",),
    "edac_uncorrected": (" UE ",),
    "edac_corrected": (" CE ",),
    "pcie_aer_fatal": ("(Fatal)",),
    "pcie_aer_nonfatal": ("(Non-Fatal)",),
    "pcie_aer_corrected": ("severity=Correct",),
    "cpu_thermal_throttle": ("cpu clock throttled",),
    # The fabric's NICs and the storage, read from the same log (the agent's node watch).
    "mlx5_health_compromised": ("health compromised",),
    "mlx5_port_module_error": ("Port module event[error]",),
    "mlx5_pcie_power_insufficient": ("insufficient power on the PCIe slot",),
    "nfs_server_not_responding": ("not responding",),
    "fs_remounted_read_only": ("Remounting filesystem read-only",),
    "hung_task": ("blocked for more than",),
}
_INTEREST = ("Xid (", "detected NVSwitch", *(g for gates in _SIGNATURE_GATES.values() for g in gates))
_SIGNATURE_PATTERNS = {
    # "NVRM: GPU 0000:2b:00.0: GPU has fallen off the bus.", "NVRM: GPU at PCI:0000:65:00: ...",
    # and older drivers' "NVRM: The NVIDIA GPU 0000:01:00.0 (PCI ID: 10de:1b80) installed in this
    # system has fallen off the bus and is not responding to commands."
    "gpu_fallen_off_bus": re.compile(rf"NVRM: .*?(?:GPU (?:at )?(?:PCI:)?{_PCI}\b.*?)?fallen off the bus"),
    "gsp_rpc_timeout": re.compile(
        r"Timeout (?:after \d+s )?(?:of )?waiting for RPC (?:response )?from (?P<gpu>GPU\d+ )?GSP"
        r"|_kgspLogXid119: \*+ GSP Timeout"  # the banner the driver logs before its Xid 119 line
    ),
    "gpu_reset_required": re.compile(r"NV_ERR_RESET_REQUIRED"),
    "nvlink_link_detect_failure": re.compile(
        r"knvlinkDiscoverPostRxDetLinks_\w+: Getting peer\w* postRxDetLinkMask failed"
        r"|knvlinkUpdatePostRxDetectLinkMask_\w+: Failed to update Rx Detect Link mask"
        r"|NVLink.{0,80}training (?:failed|failure)",
        re.IGNORECASE,
    ),
    # "NVRM: GPU 0000:0a:00.0: RmInitAdapter failed! (0x24:0x72:1568)", its "rm_init_adapter
    # failed, device minor number 5", older drivers' "NVRM: RmInitAdapter failed! (0x26:0xffff:1375)"
    # and "rm_init_adapter(0) failed", and "osInitNvMapping: *** Cannot attach gpu".
    "gpu_init_failed": re.compile(
        rf"NVRM: (?:GPU {_PCI}: )?(?:RmInitAdapter failed!|rm_init_adapter(?:\(\d+\))? failed)"
        r"|NVRM: osInitNvMapping: \*+ Cannot attach gpu"
    ),
    # "RmInitAdapter: Cannot initialize GSP firmware RM", "kgspWaitForGfwBootOk_TU102: failed to
    # wait for GFW boot complete", "_kgspBootGspRm: unexpected WPR2 already up, cannot proceed
    # with booting GSP".
    "gsp_boot_failed": re.compile(
        r"NVRM: (?:RmInitAdapter: Cannot initialize GSP firmware RM"
        r"|kgspWaitForGfwBootOk_\w+: failed to wait for GFW boot complete"
        r"|_kgspBootGspRm: .*cannot proceed with booting GSP)"
    ),
    "fabric_manager_topology_mismatch": re.compile(
        r"detected number of NVSwitches don't match with any supported system topology"
    ),
    "mce_fatal": re.compile(
        r"Kernel panic - not syncing: Fatal machine check|Machine check: Processor context corrupt"
    ),
    "mce_hardware_error": re.compile(
        r"mce: \[Hardware Error\]: (?:Machine check events logged|CPU \d+: Machine Check)"
    ),
    # "EDAC MC0: 1 UE memory scrubbing error on CPU_SrcID#0_Ha#0_Chan#0_DIMM#0",
    # "EDAC MC3: 1 CE memory read error on CPU_SrcID#0_Channel#0_DIMM#0 (channel:0 slot:0 ...)"
    "edac_uncorrected": re.compile(r"EDAC (?:\w+ )?MC\d+: \d+ UE "),
    "edac_corrected": re.compile(r"EDAC (?:\w+ )?MC\d+: \d+ CE "),
    # "pcieport 0000:00:1d.0: PCIe Bus Error: severity=Corrected, type=Physical Layer, ..." (kernels
    # before 6.x say Corrected/Uncorrected, later ones Correctable/Uncorrectable)
    "pcie_aer_fatal": re.compile(rf"{_PCI}: (?:AER: )?PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Fatal\)"),
    "pcie_aer_nonfatal": re.compile(rf"{_PCI}: (?:AER: )?PCIe Bus Error: severity=Uncorrect(?:ed|able) \(Non-Fatal\)"),
    "pcie_aer_corrected": re.compile(rf"{_PCI}: (?:AER: )?PCIe Bus Error: severity=Correct(?:ed|able)\b"),
    "cpu_thermal_throttle": re.compile(
        r"CPU\d+: (?:(?:Core|Package) )?[Tt]emperature above threshold, cpu clock throttled"
    ),
    # "mlx5_core 0000:41:00.0: poll_health:852:(pid 0): device's health compromised - reached miss count"
    "mlx5_health_compromised": re.compile(rf"mlx5_core {_PCI}: .*device's health compromised"),
    # "mlx5_core 0000:5c:00.0: mlx5_port_module_event:1131:(pid 0): Port module event[error]: module 0,
    # Cable error, High Temperature"
    "mlx5_port_module_error": re.compile(rf"mlx5_core {_PCI}: .*Port module event\[error\]: module \d+"),
    # "mlx5_core 0000:5c:00.0: mlx5_pcie_event:299:(pid 268269): Detected insufficient power on the PCIe slot (27W)."
    "mlx5_pcie_power_insufficient": re.compile(rf"mlx5_core {_PCI}: .*Detected insufficient power on the PCIe slot"),
    # "nfs: server hermine.idb.hist.no not responding, still trying" (or ", timed out"); its
    # "nfs: server X OK" says it came back.
    "nfs_server_not_responding": re.compile(r"\bnfs: server \S+ not responding, (?:still trying|timed out)"),
    # "EXT4-fs (sdb7): Remounting filesystem read-only"
    "fs_remounted_read_only": re.compile(r"\b[A-Za-z0-9]+-fs \([^)]+\): Remounting filesystem read-only"),
    # "INFO: task kworker/u16:9:7088 blocked for more than 120 seconds."
    "hung_task": re.compile(r"INFO: task .+:\d+ blocked for more than \d+ seconds"),
}
# Fabric Manager's log (/var/log/fabricmanager.log, or syslog with LOG_USE_SYSLOG=1) reports
# an NVSwitch SXid as "[Jul 23 2024 07:53:55] [ERROR] [tid 841] detected NVSwitch fatal error
# 20034 on fid 0 on NVSwitch pci bus id 00000000:86:00.0 physical id 3 port 33".
_FM_SXID = re.compile(
    r"detected NVSwitch (?P<class>fatal|non-fatal) error (?P<code>\d+)(?P<rest>.*?on NVSwitch pci bus id "
    rf"{_PCI}.*?)\s*$"
)
_SXID = re.compile(rf"nvidia-nvswitch\d*: SXid \(PCI:{_PCI}\): (?P<code>\d+), (?P<rest>.*?)\s*$")
_CAUSED_BY = re.compile(r"caused by previous Xid (?P<code>\d+)")
_RECOVERY_ACTION = re.compile(r"to 0x[0-9A-Fa-f]+ \((?P<action>[^)]+)\)")


class BadKernelLog(UnjudgeableOutput):
    """A number in the log is out of the range any real report has: the input is bad data."""


@dataclass(frozen=True)
class XidEvent:
    pci: str
    code: int
    pid: int | None
    process: str | None
    message: str
    timestamp: str | None
    signature: str | None = None  # set when the fault was read from a line with no Xid number


@dataclass(frozen=True)
class SignatureEvent:
    """A failure with no Xid equivalent (NVSwitch SXid, reset required, NVLink detection)."""

    name: str
    where: str | None
    message: str
    timestamp: str | None
    code: int | None = None  # the SXid


@dataclass(frozen=True)
class KernelLog:
    xids: list[XidEvent]
    signatures: list[SignatureEvent]


# Xid 154's message names the recovery the driver now needs.
_RECOVERY_ACTIONS = {
    "None": "ignore",
    "GPU Reset Required": "reset_gpu",
    "Drain and Reset": "reset_gpu",
    "Node Reboot Required": "reboot",
    "OS Reboot": "reboot",
}
# ---- reading the log ---------------------------------------------------------------------


def _bounded(digits: str, limit: int, what: str, line_no: int) -> int:
    if len(digits) > _MAX_DIGITS or int(digits) > limit:
        raise BadKernelLog(
            f"line {line_no}: {what} {digits[:24]}{'...' if len(digits) > 24 else ''} is out of "
            f"range (0..{limit}): not a kernel report"
        )
    return int(digits)


def _records(text: str) -> Iterator[tuple[int, str, bool]]:
    """(line number, message, whether the timestamp is still in the line) for every record
    that may matter. A text line's timestamp is read only when the line is used."""
    if _is_journal_json(text):
        for line_no, line in enumerate(text.splitlines(), 1):
            if line.strip() and not line.startswith("#"):
                yield line_no, line, False
        return
    # The lines worth a regex hold an Xid or SXid report or a signature's gate; str.find
    # locates them at memory speed, and a long log's other lines are never split out.
    starts: set[int] = set()
    for literal in _INTEREST:
        at = text.find(literal)
        while at != -1:
            starts.add(text.rfind("\n", 0, at) + 1)
            line_end = text.find("\n", at)
            at = -1 if line_end == -1 else text.find(literal, line_end)
    line_no, counted_to = 1, 0
    for start in sorted(starts):
        line_no += text.count("\n", counted_to, start)
        counted_to = start
        line_end = text.find("\n", start)
        line = text[start:] if line_end == -1 else text[start:line_end]
        if not line.startswith("#"):  # no kernel record starts so; a saved log's header does
            yield line_no, line.rstrip("\r"), True


def _stamp(message: str, line_no: int, in_line: bool, json_stamp: str | None) -> str | None:
    return _line_stamp(message, line_no) if in_line else json_stamp


def _line_stamp(line: str, line_no: int) -> str | None:
    if k := _KMSG.match(line):
        usec = _bounded(k["usec"], KMSG_USEC_MAX, "/dev/kmsg timestamp", line_no)
        _bounded(k["seq"], 1 << 64, "/dev/kmsg sequence number", line_no)
        _bounded(k["prio"], 1 << 16, "/dev/kmsg priority", line_no)
        return f"{usec // 10**6}.{usec % 10**6:06d}"
    stamp = _TIMESTAMP.match(line)
    return (stamp["bracket"] or stamp["journal"]).strip() if stamp else None


def _is_journal_json(text: str) -> bool:
    """`journalctl -o json`: one JSON object per line (after any '#' comment lines)."""
    for line in _lazy_lines(text):
        if line.strip() and not line.startswith("#"):
            return line.lstrip().startswith("{")
    return False


def _lazy_lines(text: str) -> Iterator[str]:
    """The lines of a text one at a time, without splitting all of a long log up front."""
    start = 0
    while start < len(text):
        end = text.find("\n", start)
        end = len(text) if end == -1 else end
        yield text[start:end]
        start = end + 1


def _journal_json(line: str, line_no: int) -> tuple[str | None, str]:
    """One `journalctl -o json` record: its MESSAGE (a string, or bytes as a list of ints
    when not UTF-8) and __REALTIME_TIMESTAMP (microseconds since the epoch)."""
    try:
        record = json.loads(line)
    except (json.JSONDecodeError, RecursionError):
        raise UnjudgeableOutput(f"line {line_no}: not a journalctl -o json record") from None
    if not isinstance(record, dict) or "MESSAGE" not in record:
        raise UnjudgeableOutput(f"line {line_no}: journal record without MESSAGE")
    message = record["MESSAGE"]
    if isinstance(message, list):
        if not all(isinstance(b, int) and 0 <= b < 256 for b in message):
            raise UnjudgeableOutput(f"line {line_no}: journal MESSAGE is neither text nor bytes")
        message = bytes(message).decode("utf-8", errors="replace")
    if not isinstance(message, str):
        raise UnjudgeableOutput(f"line {line_no}: journal MESSAGE is neither text nor bytes")
    realtime = record.get("__REALTIME_TIMESTAMP")
    stamp = None
    if realtime is not None:
        if not isinstance(realtime, str) or not realtime.isdigit():
            raise BadKernelLog(f"line {line_no}: __REALTIME_TIMESTAMP {str(realtime)[:24]!r} is not microseconds")
        usec = _bounded(realtime, REALTIME_USEC_MAX, "__REALTIME_TIMESTAMP", line_no)
        stamp = datetime.fromtimestamp(usec // 10**6, UTC).replace(microsecond=usec % 10**6).isoformat()
    return stamp, message


@lru_cache(maxsize=4096)  # a host has few GPUs and logs them over and over
def _pci_key(pci: str) -> str:
    """'00000000:9A:00.0' and '0000:9a:00' name the same GPU."""
    domain, bus, device = pci.lower().split(".")[0].split(":")
    return f"{int(domain, 16):04x}:{bus}:{device}"


def _switch_address(pci: str) -> str:
    """The kernel's 'PCI:0000:86:00.0' and Fabric Manager's '00000000:86:00.0' name one switch."""
    function = pci.split(".")[1] if "." in pci else "0"
    return f"{_pci_key(pci)}.{function}"


def parse_kernel_log(text: str) -> KernelLog:
    """Every Xid report, plus the failures logged without one. A fault logged both ways
    (an Xid 79 line and its "fallen off the bus" line) is one event."""
    xids: list[XidEvent] = []
    implied: list[XidEvent] = []
    found: list[SignatureEvent] = []
    json_stamp: str | None = None
    for line_no, message, in_line in _records(text):
        if not in_line:
            json_stamp, message = _journal_json(message, line_no)
        if "SXid (" in message:
            if not (m := _SXID.search(message)):
                raise UnjudgeableOutput(f"line {line_no}: unreadable NVSwitch SXid report: {message.strip()[:80]!r}")
            code = _bounded(m["code"], SXID_CODE_MAX, "SXid", line_no)
            kind = (
                "nvswitch_sxid_fatal"
                if m["rest"].startswith("Fatal")
                else ("nvswitch_sxid_nonfatal" if m["rest"].lower().startswith("non-fatal") else "nvswitch_sxid")
            )
            found.append(
                SignatureEvent(
                    kind, _switch_address(m["pci"]), m["rest"], _stamp(message, line_no, in_line, json_stamp), code
                )
            )
            continue
        if "detected NVSwitch" in message:
            if not (m := _FM_SXID.search(message)):
                raise UnjudgeableOutput(
                    f"line {line_no}: unreadable Fabric Manager NVSwitch report: {message.strip()[:80]!r}"
                )
            code = _bounded(m["code"], SXID_CODE_MAX, "SXid", line_no)
            kind = "nvswitch_sxid_fatal" if m["class"] == "fatal" else "nvswitch_sxid_nonfatal"
            found.append(
                SignatureEvent(
                    kind,
                    _switch_address(m["pci"]),
                    f"{m['class']} error{m['rest']} (Fabric Manager)",
                    _stamp(message, line_no, in_line, json_stamp),
                    code,
                )
            )
            continue
        if "Xid (" in message:
            # A report the driver wrote that this parser cannot read is a damaged log, not a
            # clean one: passing it would hide whatever fault it reported.
            if not (m := _XID.search(message)):
                raise UnjudgeableOutput(f"line {line_no}: unreadable Xid report: {message.strip()[:80]!r}")
            xids.append(_xid_event(m, _stamp(message, line_no, in_line, json_stamp), line_no))
            continue
        for name, gates in _SIGNATURE_GATES.items():
            if not any(gate in message for gate in gates) or not (m := _SIGNATURE_PATTERNS[name].search(message)):
                continue
            signature = signatures()[name]
            text_after = message[message.find("NVRM:") :] if "NVRM:" in message else message.strip()
            if signature.as_xid is not None:
                where = m.groupdict().get("pci") or (m.groupdict().get("gpu") or "").strip() or "unknown GPU"
                implied.append(
                    XidEvent(
                        where.lower() if ":" in where else where,
                        signature.as_xid,
                        None,
                        None,
                        text_after,
                        _stamp(message, line_no, in_line, json_stamp),
                        name,
                    )
                )
            else:
                pci = m.groupdict().get("pci")
                found.append(
                    SignatureEvent(
                        name, pci.lower() if pci else None, text_after, _stamp(message, line_no, in_line, json_stamp)
                    )
                )
            break
    # A GSP timeout names the GPU by index, not by address: any Xid 119 in the log covers it.
    reported = {(_pci_key(e.pci), e.code) for e in xids} | {("any", e.code) for e in xids}
    for event in implied:
        key = (_pci_key(event.pci) if ":" in event.pci else "any", event.code)
        if key not in reported:
            reported.add(key)
            xids.append(event)
    return KernelLog(xids, found)


def _xid_event(m: re.Match[str], stamp: str | None, line_no: int) -> XidEvent:
    code = _bounded(m["code"], XID_CODE_MAX, "Xid code", line_no)
    pid = m["pid"]
    if pid and pid.isdigit():
        pid_value: int | None = _bounded(pid, PID_MAX, "pid", line_no)
    else:
        pid_value = None
    name = m["name"].strip() if m["name"] is not None else None
    return XidEvent(
        pci=m["pci"].lower(),
        code=code,
        pid=pid_value,
        process=None if name in (None, "<unknown>", "'<unknown>'") else name,
        message=m["message"],
        timestamp=stamp,
    )


def parse_xid_lines(text: str) -> list[XidEvent]:
    """The Xid events of a kernel log, including faults logged without an Xid line that
    are the same fault as an Xid (fallen off the bus is Xid 79). Raises BadKernelLog (a
    ValueError with one line saying why) for a number no real report has."""
    return parse_kernel_log(text).xids


# ---- judgement ---------------------------------------------------------------------------


def _classify(event: XidEvent, causes: set[int]) -> tuple[XidAction, str]:
    """The catalog entry as it applies here, and why, where NVIDIA's rule depends on the
    rest of the log: Xid 45 is a fault of its own only when solo; Xid 154 names the
    recovery the driver now needs."""
    entry = xid_action(event.code)
    if event.code == 45:
        cause = _CAUSED_BY.search(event.message)
        others = sorted(causes - {45})
        if cause or others:
            after = cause["code"] if cause else ", ".join(map(str, others))
            return _with(
                entry, "ignore", "info"
            ), f"follows Xid {after}: part of that fault (NVIDIA: not solo, follow the other Xid)"
        return _with(entry, "restart_fabric_manager", "warning"), "solo (NVIDIA: solo Xid 45, restart Fabric Manager)"
    if event.code == 154:
        m = _RECOVERY_ACTION.search(event.message)
        action = _RECOVERY_ACTIONS.get(m["action"].strip(), UNKNOWN) if m else UNKNOWN
        severity = "critical" if action in NODE_ACTIONS else "info" if action == "ignore" else "warning"
        return _with(entry, action, severity), f"driver recovery action: {m['action'] if m else 'not stated'}"
    return entry, ""


def _with(entry: XidAction, action: str, severity: str) -> XidAction:
    return XidAction(
        entry.code, entry.mnemonic, entry.description, action, severity, entry.nvidia_action, entry.nvidia_followup
    )


def _xid_finding(entry: XidAction, event: XidEvent, count: int, note: str) -> Finding:
    nvidia = entry.nvidia_action or "no resolution given"
    if entry.nvidia_followup:
        nvidia += f", then {entry.nvidia_followup}"
    times = f" x{count}" if count > 1 else ""
    what = f"Xid {event.code}{times} {entry.mnemonic} ({entry.description}): {entry.action.replace('_', ' ')}"
    what += (
        f" [NVIDIA: {nvidia}]"
        if entry.mnemonic != "UNKNOWN"
        else f" [not in NVIDIA's Xid catalog of {xid_catalog_version()}]"
    )
    what += f"; {note}" if note else ""
    if event.signature:
        what += f"; read from: {event.message}"
    elif event.message:
        what += f"; {event.message}"
    return Finding(what, event.pci, FINDING_SEVERITY[entry.severity])


def _is_kernel_log(text: str) -> bool:
    return (
        "NVRM:" in text
        or "nvidia-nvswitch" in text
        or "detected NVSwitch" in text
        or _is_journal_json(text)
        or any(_TIMESTAMP.match(line) or _KMSG.match(line) for line in _lazy_lines(text))
    )


def judge_xid(text: str, profile: GpuProfile | None) -> CheckResult:
    del profile  # Xids mean the same on every GPU model
    if not _is_kernel_log(text):
        raise UnjudgeableOutput("not a kernel log (no dmesg, journal or /dev/kmsg lines)")
    log = parse_kernel_log(text)
    causes = {e.code for e in log.xids}
    groups: dict[tuple[str, int], list[XidEvent]] = {}
    for event in log.xids:
        groups.setdefault((event.pci, event.code), []).append(event)
    findings: list[Finding] = []
    actions: list[str] = []
    faults = 0
    for events in groups.values():
        entry, note = _classify(events[0], causes)
        actions.append(entry.action)
        faults += entry.action != "ignore" or entry.severity != "info"
        findings.append(_xid_finding(entry, events[0], len(events), note))
    sig_groups: dict[tuple[str, str | None, int | None], list[SignatureEvent]] = {}
    for sig in log.signatures:
        sig_groups.setdefault((sig.name, sig.where, sig.code), []).append(sig)
    # One SXid is logged as several lines (Data, Fatal/Non-fatal, Severity): its class is
    # the one stated on any of them.
    stated = {(s.where, s.code) for s in log.signatures if s.name != "nvswitch_sxid"}
    shown: set[str] = {e.signature for e in log.xids if e.signature}
    # A GPU's init failure is logged with its address and without ("Cannot attach gpu"): the
    # lines without one add nothing to the GPU's finding.
    addressed = {name for name, where, _ in sig_groups if where is not None}
    for (name, where, code), sig_events in sig_groups.items():
        if (name == "nvswitch_sxid" and (where, code) in stated) or (
            where is None and code is None and name in addressed
        ):
            continue
        shown.add(name)
        signature = signatures()[name]
        actions.append(signature.action)
        faults += 1
        label = (
            f"SXid {code}" + (f" x{len(sig_events)}" if len(sig_events) > 1 else "") + ": " if code is not None else ""
        )
        findings.append(signature.finding(label + sig_events[0].message, where))
    worst = max(actions, key=ACTIONS.index, default=None)
    metrics = {
        "xids": sorted({e.code for e in log.xids}),
        "events": len(log.xids),
        "faults": faults,
        "signatures": sorted(shown),
        "sxids": sorted({s.code for s in log.signatures if s.code is not None}),
        "action": worst or "none",
        "gpus": sorted({e.pci for e in log.xids}),
        "xid_catalog": xid_catalog_version(),
    }
    if log.xids or log.signatures:
        ok = f"{len(log.xids)} Xid events and {len(log.signatures)} other GPU events, none needs action"
    else:
        ok = "no Xid events and no GPU failure signatures"
    return verdict(findings, metrics, ok)
