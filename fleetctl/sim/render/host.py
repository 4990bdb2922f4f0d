"""The host's tools (read by checks.host): lspci -vv, the AER and EDAC counters as
`grep -H . FILES` prints them, /proc/meminfo, lscpu, df -P / df -Pi, /proc/mounts,
systemctl show, /proc/driver/nvidia/version, uname -r, chronyc tracking."""

from __future__ import annotations

import fnmatch
import time

from fleetctl.sim.node import KERNEL_RELEASE, NodeState, ToolOutput

_T = "\t"
# lspci's name of each ConnectX the simulator knows (pci.ids); another CA type gets "Device".
_HCA_NAMES = {
    "MT4129": "MT2910 Family [ConnectX-7]",
    "MT41692": "MT43244 BlueField-3 integrated ConnectX-7 network controller",
}


def _link_block(cap_speed: str, width: int, narrow: bool) -> list[str]:
    status = f"Speed {cap_speed}, Width x8 (downgraded)" if narrow else f"Speed {cap_speed}, Width x{width}"
    return [
        f"{_T}Capabilities: [60] Express (v2) Endpoint, MSI 00",
        f"{_T * 2}LnkCap:{_T}Port #0, Speed {cap_speed}, Width x{width}, ASPM not supported",
        f"{_T * 3}ClockPM- Surprise- LLActRep- BwNot- ASPMOptComp+",
        f"{_T * 2}LnkSta:{_T}{status}",
        f"{_T * 3}TrErr- Train- SlotClk+ DLActive- BWMgmt- ABWMgmt-",
    ]


def render_lspci(node: NodeState) -> str:
    """`lspci -vv` of the GPUs and ConnectX HCAs (root's view: the capabilities are readable).
    A GPU fallen off the bus answers all-ones: "(rev ff)" and no capability list."""
    host, p = node.host, node.profile
    devices: list[tuple[int, list[str]]] = []
    speed = {3: "8GT/s", 4: "16GT/s", 5: "32GT/s", 6: "64GT/s"}.get(p.pcie_gen, "32GT/s")
    # A GPU the driver never initialised is still on the bus, bound to nvidia.
    for gpu in node.gpus + node.uninitialised_gpus:
        if gpu.lost:
            devices.append(
                (
                    gpu.bus,
                    [
                        f"{gpu.bus:02x}:00.0 3D controller: NVIDIA Corporation Device {p.pci_device_id >> 16:04x} (rev ff)",
                        f"{_T}!!! Unknown header type 7f",
                    ],
                )
            )
            continue
        lines = [
            f"{gpu.bus:02x}:00.0 3D controller: NVIDIA Corporation {p.architecture} [{p.gpu_name}] (rev a1)",
            f"{_T}Subsystem: NVIDIA Corporation Device {p.pci_subsystem_id >> 16:04x}",
        ]
        devices.append(
            (
                gpu.bus,
                lines
                + _link_block(speed, 16, gpu.bus in host.narrow_pci_buses)
                + [f"{_T}Kernel driver in use: nvidia"],
            )
        )
    for hca in node.hcas:
        kind = "Infiniband controller" if hca.link_layer == "InfiniBand" else "Ethernet controller"
        name = _HCA_NAMES.get(hca.ca_type, f"Device {hca.ca_type}")
        lines = [f"{hca.pci_bus:02x}:00.0 {kind}: Mellanox Technologies {name}"]
        devices.append(
            (
                hca.pci_bus,
                lines
                + _link_block("32GT/s", 16, hca.pci_bus in host.narrow_pci_buses)
                + [f"{_T}Kernel driver in use: mlx5_core"],
            )
        )
    return "".join("\n".join(lines) + "\n\n" for _, lines in sorted(devices))


_CORRECTABLE = (
    "Receiver Error",
    "Bad TLP",
    "Bad DLLP",
    "RELAY_NUM Rollover",
    "Replay Timer Timeout",
    "Advisory Non-Fatal",
    "Corrected Internal Error",
    "Header Log Overflow",
)
_UNCORRECTABLE = (
    "Undefined",
    "Data Link Protocol",
    "Surprise Down Error",
    "Poisoned TLP",
    "Flow Control Protocol",
    "Completion Timeout",
    "Completer Abort",
    "Unexpected Completion",
    "Receiver Overflow",
    "Malformed TLP",
    "ECRC",
    "Unsupported Request",
    "ACS Violation",
    "Uncorrectable Internal Error",
    "MC Blocked TLP",
    "AtomicOp Egress Blocked",
    "TLP Prefix Blocked Error",
)


def _aer_file(kind: str, fatal: int) -> list[str]:
    if kind == "correctable":
        return [f"{name} 0" for name in _CORRECTABLE] + ["TOTAL_ERR_COR 0"]
    count = fatal if kind == "fatal" else 0
    return [f"{name} {count if name == 'Surprise Down Error' else 0}" for name in _UNCORRECTABLE] + [
        f"TOTAL_ERR_{kind.upper()} {count}"
    ]


def _sysfs_files(node: NodeState) -> dict[str, list[str]]:
    """The sysfs counter files the host checks read, path -> lines (as sysfs gives them)."""
    files: dict[str, list[str]] = {}
    buses = sorted({g.bus for g in node.gpus + node.uninitialised_gpus if not g.lost} | {h.pci_bus for h in node.hcas})
    for bus in buses:
        for kind in ("correctable", "fatal", "nonfatal"):
            fatal = 1 if bus in node.host.aer_fatal_buses else 0
            files[f"/sys/bus/pci/devices/0000:{bus:02x}:00.0/aer_dev_{kind}"] = _aer_file(kind, fatal)
    for mc in range(4):
        files[f"/sys/devices/system/edac/mc/mc{mc}/ce_count"] = [str(node.host.edac_corrected if mc == 1 else 0)]
        files[f"/sys/devices/system/edac/mc/mc{mc}/ue_count"] = [str(node.host.edac_uncorrected if mc == 1 else 0)]
    return files


def render_grep_files(node: NodeState, patterns: list[str]) -> str:
    """`grep -H -s . PATTERN...` over the sysfs counter files, each glob expanded in order."""
    files = _sysfs_files(node)
    out = []
    for pattern in patterns:
        for path in sorted(p for p in files if fnmatch.fnmatchcase(p, pattern)):
            out += [f"{path}:{line}" for line in files[path]]
    return "".join(line + "\n" for line in out)


def render_meminfo(node: NodeState) -> str:
    total = node.host.memory_kb
    free = int(total * 0.978)
    return (
        f"MemTotal:       {total:10d} kB\nMemFree:        {free:10d} kB\nMemAvailable:   {int(total * 0.985):10d} kB\n"
        f"Buffers:        {103144:10d} kB\nCached:         {9637720:10d} kB\nSwapCached:     {0:10d} kB\n"
    )


def render_lscpu(node: NodeState) -> str:
    total, offline = node.host.cpus, node.host.cpus_offline
    grace = node.profile.cpu_architecture == "aarch64"
    rows = [
        ("Architecture", node.profile.cpu_architecture),
        ("CPU op-mode(s)", "64-bit" if grace else "32-bit, 64-bit"),
        ("Byte Order", "Little Endian"),
        ("CPU(s)", str(total)),
        ("On-line CPU(s) list", f"0-{total - offline - 1}"),
    ]
    if offline:
        rows.append(("Off-line CPU(s) list", f"{total - offline}-{total - 1}"))
    # Grace: Arm Neoverse V2 cores, one thread each (NVIDIA Grace datasheet); lscpu names the vendor ARM.
    rows += (
        [("Vendor ID", "ARM"), ("Model name", "Neoverse-V2"), ("Thread(s) per core", "1"), ("Socket(s)", "2")]
        if grace
        else [("Thread(s) per core", "2"), ("Socket(s)", "2"), ("Vendor ID", "GenuineIntel")]
    )
    return "".join(f"{key + ':':<33}{value}\n" for key, value in rows)


_PSEUDO = (("udev", "devtmpfs", "/dev"), ("tmpfs", "tmpfs", "/run"), ("tmpfs", "tmpfs", "/dev/shm"))


def render_df(node: NodeState, inodes: bool) -> str:
    """`df -P` (1024-blocks) or `df -Pi` (inodes): POSIX output, one line per filesystem."""
    memory = node.host.memory_kb
    if inodes:
        rows = ["Filesystem          Inodes  IUsed       IFree IUse% Mounted on"]
        rows += [
            f"{src:<16}{memory // 8:>10} {1398:>6} {memory // 8 - 1398:>11} {'1%':>5} {target}"
            for src, _, target in _PSEUDO
        ]
        for fs in node.host.filesystems:
            pct = "-" if not fs.inodes else f"{-(-fs.inodes_used * 100 // fs.inodes)}%"
            rows.append(
                f"{fs.source:<16}{fs.inodes:>10} {fs.inodes_used:>6} {fs.inodes - fs.inodes_used:>11} {pct:>5} {fs.target}"
            )
    else:
        rows = ["Filesystem     1024-blocks      Used  Available Capacity Mounted on"]
        rows += [
            f"{src:<15}{memory // 2:>12} {5176:>9} {memory // 2 - 5176:>10} {'1%':>8} {target}"
            for src, _, target in _PSEUDO
        ]
        for fs in node.host.filesystems:
            pct = f"{-(-fs.used_kb * 100 // fs.size_kb)}%"
            rows.append(
                f"{fs.source:<15}{fs.size_kb:>12} {fs.used_kb:>9} {fs.size_kb - fs.used_kb:>10} {pct:>8} {fs.target}"
            )
    return "\n".join(rows) + "\n"


def render_mounts(node: NodeState) -> str:
    lines = [
        "sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0",
        "proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0",
    ]
    lines += [f"{src} {target} {fstype} rw,nosuid,relatime 0 0" for src, fstype, target in _PSEUDO]
    lines += [f"{fs.source} {fs.target} {fs.fstype} {fs.options} 0 0" for fs in node.host.filesystems]
    return "\n".join(lines) + "\n"


def render_systemctl_show(node: NodeState, units: list[str]) -> str:
    """`systemctl show -p Id,LoadState,ActiveState,SubState UNIT...`: one block per unit."""
    blocks = []
    for unit in units:
        name = unit.removesuffix(".service")
        state = node.host.services.get(name, "")
        load, active, sub = (
            ("not-found", "inactive", "dead")
            if not state
            else ("loaded", state, "running" if state == "active" else state)
        )
        blocks.append(f"Id={name}.service\nLoadState={load}\nActiveState={active}\nSubState={sub}\n")
    return "\n".join(blocks)


def render_driver_version_file(node: NodeState) -> str:
    return (
        f"NVRM version: NVIDIA UNIX {node.profile.cpu_architecture} Kernel Module  {node.host.loaded_driver}  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Jul  2 22:04:44 UTC 2024\n"
        "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
    )


def render_uname_r(node: NodeState) -> str:
    return KERNEL_RELEASE + "\n"


def render_chronyc_tracking(node: NodeState) -> str:
    host = node.host
    offset = host.clock_offset_s
    side = "slow" if offset >= 0 else "fast"
    reference = "C0A80A01 (ntp1.cluster)" if host.clock_synchronised else "00000000 ()"
    ref_time = time.strftime("%a %b %d %H:%M:%S %Y", time.gmtime(node.now - 40 if host.clock_synchronised else 0))
    return (
        f"Reference ID    : {reference}\nStratum         : {3 if host.clock_synchronised else 0}\n"
        f"Ref time (UTC)  : {ref_time}\nSystem time     : {abs(offset):.9f} seconds {side} of NTP time\n"
        "Last offset     : +0.000004213 seconds\nRMS offset      : 0.000011874 seconds\n"
        "Frequency       : 12.863 ppm slow\nResidual freq   : -0.000 ppm\nSkew            : 0.057 ppm\n"
        "Root delay      : 0.000356001 seconds\nRoot dispersion : 0.000135267 seconds\n"
        "Update interval : 64.2 seconds\n"
        f"Leap status     : {'Normal' if host.clock_synchronised else 'Not synchronised'}\n"
    )


def render_nvme_smart_log(node: NodeState, device: str) -> ToolOutput:
    """`nvme smart-log /dev/nvmeN -o json` in nvme-cli 1.x's JSON (tests/fixtures/checks/storage):
    a healthy drive; a controller the node lacks is the tool's open error."""
    index = device.removeprefix("/dev/nvme")
    if not index.isdigit() or int(index) >= node.host.nvme_drives:
        return ToolOutput("", f"{device}: No such file or directory\n", 1)
    return ToolOutput(
        '{\n  "critical_warning" : 0,\n  "temperature" : 306,\n  "avail_spare" : 100,\n  "spare_thresh" : 10,\n'
        '  "percent_used" : 2,\n  "media_errors" : 0,\n  "num_err_log_entries" : 0\n}\n'
    )
