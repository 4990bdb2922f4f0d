"""The host around the GPUs: PCIe links and their error counters, system memory and its
corrected/uncorrected errors, CPUs online, filesystems and mounts, the NVIDIA daemons, the
driver and kernel against the fleet's baseline, and the clock. Each a pure parser of one
tool's output and a judge against the node's profile (checks.profiles: host_*, and the lists
of services, mounts and versions). Output that cannot be read is an error, never a pass.

Several checks run a few commands in one shell; their outputs come back as a transcript
(checks.transcript: each under its `### fleetctl step: <label>` line).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from fleetctl.checks._text import UnjudgeableOutput, integer, number, verdict
from fleetctl.checks.host_forms import (
    is_df_h,
    is_systemctl_status,
    judge_df_h,
    judged_or_refused,
    parse_systemctl_status,
)
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding

# ---- PCIe links: lspci -vv ------------------------------------------------------------------

# "18:00.0 3D controller: NVIDIA Corporation GH100 [H100 SXM5 80GB] (rev a1)", with or
# without a domain ("0000:18:00.0") and lspci -nn's "[0302]" / "[10de:2330]".
_LSPCI_DEVICE = re.compile(
    r"^(?P<address>(?:[0-9a-f]{4}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) (?P<class>[^:]+?)(?: \[[0-9a-f]{4}\])?: (?P<name>.+)$"
)
_LNK = re.compile(
    r"^\s+Lnk(?P<which>Cap|Sta):\s+(?:Port #\d+, )?Speed (?P<speed>[\d.]+GT/s|unknown)(?: \((?:downgraded|ok)\))?, "
    r"Width x(?P<width>\d+)"
)
_VENDORS = ("NVIDIA Corporation", "Mellanox Technologies")
# Idle GPUs lower their link speed to save power (and raise it under load), so a GPU's speed
# below its capability is no fault; a NIC's is. A width below capability is a fault for both:
# the link trained on fewer lanes (a riser, a seating, a bent pin) and stays so.
_GPU_CLASSES = ("3D controller", "VGA compatible controller")


@dataclass(frozen=True)
class PcieLink:
    address: str
    device_class: str
    name: str
    cap_speed: float | None  # GT/s; None where lspci does not know the speed ("unknown")
    cap_width: int
    speed: float | None
    width: int
    # Config space reads all-ones ("(rev ff)", "!!! Unknown header type 7f"): the device is
    # listed but no longer answers, as a GPU that has fallen off the bus.
    lost: bool = False
    # The output shows the link (lspci -vv as root); lspci and lspci -v list the device alone.
    linked: bool = True

    @property
    def is_gpu(self) -> bool:
        return self.device_class in _GPU_CLASSES


def parse_lspci(text: str) -> list[PcieLink]:
    """The NVIDIA and Mellanox devices of `lspci -vv` with their link capability and status.
    lspci run without root prints "Capabilities: <access denied>" and no link: unreadable."""
    if "<access denied>" in text:
        raise UnjudgeableOutput("lspci could not read the PCIe capabilities (<access denied>): run it as root")
    links: list[PcieLink] = []
    device: re.Match[str] | None = None
    fields: dict[str, re.Match[str]] = {}

    def close() -> None:
        if device is None or not device["name"].startswith(_VENDORS):
            return
        if device["name"].endswith("(rev ff)"):
            links.append(PcieLink(device["address"], device["class"], device["name"], None, 0, None, 0, lost=True))
            return
        if "Cap" not in fields or "Sta" not in fields:
            # lspci or lspci -v (no link status at all), or a -vv output cut short: told below.
            links.append(PcieLink(device["address"], device["class"], device["name"], None, 0, None, 0, linked=False))
            return
        cap, sta = fields["Cap"], fields["Sta"]
        links.append(
            PcieLink(
                device["address"],
                device["class"],
                device["name"],
                _speed(cap["speed"]),
                integer(cap["width"]),
                _speed(sta["speed"]),
                integer(sta["width"]),
            )
        )

    for line in text.splitlines():
        if m := _LSPCI_DEVICE.match(line):
            close()
            device, fields = m, {}
        elif device is not None and (m := _LNK.match(line)):
            fields.setdefault(m["which"], m)  # the Express capability's, before any other
    close()
    unlinked = [link for link in links if not link.linked and not link.lost]
    if unlinked and len(unlinked) < len([link for link in links if not link.lost]):
        raise UnjudgeableOutput(f"{unlinked[0].address}: no LnkCap/LnkSta lines: cut short or not lspci -vv")
    return links


def _speed(cell: str) -> float | None:
    return None if cell == "unknown" else number(cell[: -len("GT/s")])


def judge_pcie(text: str, profile: GpuProfile | None) -> CheckResult:
    links = parse_lspci(text)
    if not links:
        raise UnjudgeableOutput("no NVIDIA or Mellanox device in the lspci -vv output")
    findings: list[Finding] = []
    for link in links:
        what = "GPU" if link.is_gpu else "device"
        if link.lost:
            findings.append(
                Finding(f"{what} listed but not answering on the bus (rev ff): fallen off the bus", link.address)
            )
        elif link.width < link.cap_width:
            findings.append(
                Finding(
                    f"{what} link trained to x{link.width} of x{link.cap_width} ({link.name})", link.address, "fail"
                )
            )
        if link.cap_speed is not None and link.speed is not None and link.speed < link.cap_speed:
            findings.append(
                Finding(
                    f"{what} link at {link.speed:g} GT/s of {link.cap_speed:g} GT/s ({link.name})"
                    + ("; idle GPUs lower their link speed" if link.is_gpu else ""),
                    link.address,
                    "info" if link.is_gpu else "warn",
                )
            )
    gpus = [link for link in links if link.is_gpu]
    if profile is not None and len(gpus) < profile.gpu_count:
        findings.append(Finding(f"{len(gpus)} GPUs on the PCI bus, {profile.name} has {profile.gpu_count}"))
    metrics = {
        "devices": len(links),
        "gpus": len(gpus),
        "narrow_links": [link.address for link in links if link.width < link.cap_width],
        "lost": [link.address for link in links if link.lost],
    }
    if not any(link.linked for link in links if not link.lost):
        # lspci or lspci -v: the devices, their rev ff and the GPU count, without their links.
        return judged_or_refused(findings, metrics, "lspci without -vv", "lspci -vv as root (LnkCap/LnkSta)")
    return verdict(findings, metrics, f"{len(links)} NVIDIA/Mellanox links at their full width")


# ---- PCIe AER counters: grep -H . /sys/bus/pci/devices/*/aer_dev_* ------------------------------

_AER_LINE = re.compile(
    r"^/sys/bus/pci/devices/(?P<address>[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])/"
    r"aer_dev_(?P<kind>correctable|fatal|nonfatal):(?P<name>[A-Za-z_][A-Za-z0-9_ /-]*?) (?P<count>\S+)$"
)
_AER_TOTALS = {"correctable": "TOTAL_ERR_COR", "fatal": "TOTAL_ERR_FATAL", "nonfatal": "TOTAL_ERR_NONFATAL"}
COUNTER_MAX = 2**64 - 1


def _output_lines(text: str) -> Iterator[tuple[int, str]]:
    """(line number, line) of a tool's output, less blank lines and a saved file's '#' header
    (no line of sysfs, systemctl or grep output starts with '#')."""
    return ((n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.startswith("#"))


def parse_aer(text: str) -> dict[str, dict[str, int]]:
    """address -> {"correctable"/"fatal"/"nonfatal": the file's TOTAL_ERR_* count}. A device
    whose file lacks its total line was cut short."""
    totals: dict[str, dict[str, int]] = {}
    seen: set[tuple[str, str]] = set()
    for line_no, line in _output_lines(text):
        if not (m := _AER_LINE.match(line)):
            raise UnjudgeableOutput(f"line {line_no}: not an aer_dev_* counter: {line.strip()[:80]!r}")
        count = integer(m["count"])
        if not 0 <= count <= COUNTER_MAX:
            raise UnjudgeableOutput(f"line {line_no}: count {m['count'][:24]} is out of the counter range")
        seen.add((m["address"], m["kind"]))
        if m["name"] == _AER_TOTALS[m["kind"]]:
            totals.setdefault(m["address"], {})[m["kind"]] = count
    if missing := sorted(key for key in seen if key[1] not in totals.get(key[0], {})):
        raise UnjudgeableOutput(
            f"{missing[0][0]}: aer_dev_{missing[0][1]} has no {_AER_TOTALS[missing[0][1]]} line: cut short"
        )
    return totals


def judge_pcie_aer(text: str, profile: GpuProfile | None) -> CheckResult:
    totals = parse_aer(text)
    if not totals:
        raise UnjudgeableOutput("no AER counters (the kernel has none for these devices, or the output is empty)")
    findings: list[Finding] = []
    for address, counts in sorted(totals.items()):
        if counts.get("fatal"):
            findings.append(Finding(f"{counts['fatal']} fatal uncorrectable PCIe errors since boot", address, "fail"))
        if counts.get("nonfatal"):
            findings.append(
                Finding(f"{counts['nonfatal']} non-fatal uncorrectable PCIe errors since boot", address, "warn")
            )
        if profile is not None and (
            f := profile.pcie_correctable_errors.judge(
                counts.get("correctable", 0), "correctable PCIe errors since boot", "errors", address
            )
        ):
            findings.append(f)
    metrics = {"devices": len(totals), **{kind: sum(c.get(kind, 0) for c in totals.values()) for kind in _AER_TOTALS}}
    return verdict(findings, metrics, f"{len(totals)} devices, no uncorrectable PCIe error")


# ---- the steps of a host transcript ---------------------------------------------------------


def _steps(text: str, *labels: str) -> dict[str, str]:
    from fleetctl.checks.transcript import read_transcript

    steps = {s.label: s for s in read_transcript(text)}
    for label in labels:
        if label not in steps or steps[label].cut:
            raise UnjudgeableOutput(
                f"no {'complete ' if label in steps else ''}'{label}' step: cut short or another tool's output"
            )
    return {label: steps[label].body for label in labels}


# ---- memory: /proc/meminfo and EDAC --------------------------------------------------------

_MEMTOTAL = re.compile(r"^MemTotal:\s+(?P<kb>\d+) kB\s*$", re.MULTILINE)
_EDAC_LINE = re.compile(r"^/sys/devices/system/edac/mc/(?P<mc>mc\d+)/(?P<kind>ce|ue)_count:(?P<count>\S+)$")


def parse_edac(text: str) -> dict[str, dict[str, int]]:
    counts: dict[str, dict[str, int]] = {}
    for line_no, line in _output_lines(text):
        if not (m := _EDAC_LINE.match(line)):
            raise UnjudgeableOutput(f"edac line {line_no}: not an EDAC counter: {line.strip()[:80]!r}")
        count = integer(m["count"])
        if not 0 <= count <= COUNTER_MAX:
            raise UnjudgeableOutput(f"edac line {line_no}: count {m['count'][:24]} is out of the counter range")
        counts.setdefault(m["mc"], {})[m["kind"]] = count
    return counts


def judge_memory(text: str, profile: GpuProfile | None) -> CheckResult:
    steps = _steps(text, "meminfo", "edac")
    if not (m := _MEMTOTAL.search(steps["meminfo"])):
        raise UnjudgeableOutput("no MemTotal line: not /proc/meminfo")
    gib = integer(m["kb"]) / 2**20
    edac = parse_edac(steps["edac"])
    findings: list[Finding] = []
    if profile is not None and (f := profile.host_memory_gib.judge(round(gib, 1), "system memory (MemTotal)", "GiB")):
        findings.append(f)
    corrected = sum(c.get("ce", 0) for c in edac.values())
    uncorrected = sum(c.get("ue", 0) for c in edac.values())
    if not edac:
        # No EDAC driver: memory errors cannot be seen, so none can be vouched for.
        findings.append(Finding("no EDAC memory controller counters: memory errors are not visible", None, "warn"))
    for mc, counts in sorted(edac.items()):
        if counts.get("ue"):
            findings.append(Finding(f"{counts['ue']} uncorrected memory errors since boot", mc, "fail"))
    if (
        edac
        and profile is not None
        and (f := profile.memory_corrected_errors.judge(corrected, "corrected memory errors since boot", "errors"))
    ):
        findings.append(f)
    metrics = {
        "memory_gib": round(gib, 1),
        "memory_controllers": len(edac),
        "corrected_errors": corrected,
        "uncorrected_errors": uncorrected,
    }
    return verdict(findings, metrics, f"{gib:.0f} GiB, {len(edac)} memory controllers without uncorrected errors")


# ---- CPUs: lscpu ----------------------------------------------------------------------------

_LSCPU_FIELD = re.compile(r"^\s*(?P<key>[A-Za-z][A-Za-z0-9() -]*?):\s+(?P<value>.*?)\s*$")


def cpu_list_count(value: str) -> int:
    """How many CPUs a kernel CPU list names: "0-3,5-7" is 7."""
    total = 0
    for part in value.split(","):
        low, _, high = part.strip().partition("-")
        first, last = integer(low), integer(high) if high else integer(low)
        if last < first or last > 1 << 20:
            raise UnjudgeableOutput(f"unreadable CPU list {value[:40]!r}")
        total += last - first + 1
    return total


def judge_cpu(text: str, profile: GpuProfile | None) -> CheckResult:
    fields = {m["key"]: m["value"] for line in text.splitlines() if (m := _LSCPU_FIELD.match(line))}
    if "CPU(s)" not in fields or "On-line CPU(s) list" not in fields:
        raise UnjudgeableOutput("no CPU(s) / On-line CPU(s) list lines: not lscpu output")
    total, online = integer(fields["CPU(s)"]), cpu_list_count(fields["On-line CPU(s) list"])
    offline = cpu_list_count(fields["Off-line CPU(s) list"]) if fields.get("Off-line CPU(s) list") else 0
    findings = _cpus_offline(fields, total, online, offline)
    if profile is not None and online < profile.host_cpu_count:
        # A site profile's count (packaged profiles require none: HGX hosts of one GPU model
        # ship with different CPUs, and what the check exists for is CPUs gone offline).
        findings.append(Finding(f"{online} CPUs online, {profile.name} has {profile.host_cpu_count}"))
    metrics = {"cpus": total, "online": online, "offline": offline, "model": fields.get("Model name")}
    return verdict(findings, metrics, f"{online} of {total} CPUs online")


def _cpus_offline(fields: dict[str, str], total: int, online: int, offline: int) -> list[Finding]:
    """None offline: every CPU the kernel counts (CPU(s)) is in the On-line list."""
    if offline:
        return [Finding(f"{offline} of {total} CPUs offline ({fields['Off-line CPU(s) list'][:60]})")]
    if online != total:
        return [Finding(f"{online} of {total} CPUs online ({fields['On-line CPU(s) list'][:60]})")]
    return []


# ---- filesystems: df -P, df -Pi, /proc/mounts ----------------------------------------------

# Filesystems that hold no data of the node's own (memory, kernel interfaces, images that are
# read-only by design: squashfs snaps, a mounted ISO, EROFS): never judged full or read-only.
_PSEUDO_FS = frozenset(
    [
        "tmpfs",
        "devtmpfs",
        "proc",
        "sysfs",
        "cgroup",
        "cgroup2",
        "overlay",
        "squashfs",
        "devpts",
        "securityfs",
        "pstore",
        "bpf",
        "tracefs",
        "debugfs",
        "configfs",
        "fusectl",
        "mqueue",
        "hugetlbfs",
        "autofs",
        "efivarfs",
        "binfmt_misc",
        "nsfs",
        "ramfs",
        "rpc_pipefs",
        "selinuxfs",
        "nfsd",
        "fuse.lxcfs",
        "iso9660",
        "udf",
        "erofs",
    ]
)
_DF_ROW = re.compile(
    r"^(?P<source>\S+)\s+(?P<total>\d+)\s+(?P<used>\d+)\s+(?P<avail>\d+)\s+(?P<pct>\d+%|-)\s+(?P<mount>/\S*)$"
)


@dataclass(frozen=True)
class Mount:
    source: str
    target: str
    fstype: str
    options: tuple[str, ...]


def parse_df(text: str, header: str) -> dict[str, tuple[str, int | None]]:
    """mount point -> (source, use percent; None where df prints "-") of `df -P` / `df -Pi`."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines or not lines[0].startswith("Filesystem") or header not in lines[0]:
        raise UnjudgeableOutput(f"no df header with {header!r}: not df -P output")
    rows: dict[str, tuple[str, int | None]] = {}
    for line in lines[1:]:
        if not (m := _DF_ROW.match(line)):
            raise UnjudgeableOutput(f"unreadable df row: {line.strip()[:80]!r}")
        rows[m["mount"]] = (m["source"], None if m["pct"] == "-" else integer(m["pct"][:-1]))
    return rows


def parse_mounts(text: str) -> dict[str, Mount]:
    """/proc/mounts: source, target, type, options, dump, pass per line (the last mount on a
    target is the one in effect)."""
    mounts: dict[str, Mount] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        cells = line.split()
        if len(cells) != 6:
            raise UnjudgeableOutput(f"unreadable /proc/mounts line: {line.strip()[:80]!r}")
        target = cells[1].replace("\\040", " ")
        mounts[target] = Mount(cells[0], target, cells[2], tuple(cells[3].split(",")))
    if "/" not in mounts:
        raise UnjudgeableOutput("/proc/mounts lists no root filesystem: cut short")
    return mounts


def data_mounts(mounts: dict[str, Mount]) -> dict[str, Mount]:
    """The mounts that hold the node's data: neither kernel interfaces nor read-only by design."""
    return {target: m for target, m in mounts.items() if m.fstype not in _PSEUDO_FS}


def judge_disk(text: str, profile: GpuProfile | None) -> CheckResult:
    if is_df_h(text):
        return judge_df_h(text, profile)
    steps = _steps(text, "df", "df -i", "mounts")
    space, inodes, mounts = (
        parse_df(steps["df"], "Capacity"),
        parse_df(steps["df -i"], "IUse%"),
        parse_mounts(steps["mounts"]),
    )
    findings: list[Finding] = []
    real = data_mounts(mounts)
    for target, mount in sorted(real.items()):
        if "ro" in mount.options:
            findings.append(Finding(f"mounted read-only ({mount.fstype} {mount.source})", target, "fail"))
        if (
            profile is not None
            and target in space
            and (used := space[target][1]) is not None
            and (f := profile.filesystem_use_percent.judge(used, "space used", "%", target))
        ):
            findings.append(f)
        if (
            profile is not None
            and target in inodes
            and (used := inodes[target][1]) is not None
            and (f := profile.inode_use_percent.judge(used, "inodes used", "%", target))
        ):
            findings.append(f)
    for required in profile.required_mounts if profile is not None else ():
        if required not in mounts:
            findings.append(Finding("required filesystem not mounted", required, "fail"))
        elif required not in space:
            findings.append(
                Finding("required filesystem mounted but df cannot read it (a hung mount?)", required, "fail")
            )
    metrics = {
        "filesystems": len(real),
        "read_only": sorted(t for t, m in real.items() if "ro" in m.options),
        "max_use_percent": max((space[t][1] or 0 for t in real if t in space), default=None),
        "max_inode_use_percent": max((inodes[t][1] or 0 for t in real if t in inodes), default=None),
    }
    if not real or "/" not in space:
        raise UnjudgeableOutput("df lists no root filesystem: nothing to judge")
    return verdict(findings, metrics, f"{len(real)} filesystems writable, none full")


# ---- services: systemctl show -p Id,LoadState,ActiveState,SubState UNIT... ------------------

_SHOW_FIELD = re.compile(r"^(?P<key>Id|LoadState|ActiveState|SubState)=(?P<value>\S*)$")


def parse_systemctl_show(text: str) -> dict[str, dict[str, str]]:
    """unit (without ".service") -> its properties; systemctl separates units by a blank line."""
    units: dict[str, dict[str, str]] = {}
    body = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    for block in re.split(r"\n\s*\n", body.strip()):
        props: dict[str, str] = {}
        for line in block.splitlines():
            if not (m := _SHOW_FIELD.match(line.strip())):
                raise UnjudgeableOutput(f"unreadable systemctl show line: {line.strip()[:80]!r}")
            props[m["key"]] = m["value"]
        if set(props) != {"Id", "LoadState", "ActiveState", "SubState"}:
            raise UnjudgeableOutput(f"a unit without all of Id, LoadState, ActiveState, SubState: {block[:60]!r}")
        units[props["Id"].removesuffix(".service")] = props
    return units


def judge_services(text: str, profile: GpuProfile | None) -> CheckResult:
    if is_systemctl_status(text):
        return _judge_systemctl_status(text, profile)
    units = parse_systemctl_show(text)
    findings = service_findings(units, profile)
    required = set(profile.required_services) if profile is not None else set()
    metrics = {"units": {n: p["ActiveState"] for n, p in units.items()}, "required": sorted(required)}
    return verdict(
        findings, metrics, f"{sum(p['ActiveState'] == 'active' for p in units.values())} of {len(units)} units active"
    )


def _judge_systemctl_status(text: str, profile: GpuProfile | None) -> CheckResult:
    units = parse_systemctl_status(text)
    if not units:
        raise UnjudgeableOutput("no unit in the systemctl status output")
    # A unit the status does not show was not asked about: no evidence either way.
    findings = [f for f in service_findings(units, profile) if f.what != "required unit not queried"]
    metrics = {"units": {n: p["ActiveState"] for n, p in units.items()}, "form": "systemctl status"}
    return judged_or_refused(
        findings, metrics, "systemctl status", "systemctl show -p Id,LoadState,ActiveState,SubState UNIT..."
    )


def service_findings(units: dict[str, dict[str, str]], profile: GpuProfile | None) -> list[Finding]:
    """The profile's required units each queried and running; a unit not required that is
    not running is said, not judged."""
    findings: list[Finding] = []
    required = set(profile.required_services) if profile is not None else set()
    for name in sorted(required - set(units)):
        findings.append(Finding("required unit not queried", name))
    for name, props in sorted(units.items()):
        running = props["LoadState"] == "loaded" and props["ActiveState"] == "active"
        if not running:
            state = f"{props['LoadState']}, {props['ActiveState']} ({props['SubState']})"
            findings.append(
                Finding(
                    f"not running: {state}" + ("" if name in required else "; not required here"),
                    name,
                    "fail" if name in required else "info",
                )
            )
    return findings


# ---- versions: the loaded driver, the userspace driver, the kernel -------------------------

_MODULE_VERSION = re.compile(
    r"^NVRM version: NVIDIA UNIX (?:Open )?(?:\w+ )?Kernel Module(?: for \w+)?\s+(?P<version>\d+\.\d+(?:\.\d+)?)\s"
)
_MISMATCH = "Driver/library version mismatch"
_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")
_KERNEL_RELEASE = re.compile(r"[0-9][0-9A-Za-z.+_~-]{0,99}")


def judge_versions(text: str, profile: GpuProfile | None) -> CheckResult:
    steps = _steps(text, "module", "driver", "kernel")
    findings: list[Finding] = []
    module = _MODULE_VERSION.match(steps["module"].strip())
    userspace = [line.strip() for line in steps["driver"].splitlines() if line.strip()]
    kernel = steps["kernel"].strip()
    if not _KERNEL_RELEASE.fullmatch(kernel):
        raise UnjudgeableOutput(f"unreadable kernel release {kernel[:40]!r}: not uname -r")
    if _MISMATCH in steps["driver"]:
        findings.append(
            Finding(
                f"nvidia-smi: {_MISMATCH}: the loaded kernel module is not the installed driver "
                "(reload the driver or reboot)"
            )
        )
    elif not module:
        raise UnjudgeableOutput(
            "no NVRM version line: the NVIDIA kernel module is not loaded, or not /proc/driver/nvidia/version"
        )
    elif not userspace or not all(_VERSION.fullmatch(v) for v in userspace):
        raise UnjudgeableOutput(f"unreadable driver versions from nvidia-smi: {steps['driver'].strip()[:60]!r}")
    else:
        if others := sorted(set(userspace) - {module["version"]}):
            findings.append(Finding(f"nvidia-smi reports driver {others[0]}, the loaded module is {module['version']}"))
        if profile is not None and profile.driver_versions and module["version"] not in profile.driver_versions:
            findings.append(
                Finding(
                    f"driver {module['version']} is not the fleet's ({', '.join(profile.driver_versions)})",
                    None,
                    "warn",
                )
            )
    if profile is not None and profile.kernel_releases and kernel not in profile.kernel_releases:
        findings.append(
            Finding(f"kernel {kernel} is not the fleet's ({', '.join(profile.kernel_releases)})", None, "warn")
        )
    baseline = profile is not None and bool(profile.driver_versions or profile.kernel_releases)
    metrics = {
        "driver_module": module["version"] if module else None,
        "driver_userspace": sorted(set(userspace)),
        "kernel": kernel,
        "baseline": baseline,
    }
    return verdict(
        findings,
        metrics,
        f"driver {module['version'] if module else '?'} loaded and installed, kernel {kernel}"
        + ("" if baseline else "; no fleet baseline in the profile"),
    )


# ---- clock: chronyc tracking ----------------------------------------------------------------

_CHRONY_FIELD = re.compile(r"^(?P<key>[A-Z][A-Za-z ()]+?)\s*:\s(?P<value>.*?)\s*$")
_SYSTEM_TIME = re.compile(r"^(?P<seconds>\d+\.\d+) seconds (?P<side>slow|fast) of NTP time$")


def judge_clock(text: str, profile: GpuProfile | None) -> CheckResult:
    fields = {m["key"]: m["value"] for line in text.splitlines() if (m := _CHRONY_FIELD.match(line.strip()))}
    if not {"Reference ID", "System time", "Leap status"} <= fields.keys():
        raise UnjudgeableOutput("no Reference ID / System time / Leap status lines: not chronyc tracking output")
    if not (m := _SYSTEM_TIME.match(fields["System time"])):
        raise UnjudgeableOutput(f"unreadable System time {fields['System time'][:60]!r}")
    offset_ms = number(m["seconds"]) * 1000.0 * (-1 if m["side"] == "slow" else 1)
    findings: list[Finding] = []
    leap = fields["Leap status"]
    if leap != "Normal":
        findings.append(
            Finding(
                f"chrony: leap status {leap!r}, reference {fields['Reference ID'][:40]}: the clock is not synchronised"
            )
        )
    if profile is not None and (
        f := profile.clock_offset_ms.judge(round(abs(offset_ms), 3), "clock offset from NTP", "ms")
    ):
        findings.append(f)
    metrics = {
        "offset_ms": round(offset_ms, 3),
        "leap_status": leap,
        "reference": fields["Reference ID"],
        "stratum": fields.get("Stratum"),
    }
    return verdict(findings, metrics, f"synchronised, {abs(offset_ms):.3f} ms {m['side']}")
