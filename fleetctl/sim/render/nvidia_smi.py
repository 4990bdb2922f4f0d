"""What a simulated node's tools print: the node's state, and one renderer per tool.

Pure functions of a `NodeState` (and a random generator for run-to-run jitter). Layouts
follow the real tools' output byte for byte where parsers depend on it (column widths,
comment lines, footers), so the parsers in `checks` read simulated output exactly as they
read a real node's. `fleetctl.executors.sim` builds the state and applies faults to it.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

# Bits of nvidia-smi's clocks_event_reasons.active mask (nvml.h nvmlClocksEventReason*).
REASON_GPU_IDLE = 0x1
REASON_HW_SLOWDOWN = 0x8
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40
_REASONS_SUPPORTED = 0x1FF
_REASON_NAMES = (  # (-q label, CSV field suffix, bit), in nvidia-smi's order
    ("Idle", "gpu_idle", REASON_GPU_IDLE),
    ("Applications Clocks Setting", "applications_clocks_setting", 0x2),
    ("SW Power Cap", "sw_power_cap", 0x4),
    ("HW Slowdown", "hw_slowdown", REASON_HW_SLOWDOWN),
    ("HW Thermal Slowdown", "hw_thermal_slowdown", REASON_HW_THERMAL),
    ("HW Power Brake Slowdown", "hw_power_brake_slowdown", 0x80),
    ("Sync Boost", "sync_boost", 0x10),
    ("SW Thermal Slowdown", "sw_thermal_slowdown", REASON_SW_THERMAL),
    ("Display Clock Setting", "display_clock_setting", 0x100),
)


@dataclass(frozen=True)
class HcaModel:
    """A ConnectX adapter model, as ibstat and the firmware tools name it."""

    ca_type: str  # ibstat "CA type": MT4129 = ConnectX-7
    device_type: str  # mlxfwmanager "Device Type"
    part_number: str
    description: str
    psid: str
    firmware: str
    drifted_firmware: str  # an older release, what `firmware-drift` shows
    pxe_version: str
    uefi_version: str


@dataclass(frozen=True)
class SimProfile:
    """Healthy rendered values of one GPU platform (not thresholds: see checks.profiles)."""

    name: str
    gpu_name: str
    gpu_count: int
    architecture: str
    pci_device_id: int  # nvidia-smi prints it as 0x<device><vendor>: 0x233010DE
    pci_subsystem_id: int
    memory_mib: int
    memory_reserved_mib: int
    board_part_number: str
    gpu_part_number: str
    inforom_image: str
    driver_version: str
    cuda_version: str
    dcgm_version: str
    vbios_version: str
    drifted_vbios_version: str
    power_limit_w: float
    min_power_limit_w: float
    max_sm_clock_mhz: int
    memory_clock_mhz: int
    pcie_gen: int
    remap_banks: int
    compute_cap: str
    nvswitch_count: int
    nvswitch_firmware: str
    allreduce_busbw_gbps: float  # single-node all-reduce bus bandwidth at large sizes
    allreduce_latency_us: float
    hpl_gflops_per_gpu: float
    ib_rate_gbps: int
    ib_write_bw_efficiency: float  # ib_write_bw average as a fraction of the link rate
    hca: HcaModel
    # PCI bus numbers of the GPUs on the server models this platform ships in.
    gpu_bus_layouts: tuple[tuple[int, ...], ...]


@dataclass
class GpuState:
    index: int
    bus: int
    serial: str
    uuid: str
    vbios_version: str
    temperature_c: int
    memory_temperature_c: int
    power_draw_w: float
    sm_clock_mhz: int
    hpl_gflops: float  # what this GPU sustains under HPL
    event_reasons: int = REASON_GPU_IDLE
    ecc_corrected_volatile: int = 0
    ecc_uncorrected_volatile: int = 0
    ecc_uncorrected_aggregate: int = 0
    remap_correctable: int = 0
    remap_uncorrectable: int = 0
    remap_pending: bool = False
    remap_failure: bool = False
    banks_partial: int = 0  # banks with only some spare rows left
    banks_none: int = 0  # banks with no spare row left
    lost: bool = False  # fallen off the bus: NVML cannot reach it

    @property
    def pci_bus_id(self) -> str:
        return f"00000000:{self.bus:02X}:00.0"

    @property
    def kernel_pci(self) -> str:
        """How the kernel log names the device: PCI:0000:2b:00."""
        return f"PCI:0000:{self.bus:02x}:00"


@dataclass
class HcaState:
    name: str  # mlx5_0
    ca_type: str
    firmware: str
    guid: int
    pci_bus: int
    lid: int
    rate_gbps: int
    link_layer: str = "InfiniBand"
    state: str = "Active"
    physical_state: str = "LinkUp"
    write_bw_gbps: float = 0.0

    @property
    def pci_address(self) -> str:
        return f"0000:{self.pci_bus:02x}:00.0"


@dataclass(frozen=True)
class KernelEvent:
    at: float  # unix time
    text: str


@dataclass
class NodeState:
    hostname: str
    profile: SimProfile
    gpus: list[GpuState]
    hcas: list[HcaState]
    boot_time: float
    now: float
    allreduce_busbw_gbps: float
    kernel_events: list[KernelEvent] = field(default_factory=list)
    # This run hits the intermittent fault of a `flaky` node: stress tests go wrong.
    transient_failure: bool = False

    @property
    def visible_gpus(self) -> list[GpuState]:
        return [g for g in self.gpus if not g.lost]

    @property
    def lost_gpus(self) -> list[GpuState]:
        return [g for g in self.gpus if g.lost]


@dataclass(frozen=True)
class ToolOutput:
    stdout: str
    stderr: str = ""
    exit_status: int = 0


# --- shared layout helpers ---------------------------------------------------------------


def aligned_pairs(pairs: Sequence[tuple[str, str]], key_width: int, indent: str = "") -> list[str]:
    """`Key:   value` lines with every value in one column (flint, mlxfwmanager, nvfwupd)."""
    # An empty key continues the previous value on its own line (flint's "Rom Info").
    return [f"{indent}{(key + ':' if key else '').ljust(key_width)}{value}".rstrip() for key, value in pairs]


# nvidia-smi -q's tree: (label, value) leaves, (label, children) sections, and
# (label, value, children) for a leaf with sub-items (HW Slowdown and its two causes).
ReportTree = list[tuple]


def report_lines(tree: ReportTree, depth: int = 0) -> list[str]:
    """nvidia-smi -q layout: 4 spaces per level, every ':' in column 42."""
    lines: list[str] = []
    indent = "    " * depth
    for label, *rest in tree:
        if len(rest) == 2 or isinstance(rest[0], str):
            lines.append(f"{(indent + label).ljust(42)}: {rest[0]}")
        else:
            lines.append(indent + label)
        if len(rest) == 2 or isinstance(rest[0], list):
            lines.extend(report_lines(rest[-1], depth + 1))
    return lines


def box_rows(text: str, width: int) -> list[str]:
    """Cut text into fixed-width pieces, as DCGM wraps a long cell (mid-word)."""
    return [text[i : i + width] for i in range(0, len(text), width)] or [""]


def _ctime(t: float) -> str:
    """strftime("%a %b %e %H:%M:%S %Y") in UTC, as nvidia-smi -q and dmesg -T print times."""
    return time.strftime("%a %b %e %H:%M:%S %Y", time.gmtime(t))


def _yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def _active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


# --- nvidia-smi ----------------------------------------------------------------------------

# NVML_ERROR_GPU_IS_LOST: nvidia-smi exits with the NVML status of what went wrong.
NVML_ERROR_GPU_IS_LOST = 15


def _lost_gpu_line(gpu: GpuState) -> str:
    return f"Unable to determine the device handle for GPU{gpu.pci_bus_id[4:]}: Unknown Error"


def _bank_histogram(profile: SimProfile, gpu: GpuState) -> tuple[int, int, int, int, int]:
    """(max, high, partial, low, none): banks by how many spare rows they have left."""
    return (profile.remap_banks - gpu.banks_partial - gpu.banks_none, 0, gpu.banks_partial, 0, gpu.banks_none)


_HISTOGRAM_LABELS = ("Max", "High", "Partial", "Low", "None")

# field -> (unit or None, value). Units show in the header and cells unless `nounits`.
QueryField = tuple["str | None", Callable[[NodeState, GpuState], str]]


def _watts(value: float) -> str:
    return f"{value:.2f}"


def _query_fields() -> dict[str, QueryField]:
    fields: dict[str, QueryField] = {
        "timestamp": (None, lambda n, g: time.strftime("%Y/%m/%d %H:%M:%S.000", time.gmtime(n.now))),
        "driver_version": (None, lambda n, g: n.profile.driver_version),
        "count": (None, lambda n, g: str(len(n.visible_gpus))),
        "index": (None, lambda n, g: str(g.index)),
        "name": (None, lambda n, g: n.profile.gpu_name),
        "serial": (None, lambda n, g: g.serial),
        "uuid": (None, lambda n, g: g.uuid),
        "pci.bus_id": (None, lambda n, g: g.pci_bus_id),
        "pci.domain": (None, lambda n, g: "0x0000"),
        "pci.bus": (None, lambda n, g: f"0x{g.bus:02X}"),
        "pci.device": (None, lambda n, g: "0x00"),
        "pci.device_id": (None, lambda n, g: f"0x{n.profile.pci_device_id:04X}10DE"),
        "pci.sub_device_id": (None, lambda n, g: f"0x{n.profile.pci_subsystem_id:04X}10DE"),
        "vbios_version": (None, lambda n, g: g.vbios_version),
        "inforom.img": (None, lambda n, g: n.profile.inforom_image),
        "persistence_mode": (None, lambda n, g: "Enabled"),
        "pstate": (None, lambda n, g: "P0"),
        "compute_cap": (None, lambda n, g: n.profile.compute_cap),
        "compute_mode": (None, lambda n, g: "Default"),
        "mig.mode.current": (None, lambda n, g: "Disabled"),
        "ecc.mode.current": (None, lambda n, g: "Enabled"),
        "memory.total": ("MiB", lambda n, g: str(n.profile.memory_mib)),
        "memory.reserved": ("MiB", lambda n, g: str(n.profile.memory_reserved_mib)),
        "memory.used": ("MiB", lambda n, g: "1"),
        "memory.free": ("MiB", lambda n, g: str(n.profile.memory_mib - n.profile.memory_reserved_mib - 1)),
        "utilization.gpu": ("%", lambda n, g: "0"),
        "utilization.memory": ("%", lambda n, g: "0"),
        "temperature.gpu": (None, lambda n, g: str(g.temperature_c)),
        "temperature.memory": (None, lambda n, g: str(g.memory_temperature_c)),
        "power.draw": ("W", lambda n, g: _watts(g.power_draw_w)),
        "power.limit": ("W", lambda n, g: _watts(n.profile.power_limit_w)),
        "enforced.power.limit": ("W", lambda n, g: _watts(n.profile.power_limit_w)),
        "power.default_limit": ("W", lambda n, g: _watts(n.profile.power_limit_w)),
        "power.min_limit": ("W", lambda n, g: _watts(n.profile.min_power_limit_w)),
        "power.max_limit": ("W", lambda n, g: _watts(n.profile.power_limit_w)),
        "clocks.current.graphics": ("MHz", lambda n, g: str(g.sm_clock_mhz)),
        "clocks.current.sm": ("MHz", lambda n, g: str(g.sm_clock_mhz)),
        "clocks.current.memory": ("MHz", lambda n, g: str(n.profile.memory_clock_mhz)),
        "clocks.max.graphics": ("MHz", lambda n, g: str(n.profile.max_sm_clock_mhz)),
        "clocks.max.sm": ("MHz", lambda n, g: str(n.profile.max_sm_clock_mhz)),
        "clocks.max.memory": ("MHz", lambda n, g: str(n.profile.memory_clock_mhz)),
        "clocks_event_reasons.supported": (None, lambda n, g: f"0x{_REASONS_SUPPORTED:016X}"),
        "clocks_event_reasons.active": (None, lambda n, g: f"0x{g.event_reasons:016X}"),
        "ecc.errors.corrected.volatile.total": (None, lambda n, g: str(g.ecc_corrected_volatile)),
        "ecc.errors.corrected.aggregate.total": (None, lambda n, g: str(g.ecc_corrected_volatile)),
        "ecc.errors.uncorrected.volatile.dram": (None, lambda n, g: str(g.ecc_uncorrected_volatile)),
        "ecc.errors.uncorrected.volatile.total": (None, lambda n, g: str(g.ecc_uncorrected_volatile)),
        "ecc.errors.uncorrected.aggregate.dram": (None, lambda n, g: str(g.ecc_uncorrected_aggregate)),
        "ecc.errors.uncorrected.aggregate.total": (None, lambda n, g: str(g.ecc_uncorrected_aggregate)),
        # These GPUs remap rows instead of retiring pages.
        "retired_pages.single_bit_ecc.count": (None, lambda n, g: "[N/A]"),
        "retired_pages.double_bit.count": (None, lambda n, g: "[N/A]"),
        "retired_pages.pending": (None, lambda n, g: "[N/A]"),
        "remapped_rows.correctable": (None, lambda n, g: str(g.remap_correctable)),
        "remapped_rows.uncorrectable": (None, lambda n, g: str(g.remap_uncorrectable)),
        "remapped_rows.pending": (None, lambda n, g: _yes_no(g.remap_pending)),
        "remapped_rows.failure": (None, lambda n, g: _yes_no(g.remap_failure)),
        "pcie.link.gen.current": (None, lambda n, g: str(n.profile.pcie_gen)),
        "pcie.link.gen.gpucurrent": (None, lambda n, g: str(n.profile.pcie_gen)),
        "pcie.link.gen.max": (None, lambda n, g: str(n.profile.pcie_gen)),
        "pcie.link.gen.gpumax": (None, lambda n, g: str(n.profile.pcie_gen)),
        "pcie.link.width.current": (None, lambda n, g: "16"),
        "pcie.link.width.max": (None, lambda n, g: "16"),
        "fabric.state": (None, lambda n, g: "Completed"),
        "fabric.status": (None, lambda n, g: "Success"),
    }
    for position, label in enumerate(_HISTOGRAM_LABELS):
        fields[f"remapped_rows.histogram.{label.lower()}"] = (
            None,
            lambda n, g, i=position: str(_bank_histogram(n.profile, g)[i]),
        )
    for _, suffix, bit in _REASON_NAMES:
        fields[f"clocks_event_reasons.{suffix}"] = (None, lambda n, g, b=bit: _active(bool(g.event_reasons & b)))
    return fields


QUERY_FIELDS = _query_fields()
# Other names nvidia-smi accepts for a field; it prints the canonical name in the header.
QUERY_ALIASES = {
    "gpu_name": "name",
    "gpu_serial": "serial",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "clocks.gr": "clocks.current.graphics",
    "clocks.sm": "clocks.current.sm",
    "clocks.mem": "clocks.current.memory",
    "clocks.max.gr": "clocks.max.graphics",
    "clocks.max.mem": "clocks.max.memory",
    **{  # the names before driver 535
        name.replace("clocks_event_reasons.", "clocks_throttle_reasons."): name
        for name in QUERY_FIELDS
        if name.startswith("clocks_event_reasons.")
    },
}


def render_nvidia_smi_query(
    node: NodeState, fields: Sequence[str], header: bool, units: bool, indices: Sequence[int] | None
) -> ToolOutput:
    """`nvidia-smi --query-gpu=... --format=csv[,noheader][,nounits]`: the fields asked, in order."""
    canonical = [QUERY_ALIASES.get(f, f) for f in fields]
    for requested, name in zip(fields, canonical):
        if name not in QUERY_FIELDS:
            return ToolOutput(f'Field "{requested}" is not a valid field to query.\n\n', exit_status=2)
    # nvidia-smi opens every device before printing; one it cannot open is reported first.
    selected = _selected(node, indices)
    lines = [_lost_gpu_line(g) for g in selected if g.lost]
    if header:
        lines.append(
            ", ".join(
                f"{name} [{QUERY_FIELDS[name][0]}]" if units and QUERY_FIELDS[name][0] else name
                for name in canonical
            )
        )
    for gpu in selected:
        if not gpu.lost:
            lines.append(", ".join(_query_cell(node, gpu, name, units) for name in canonical))
    return ToolOutput("\n".join(lines) + "\n", exit_status=NVML_ERROR_GPU_IS_LOST if any(g.lost for g in selected) else 0)


def _query_cell(node: NodeState, gpu: GpuState, name: str, units: bool) -> str:
    unit, value = QUERY_FIELDS[name]
    return f"{value(node, gpu)} {unit}" if units and unit else value(node, gpu)


def _selected(node: NodeState, indices: Sequence[int] | None) -> list[GpuState]:
    return [g for g in node.gpus if indices is None or g.index in indices]


def _gpu_report(node: NodeState, gpu: GpuState) -> ReportTree:
    p = node.profile
    reason = {label: _active(bool(gpu.event_reasons & bit)) for label, _, bit in _REASON_NAMES}

    def ecc_counts(dram_uncorrectable: int) -> ReportTree:
        return [
            ("SRAM Correctable", "0"),
            ("SRAM Uncorrectable Parity", "0"),
            ("SRAM Uncorrectable SEC-DED", "0"),
            ("DRAM Correctable", str(gpu.ecc_corrected_volatile)),
            ("DRAM Uncorrectable", str(dram_uncorrectable)),
        ]

    watts = lambda value: f"{value:.2f} W"  # noqa: E731
    return [
        ("Product Name", p.gpu_name),
        ("Product Brand", "NVIDIA"),
        ("Product Architecture", p.architecture),
        ("Display Mode", "Disabled"),
        ("Display Active", "Disabled"),
        ("Persistence Mode", "Enabled"),
        ("MIG Mode", [("Current", "Disabled"), ("Pending", "Disabled")]),
        ("Accounting Mode", "Disabled"),
        ("Accounting Mode Buffer Size", "4000"),
        ("Serial Number", gpu.serial),
        ("GPU UUID", gpu.uuid),
        ("Minor Number", str(gpu.index)),
        ("VBIOS Version", gpu.vbios_version),
        ("MultiGPU Board", "No"),
        ("Board ID", f"0x{gpu.bus:x}00"),
        ("Board Part Number", p.board_part_number),
        ("GPU Part Number", p.gpu_part_number),
        ("FRU Part Number", "N/A"),
        ("Module Id", str(gpu.index + 1)),
        ("Inforom Version", [
            ("Image Version", p.inforom_image),
            ("OEM Object", "2.1"),
            ("ECC Object", "7.16"),
            ("Power Management Object", "N/A"),
        ]),
        ("GPU Reset Status", [
            ("Reset Required", _yes_no(gpu.remap_pending)),
            ("Drain and Reset Recommended", "No"),
        ]),
        ("GSP Firmware Version", p.driver_version),
        ("PCI", [
            ("Bus", f"0x{gpu.bus:02X}"),
            ("Device", "0x00"),
            ("Domain", "0x0000"),
            ("Device Id", f"0x{p.pci_device_id:04X}10DE"),
            ("Bus Id", gpu.pci_bus_id),
            ("Sub System Id", f"0x{p.pci_subsystem_id:04X}10DE"),
            ("GPU Link Info", [
                ("PCIe Generation", [("Max", str(p.pcie_gen)), ("Current", str(p.pcie_gen))]),
                ("Link Width", [("Max", "16x"), ("Current", "16x")]),
            ]),
            ("Replays Since Reset", "0"),
            ("Replay Number Rollovers", "0"),
        ]),
        ("Fan Speed", "N/A"),
        ("Performance State", "P0"),
        ("Clocks Event Reasons", [
            ("Idle", reason["Idle"]),
            ("Applications Clocks Setting", reason["Applications Clocks Setting"]),
            ("SW Power Cap", reason["SW Power Cap"]),
            ("HW Slowdown", reason["HW Slowdown"], [
                ("HW Thermal Slowdown", reason["HW Thermal Slowdown"]),
                ("HW Power Brake Slowdown", reason["HW Power Brake Slowdown"]),
            ]),
            ("Sync Boost", reason["Sync Boost"]),
            ("SW Thermal Slowdown", reason["SW Thermal Slowdown"]),
            ("Display Clock Setting", reason["Display Clock Setting"]),
        ]),
        ("FB Memory Usage", [
            ("Total", f"{p.memory_mib} MiB"),
            ("Reserved", f"{p.memory_reserved_mib} MiB"),
            ("Used", "1 MiB"),
            ("Free", f"{p.memory_mib - p.memory_reserved_mib - 1} MiB"),
        ]),
        ("Compute Mode", "Default"),
        ("Utilization", [("Gpu", "0 %"), ("Memory", "0 %"), ("Encoder", "0 %"), ("Decoder", "0 %")]),
        ("ECC Mode", [("Current", "Enabled"), ("Pending", "Enabled")]),
        ("ECC Errors", [
            ("Volatile", ecc_counts(gpu.ecc_uncorrected_volatile)),
            ("Aggregate", [*ecc_counts(gpu.ecc_uncorrected_aggregate), ("SRAM Threshold Exceeded", "No")]),
        ]),
        ("Retired Pages", [
            ("Single Bit ECC", "N/A"),
            ("Double Bit ECC", "N/A"),
            ("Pending Page Blacklist", "N/A"),
        ]),
        ("Remapped Rows", [
            ("Correctable Error", str(gpu.remap_correctable)),
            ("Uncorrectable Error", str(gpu.remap_uncorrectable)),
            ("Pending", _yes_no(gpu.remap_pending)),
            ("Remapping Failure Occurred", _yes_no(gpu.remap_failure)),
            ("Bank Remap Availability Histogram", [
                (label, f"{count} bank(s)") for label, count in zip(_HISTOGRAM_LABELS, _bank_histogram(p, gpu))
            ]),
        ]),
        ("Temperature", [
            ("GPU Current Temp", f"{gpu.temperature_c} C"),
            # Headroom to the slowdown limit, as Hopper reports it.
            ("GPU T.Limit Temp", f"{87 - gpu.temperature_c} C"),
            ("GPU Shutdown T.Limit Temp", "-8 C"),
            ("GPU Slowdown T.Limit Temp", "-2 C"),
            ("GPU Max Operating T.Limit Temp", "0 C"),
            ("GPU Target Temperature", "N/A"),
            ("Memory Current Temp", f"{gpu.memory_temperature_c} C"),
            ("Memory Max Operating T.Limit Temp", "0 C"),
        ]),
        ("GPU Power Readings", [
            ("Power Draw", watts(gpu.power_draw_w)),
            ("Current Power Limit", watts(p.power_limit_w)),
            ("Requested Power Limit", watts(p.power_limit_w)),
            ("Default Power Limit", watts(p.power_limit_w)),
            ("Min Power Limit", watts(p.min_power_limit_w)),
            ("Max Power Limit", watts(p.power_limit_w)),
        ]),
        ("Clocks", [
            ("Graphics", f"{gpu.sm_clock_mhz} MHz"),
            ("SM", f"{gpu.sm_clock_mhz} MHz"),
            ("Memory", f"{p.memory_clock_mhz} MHz"),
        ]),
        ("Max Clocks", [
            ("Graphics", f"{p.max_sm_clock_mhz} MHz"),
            ("SM", f"{p.max_sm_clock_mhz} MHz"),
            ("Memory", f"{p.memory_clock_mhz} MHz"),
        ]),
        ("Fabric", [("State", "Completed"), ("Status", "Success")]),
        ("Processes", "None"),
    ]


# `nvidia-smi -q -d X`: the -q sections each display name selects.
Q_DISPLAY_SECTIONS = {
    "MEMORY": ("FB Memory Usage",),
    "UTILIZATION": ("Utilization",),
    "ECC": ("ECC Mode", "ECC Errors"),
    "TEMPERATURE": ("Temperature",),
    "POWER": ("GPU Power Readings",),
    "CLOCK": ("Clocks", "Max Clocks"),
    "COMPUTE": ("Compute Mode",),
    "PIDS": ("Processes",),
    "PERFORMANCE": ("Performance State", "Clocks Event Reasons"),
    "PAGE_RETIREMENT": ("Retired Pages",),
    "ROW_REMAPPER": ("Remapped Rows",),
}


def render_nvidia_smi_q(node: NodeState, display: Sequence[str] | None, indices: Sequence[int] | None) -> ToolOutput:
    """`nvidia-smi -q [-d SECTION,...] [-i N]`: the header, then one block per GPU."""
    wanted: set[str] | None = None
    if display is not None:
        unknown = [d for d in display if d not in Q_DISPLAY_SECTIONS]
        if unknown:
            return ToolOutput(f'Invalid combination of input arguments: "{unknown[0]}" is not a valid -d option.\n', exit_status=2)
        wanted = {section for d in display for section in Q_DISPLAY_SECTIONS[d]}
    selected = _selected(node, indices)
    lines = [_lost_gpu_line(g) for g in selected if g.lost]  # as for --query-gpu
    lines += [
        "",
        "==============NVSMI LOG==============",
        "",
        f"{'Timestamp'.ljust(42)}: {_ctime(node.now)}",
        f"{'Driver Version'.ljust(42)}: {node.profile.driver_version}",
        f"{'CUDA Version'.ljust(42)}: {node.profile.cuda_version}",
        "",
        f"{'Attached GPUs'.ljust(42)}: {len(node.visible_gpus)}",
    ]
    for gpu in selected:
        if gpu.lost:
            continue
        tree = _gpu_report(node, gpu)
        if wanted is not None:
            tree = [item for item in tree if item[0] in wanted]
        lines.append(f"GPU {gpu.pci_bus_id}")
        lines.extend(report_lines(tree, depth=1))
        lines.append("")
    return ToolOutput("\n".join(lines) + "\n", exit_status=NVML_ERROR_GPU_IS_LOST if any(g.lost for g in selected) else 0)


# --- kernel log ----------------------------------------------------------------------------


def render_kernel_log(node: NodeState, style: str) -> ToolOutput:
    """Kernel messages since boot. style: "dmesg" (seconds since boot), "dmesg-T" (wall
    clock, like `dmesg -T`), "journal" (`journalctl -k`)."""
    lines = []
    for event in sorted(node.kernel_events, key=lambda e: e.at):
        if style == "dmesg":
            lines.append(f"[{event.at - node.boot_time:12.6f}] {event.text}")
        elif style == "dmesg-T":
            lines.append(f"[{_ctime(event.at)}] {event.text}")
        else:
            stamp = time.strftime("%b %d %H:%M:%S", time.gmtime(event.at))
            lines.append(f"{stamp} {node.hostname} kernel: {event.text}")
    return ToolOutput("\n".join(lines) + "\n")


# --- DCGM ----------------------------------------------------------------------------------

_DEPLOYMENT_TESTS = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)


def _plugin_tests(level: int) -> list[tuple[str, list[str]]]:
    """(category, tests) that `dcgmi diag -r level` runs after the deployment checks."""
    if level < 2:
        return []
    hardware = ["GPU Memory"] + (["Diagnostic"] if level >= 3 else []) + (["Pulse Test"] if level >= 4 else [])
    stress = (["SM Stress"] if level >= 4 else []) + (
        ["Targeted Stress", "Targeted Power", "Memory Bandwidth"] if level >= 3 else []
    ) + (["Memtest"] if level >= 4 else [])
    return [("Integration", ["PCIe"]), ("Hardware", hardware), ("Stress", stress)]


@dataclass
class _DiagTest:
    name: str
    status: str  # "Pass", "Fail", "Skip", per GPU for plugin tests
    failed_gpus: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    error_id: int = 0  # a DCGM_FR_* code; parsers go by status and text


def _diag_results(node: NodeState, level: int) -> tuple[list[_DiagTest], list[tuple[str, list[_DiagTest]]]]:
    """Deployment results and plugin results by category, from the node's state."""
    deployment = {name: _DiagTest(name, "Pass") for name in _DEPLOYMENT_TESTS}
    for gpu in node.lost_gpus:
        test = deployment["CUDA Main Library"]
        test.status = "Fail"
        test.error_id = 3
        test.warnings.append(
            f"GPU {gpu.index} Error using CUDA API cuDeviceGetByPCIBusId Check DCGM and system logs for "
            f"errors. Reset GPU. Restart DCGM. Rerun diagnostics. 'unknown error' for GPU {gpu.index}, "
            f"bus ID = {gpu.pci_bus_id}"
        )
    for gpu in node.visible_gpus:
        test = deployment["Page Retirement/Row Remap"]
        if gpu.remap_failure:
            test.warnings.append(f"GPU {gpu.index} had uncorrectable memory errors and row remapping failed.")
        elif gpu.remap_pending:
            test.warnings.append(f"GPU {gpu.index} has uncorrectable memory errors and row remappings are pending")
        elif gpu.ecc_uncorrected_volatile:
            test.warnings.append(
                f"GPU {gpu.index} has {gpu.ecc_uncorrected_volatile} uncorrectable ECC errors (volatile DBE)."
            )
        if test.warnings:
            test.status, test.error_id = "Fail", 96
    deployment_failed = any(t.status == "Fail" for t in deployment.values())

    gpu_ids = [g.index for g in node.gpus]
    plugins: list[tuple[str, list[_DiagTest]]] = []
    for category, names in _plugin_tests(level):
        tests = []
        for name in names:
            test = _DiagTest(name, "Skip" if deployment_failed else "Pass")
            if not deployment_failed:
                _judge_plugin(node, test, gpu_ids)
            tests.append(test)
        plugins.append((category, tests))
    return list(deployment.values()), plugins


def _judge_plugin(node: NodeState, test: _DiagTest, gpu_ids: list[int]) -> None:
    """What a stress plugin finds on this node's GPUs."""
    if test.name in ("Targeted Stress", "Targeted Power", "SM Stress"):
        for gpu in node.gpus:
            if gpu.event_reasons & REASON_HW_THERMAL:
                test.failed_gpus.append(gpu.index)
                test.warnings.append(
                    f"GPU {gpu.index} Thermal violations totaling 13.3 seconds started at 9.7 seconds into "
                    f"the test for GPU {gpu.index} Verify that the cooling on this machine is functional, "
                    "including external, thermal material interface, fans, and any other components."
                )
                test.error_id = 35
    if test.name in ("GPU Memory", "Diagnostic") and node.transient_failure:
        victim = gpu_ids[len(gpu_ids) // 2]
        test.failed_gpus.append(victim)
        test.warnings.append(
            f"GPU {victim} Error using CUDA API cudaMemcpy Check DCGM and system logs for errors. Reset GPU. "
            "Restart DCGM. Rerun diagnostics. 'an illegal memory access was encountered'"
        )
        test.error_id = 3
    if test.failed_gpus:
        test.status = "Fail"


_DIAG_KEY_WIDTH = 25
_DIAG_VALUE_WIDTH = 46


def _diag_row(key: str, value: str) -> str:
    return f"| {key.ljust(_DIAG_KEY_WIDTH)} | {value.ljust(_DIAG_VALUE_WIDTH)} |"


def _diag_cell(key: str, text: str) -> list[str]:
    pieces = box_rows(text, _DIAG_VALUE_WIDTH)
    return [_diag_row(key, pieces[0])] + [_diag_row("", piece) for piece in pieces[1:]]


def _diag_section(title: str, edge: str) -> str:
    return f"{edge}{('-----  ' + title + '  ').ljust(_DIAG_KEY_WIDTH + 2, '-')}+{'-' * (_DIAG_VALUE_WIDTH + 2)}{edge}"


def _plugin_summary(test: _DiagTest, gpu_ids: list[int]) -> list[str]:
    """"Pass - All", or "Pass - GPUs: 1, 2" and "Fail - GPU: 0" lines."""
    if not test.failed_gpus:
        return [f"{test.status} - All"]
    passed = [i for i in gpu_ids if i not in test.failed_gpus]
    lines = []
    if passed:
        lines.append(("Pass - GPU: " if len(passed) == 1 else "Pass - GPUs: ") + ", ".join(map(str, passed)))
    lines.append(("Fail - GPU: " if len(test.failed_gpus) == 1 else "Fail - GPUs: ") + ", ".join(map(str, test.failed_gpus)))
    return lines


def render_dcgmi_diag(node: NodeState, level: int, as_json: bool) -> ToolOutput:
    """`dcgmi diag -r level [-j]`, in DCGM 3.3's table or JSON layout."""
    deployment, plugins = _diag_results(node, level)
    failed = any(t.status == "Fail" for t in deployment) or any(
        t.status == "Fail" for _, tests in plugins for t in tests
    )
    gpu_ids = [g.index for g in node.gpus]
    device_ids = [f"{node.profile.pci_device_id:04x}"] * len(gpu_ids)
    exit_status = 226 if failed else 0  # dcgmi exits non-zero when a test fails
    if as_json:
        return ToolOutput(_diag_json(node, deployment, plugins, gpu_ids, device_ids), exit_status=exit_status)

    border = f"+{'-' * (_DIAG_KEY_WIDTH + 2)}+{'-' * (_DIAG_VALUE_WIDTH + 2)}+"
    lines = [
        "Successfully ran diagnostic for group.",
        border,
        _diag_row("Diagnostic", "Result"),
        border.replace("-", "="),
        _diag_section("Metadata", "|"),
        _diag_row("DCGM Version", node.profile.dcgm_version),
        _diag_row("Driver Version Detected", node.profile.driver_version),
        *_diag_cell("GPU Device IDs Detected", ",".join(device_ids)),
        _diag_section("Deployment", "|"),
    ]
    for test in deployment:
        lines.append(_diag_row(test.name, test.status))
        lines.extend(row for warning in test.warnings for row in _diag_cell("Warning", warning))
    for category, tests in plugins:
        lines.append(_diag_section(category, "+"))
        for test in tests:
            summary = _plugin_summary(test, gpu_ids)
            lines.append(_diag_row(test.name, summary[0]))
            lines.extend(_diag_row("", more) for more in summary[1:])
            lines.extend(row for warning in test.warnings for row in _diag_cell("Warning", warning))
    lines.append(border)
    return ToolOutput("\n".join(lines) + "\n", exit_status=exit_status)


def _diag_json(
    node: NodeState,
    deployment: list[_DiagTest],
    plugins: list[tuple[str, list[_DiagTest]]],
    gpu_ids: list[int],
    device_ids: list[str],
) -> str:
    def warnings(test: _DiagTest, gpu: int | None) -> list[dict]:
        texts = test.warnings if gpu is None else [w for w in test.warnings if w.startswith(f"GPU {gpu} ")]
        return [
            {"error_category": 1, "error_id": test.error_id, "error_severity": 2, "warning": text} for text in texts
        ]

    categories = [
        {
            "category": "Deployment",
            "tests": [
                {
                    "name": test.name,
                    "results": [
                        {
                            "gpu_ids": ",".join(map(str, gpu_ids)),
                            "status": test.status.upper(),
                            **({"warnings": warnings(test, None)} if test.warnings else {}),
                        }
                    ],
                }
                for test in deployment
            ],
        }
    ]
    for category, tests in plugins:
        entries = []
        for test in tests:
            results = []
            for gpu in gpu_ids:
                # A test that failed on some GPUs passed on the others.
                status = "FAIL" if gpu in test.failed_gpus else "PASS" if test.status == "Fail" else test.status.upper()
                result: dict = {"gpu_ids": gpu, "status": status}
                if gpu in test.failed_gpus:
                    result["warnings"] = warnings(test, gpu)
                results.append(result)
            entries.append({"name": test.name, "results": results})
        categories.append({"category": category, "tests": entries})
    document = {
        "DCGM GPU Diagnostic": {
            "test_categories": categories,
            "version": node.profile.dcgm_version,
            "Driver Version Detected": node.profile.driver_version,
            "GPU Device IDs": device_ids,
        }
    }
    return json.dumps(document, indent="\t", separators=(",", " : ")) + "\n"


# --- nccl-tests ----------------------------------------------------------------------------


@dataclass(frozen=True)
class AllReduceRun:
    """What all_reduce_perf was asked for (its -b/-e/-f/-i/-g/-t/-n/-w/-c flags)."""

    min_bytes: int
    max_bytes: int
    step_factor: int  # multiplies the size when > 1; otherwise step_bytes is added
    step_bytes: int
    gpus: int
    threads: int
    iters: int
    warmup_iters: int
    check: int

    def sizes(self) -> list[int]:
        sizes, size = [], self.min_bytes
        while size <= self.max_bytes:
            sizes.append(size)
            size = size * self.step_factor if self.step_factor > 1 else size + self.step_bytes
        return sizes


def _nccl_time(usec: float) -> str:
    """nccl-tests prints more digits for faster runs."""
    if usec >= 10000.0:
        return f"{usec:7.0f}"
    if usec >= 100.0:
        return f"{usec:7.1f}"
    return f"{usec:7.2f}"


def render_all_reduce_perf(node: NodeState, run: AllReduceRun, rng: random.Random) -> tuple[ToolOutput, float]:
    """all_reduce_perf output, and the seconds the sweep itself took."""
    ranks = run.gpus * run.threads
    lines = [
        f"# nThread {run.threads} nGpus {run.gpus} minBytes {run.min_bytes} maxBytes {run.max_bytes} "
        + (f"step: {run.step_factor}(factor)" if run.step_factor > 1 else f"step: {run.step_bytes}(bytes)")
        + f" warmup iters: {run.warmup_iters} iters: {run.iters} agg iters: 1 validation: {run.check} graph: 0",
        "#",
        "# Using devices",
    ]
    pid = rng.randint(1000, 4_000_000)
    if ranks > len(node.gpus):
        lines.append(f"{node.hostname}: Test CUDA failure common.cu:1002 'invalid device ordinal'")
        lines.append(f" .. {node.hostname} pid {pid}: Test failure common.cu:891")
        return ToolOutput("\n".join(lines) + "\n", exit_status=2), 2.0
    for rank in range(ranks):
        gpu = node.gpus[rank]
        lines.append(
            f"#  Rank {rank:2d} Group  0 Pid {pid:6d} on {node.hostname:>10s} device {rank:2d} "
            f"[0x{gpu.bus:02x}] {node.profile.gpu_name}"
        )
    lost = [g for g in node.gpus[:ranks] if g.lost]
    if lost:
        # CUDA cannot open a GPU that fell off the bus: the test dies before the first size.
        lines.append(f"{node.hostname}: Test CUDA failure common.cu:1070 'unknown error'")
        lines.append(f" .. {node.hostname} pid {pid}: Test failure common.cu:891")
        return ToolOutput("\n".join(lines) + "\n", exit_status=3), 5.0
    lines += [
        "#",
        "#                                                              out-of-place                       in-place",
        "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong",
        "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)",
    ]
    bus_factor = 2 * (ranks - 1) / ranks if ranks > 1 else 1.0
    peak_algbw = node.allreduce_busbw_gbps / bus_factor  # GB/s = bytes per ns
    sizes = run.sizes()
    # A flaky node corrupts data in the upper half of the sweep.
    corrupt_from = len(sizes) // 2 if node.transient_failure else len(sizes)
    busbw_sum, wrong_total, elapsed_us = 0.0, 0, 0.0
    for position, size in enumerate(sizes):
        count = size // 4  # float
        cells = []
        for _ in ("out-of-place", "in-place"):
            usec = (node.profile.allreduce_latency_us + size / (peak_algbw * 1e3)) * rng.gauss(1.0, 0.004)
            algbw = size / usec / 1e3
            busbw = algbw * bus_factor
            wrong = max(1, count // 7) if position >= corrupt_from else 0
            busbw_sum += busbw
            wrong_total += wrong
            elapsed_us += usec * (run.iters + run.warmup_iters)
            cells.append(f"  {_nccl_time(usec)}  {algbw:6.2f}  {busbw:6.2f}  {wrong:5d}")
        lines.append(f"{size:12d}  {count:12d}  {'float':>8s}  {'sum':>6s}  {-1:6d}" + "".join(cells))
    lines += [
        f"# Out of bounds values : {wrong_total} {'FAILED' if wrong_total else 'OK'}",
        f"# Avg bus bandwidth    : {busbw_sum / (2 * len(sizes)):g}" if sizes else "# Avg bus bandwidth    : 0",
        "#",
    ]
    return ToolOutput("\n".join(lines) + "\n", exit_status=1 if wrong_total else 0), elapsed_us / 1e6


# --- HPL -----------------------------------------------------------------------------------

HPL_NB = 1024
_HPL_BANNER = """\
================================================================================
HPL-NVIDIA 24.09.0  -- NVIDIA accelerated HPL benchmark -- NVIDIA
================================================================================
HPLinpack 2.1  --  High-Performance Linpack benchmark  --   October 26, 2012
Written by A. Petitet and R. Clint Whaley,  Innovative Computing Laboratory, UTK
Modified by Piotr Luszczek, Innovative Computing Laboratory, UTK
Modified by Julien Langou, University of Colorado Denver
================================================================================

An explanation of the input/output parameters follows:
T/V    : Wall time / encoded variant.
N      : The order of the coefficient matrix A.
NB     : The partitioning blocking factor.
P      : The number of process rows.
Q      : The number of process columns.
Time   : Time in seconds to solve the linear system.
Gflops : Rate of execution for solving the linear system.

The following parameter values will be used:
"""
_HPL_RESIDUAL = "||Ax-b||_oo/(eps*(||A||_oo*||x||_oo+||b||_oo)*N)="


def hpl_grid(gpus: int) -> tuple[int, int]:
    """P x Q process grid, as the sample HPL.dat files pick it (P <= Q, as square as possible)."""
    p = int(math.sqrt(gpus))
    while gpus % p:
        p -= 1
    return p, gpus // p


def hpl_problem_size(node: NodeState, gpus: int) -> int:
    """N that fills ~85% of GPU memory, a multiple of NB, as HPL-NVIDIA's sample .dat files do."""
    words = 0.85 * node.profile.memory_mib * 2**20 * gpus / 8
    return int(math.sqrt(words)) // HPL_NB * HPL_NB


def render_hpl(node: NodeState, ranks: int, rng: random.Random) -> tuple[ToolOutput, float]:
    """xhpl output for `ranks` GPUs, and how long the solve itself took."""
    p, q = hpl_grid(ranks)
    n = hpl_problem_size(node, ranks)
    lines = _HPL_BANNER.splitlines()
    params = [
        ("N", f"{n:8d} "), ("NB", f"{HPL_NB:8d} "), ("PMAP", "Column-major process mapping"),
        ("P", f"{p:8d} "), ("Q", f"{q:8d} "), ("PFACT", "    Left "), ("NBMIN", "       2 "),
        ("NDIV", "       2 "), ("RFACT", "    Left "), ("BCAST", "  2ringM "), ("DEPTH", "       1 "),
        ("SWAP", "Spread-roll (long)"), ("L1", "no-transposed form"), ("U", "transposed form"),
        ("EQUIL", "no"), ("ALIGN", "8 double precision words"),
    ]
    lines += [f"{key.ljust(7)}: {value}" for key, value in params]
    lines += [
        "",
        "-" * 80,
        "",
        "- The matrix A is randomly generated for each test.",
        "- The following scaled residual check will be computed:",
        "      ||Ax-b||_oo / ( eps * ( || x ||_oo * || A ||_oo + || b ||_oo ) * N )",
        "- The relative machine precision (eps) is taken to be               1.110223e-16",
        "- Computational tests pass if scaled residuals are less than                16.0",
        "",
    ]
    lost = [g for g in node.gpus[:ranks] if g.lost]
    if lost:
        rank = lost[0].index
        lines += [
            f"CUDA error at {node.hostname}:{rank}: cudaSetDevice: unknown error (999)",
            "-" * 74,
            "Primary job  terminated normally, but 1 process returned",
            "a non-zero exit code. Per user-direction, the job has been aborted.",
            "-" * 74,
            "-" * 74,
            "mpirun detected that one or more processes exited with non-zero status, thus causing",
            "the job to be terminated. The first process to do so was:",
            "",
            f"  Process name: [[{rng.randint(1000, 65000)},1],{rank}]",
            "  Exit code:    1",
            "-" * 74,
        ]
        return ToolOutput("\n".join(lines) + "\n", exit_status=1), 10.0

    # The slowest GPU paces every panel of a bulk-synchronous solve.
    per_gpu = min(g.hpl_gflops for g in node.gpus[:ranks]) * rng.gauss(1.0, 0.006)
    total = per_gpu * ranks
    seconds = (2.0 / 3.0 * n**3 + 2.0 * n**2) / (total * 1e9)
    start = node.now
    for fraction in (0.0173, 0.0345, 0.0458):
        left = int(n * (1 - fraction)) // HPL_NB * HPL_NB
        gf = total * rng.gauss(1.0, 0.01)
        elapsed = seconds * (1 - (1 - fraction) ** 3)  # work left shrinks with the cube of N_left
        lines.append(
            f" Prog= {fraction * 100:.2f}%\tN_left= {left:8d}\tTime= {elapsed:6.2f}\t"
            f"Time_left= {seconds - elapsed:6.2f}\tiGF= {gf:10.2f} GF= {gf:10.2f}  "
            f"iGF_per= {gf / ranks:8.2f}\tGF_per= {gf / ranks:8.2f}"
        )
    residual = rng.uniform(0.0002, 0.0009)
    passed = not node.transient_failure
    if not passed:
        residual = rng.uniform(1e3, 1e6)  # a silent data error during the solve
    lines += [
        "=" * 80,
        "T/V                N    NB     P     Q         Time          Gflops (   per GPU)",
        "-" * 80,
        f"{'WC0':<10}{n:>10d} {HPL_NB:5d} {p:5d} {q:5d} {seconds:12.2f} {total:15.3e} ({per_gpu:10.3e})",
        f"HPL_pdgesv() start time {_ctime(start)}",
        f"HPL_pdgesv() end time   {_ctime(start + seconds)}",
        "-" * 80,
        f"{_HPL_RESIDUAL} {residual:16.12f} ...... {'PASSED' if passed else 'FAILED'}",
        f"||Ax-b||_oo  . . . . . . . . . . . . . . . . . = {residual * 1.9e-11:.16f}",
        f"||A||_oo . . . . . . . . . . . . . . . . . . . = {n * 0.25 * rng.uniform(0.98, 1.02):.16f}",
        f"||x||_oo . . . . . . . . . . . . . . . . . . . = {rng.uniform(2.0, 15.0):.16f}",
        f"||b||_oo . . . . . . . . . . . . . . . . . . . = {rng.uniform(0.499990, 0.499999):.16f}",
        "=" * 80,
        "",
        "Finished      1 tests with the following results:",
        f"              {int(passed)} tests completed and passed residual checks,",
        f"              {int(not passed)} tests completed and failed residual checks,",
        "              0 tests skipped because of illegal input values.",
        "-" * 80,
        "",
        "End of Tests.",
        "=" * 80,
    ]
    return ToolOutput("\n".join(lines) + "\n", exit_status=0), seconds


# --- InfiniBand ----------------------------------------------------------------------------


def _mac(guid: int) -> int:
    """The MAC inside a ConnectX node GUID (OUI + 0300 + NIC-specific: 946dae0300c2b690)."""
    return (guid >> 40) << 24 | guid & 0xFFFFFF


def _eui64(mac: int) -> int:
    """An Ethernet port's GUID: the MAC with fffe inserted and the local bit flipped."""
    return ((mac >> 24) << 40 | 0xFFFE << 24 | mac & 0xFFFFFF) ^ (0x02 << 56)


def render_ibstat(node: NodeState, devices: Sequence[str]) -> ToolOutput:
    """`ibstat [CA]`: every HCA, or the one named."""
    hcas = [h for h in node.hcas if not devices or h.name in devices]
    if devices and not hcas:
        return ToolOutput("", f"ibpanic: [{node.hostname}] main: '{devices[0]}' IB device can't be found: No such file or directory\n", 255)
    lines = []
    for hca in hcas:
        ethernet = hca.link_layer == "Ethernet"
        port_guid = _eui64(_mac(hca.guid)) if ethernet else hca.guid
        lines += [
            f"CA '{hca.name}'",
            f"\tCA type: {hca.ca_type}",
            "\tNumber of ports: 1",
            f"\tFirmware version: {hca.firmware}",
            "\tHardware version: 0",
            f"\tNode GUID: 0x{hca.guid:016x}",
            f"\tSystem image GUID: 0x{hca.guid:016x}",
            "\tPort 1:",
            f"\t\tState: {hca.state}",
            f"\t\tPhysical state: {hca.physical_state}",
            f"\t\tRate: {hca.rate_gbps}",
            f"\t\tBase lid: {0 if ethernet else hca.lid}",
            "\t\tLMC: 0",
            f"\t\tSM lid: {0 if ethernet else 1}",
            f"\t\tCapability mask: {'0x00010000' if ethernet else '0xa751e848'}",
            f"\t\tPort GUID: 0x{port_guid:016x}",
            f"\t\tLink layer: {hca.link_layer}",
        ]
    return ToolOutput("\n".join(lines) + "\n")


@dataclass(frozen=True)
class IbWriteBwRun:
    device: str
    size: int
    qps: int
    duration_s: float | None  # -D: run for a time instead of a number of iterations
    iterations: int
    report_gbits: bool
    server: str | None  # the peer to connect to; None = this side is the server
    sweep: bool  # -a: every size from 2 B to 8 MiB


_PERFTEST_RULE = "-" * 87


def render_ib_write_bw(node: NodeState, run: IbWriteBwRun, rng: random.Random) -> tuple[ToolOutput, float]:
    """perftest ib_write_bw, one side of the test; and its seconds on the wire."""
    hca = next((h for h in node.hcas if h.name == run.device), None)
    if hca is None:
        return ToolOutput("", f" Couldn't find device {run.device}\n Unable to find the Infiniband/RoCE device\n", 1), 0.1
    if hca.state != "Active":
        return ToolOutput(
            "",
            f" Port number 1 state is {hca.state}\n Couldn't set the link layer\n Couldn't get context for the device\n",
            1,
        ), 0.5
    out = []
    if run.duration_s is not None:
        out.append(" WARNING: BW peak won't be measured in this run.")
    unit = "Gb/sec" if run.report_gbits else "MB/sec"
    qpn = rng.randint(0x20, 0xF000)
    out += [
        _PERFTEST_RULE,
        "                    RDMA_Write BW Test",
        f" Dual-port       : OFF\t\tDevice         : {hca.name}",
        f" Number of qps   : {run.qps}\t\tTransport type : IB",
        " Connection type : RC\t\tUsing SRQ      : OFF",
        " PCIe relax order: ON\t\tLock-free      : OFF",
        " ibv_wr* API     : ON\t\tUsing DDP      : OFF",
        " TX depth        : 128",
        " CQ Moderation   : 1",
        " Mtu             : 4096[B]",
        f" Link type       : {'Ethernet' if hca.link_layer == 'Ethernet' else 'IB'}",
        " Max inline data : 0[B]",
        " rdma_cm QPs\t : OFF",
        " Data ex. method : Ethernet",
        _PERFTEST_RULE,
        f" local address: LID {hca.lid:#06x} QPN {qpn:#06x} PSN {rng.getrandbits(24):#08x} RKey 0x002440 VAddr 0x007f2e5f64b000",
        f" remote address: LID {hca.lid:#06x} QPN {qpn + 1:#06x} PSN {rng.getrandbits(24):#08x} RKey 0x002442 VAddr 0x007f443b2f8000",
        _PERFTEST_RULE,
        f" #bytes     #iterations    BW peak[{unit}]    BW average[{unit}]   MsgRate[Mpps]",
    ]
    sizes = [2**k for k in range(1, 24)] if run.sweep else [run.size]
    seconds = 0.0
    for size in sizes:
        # Small messages are bound by the message rate, large ones by the link.
        gbps = min(hca.write_bw_gbps, size * 8 * 90e6 / 1e9) * rng.gauss(1.0, 0.003)
        msg_rate = gbps * 1e9 / 8 / size / 1e6
        iterations = int(msg_rate * 1e6 * run.duration_s) if run.duration_s is not None else run.iterations
        seconds += run.duration_s if run.duration_s is not None else iterations / (msg_rate * 1e6)
        value = gbps if run.report_gbits else gbps * 1e9 / 8 / 2**20
        peak = 0.0 if run.duration_s is not None else value * 1.002
        out.append(f" {size:<7d}    {iterations:<10d}       {peak:<7.2f}            {value:<7.2f}\t\t     {msg_rate:<7.6f}")
    out.append(_PERFTEST_RULE)
    return ToolOutput("\n".join(out) + "\n"), seconds


# --- firmware ------------------------------------------------------------------------------


def render_flint_query(node: NodeState, hca: HcaState) -> ToolOutput:
    """`flint -d DEV query` for one ConnectX adapter."""
    model = node.profile.hca
    return ToolOutput(
        "\n".join(
            aligned_pairs(
                [
                    ("Image type", "FS4"),
                    ("FW Version", hca.firmware),
                    ("FW Release Date", "3.10.2024"),
                    ("Product Version", hca.firmware),
                    ("Rom Info", f"type=UEFI version={model.uefi_version} cpu=AMD64,AARCH64"),
                    ("", f"type=PXE version={model.pxe_version} cpu=AMD64"),
                    ("Description", "UID                GuidsNumber"),
                    ("Base GUID", f"{hca.guid:016x}        16"),
                    ("Base MAC", f"{_mac(hca.guid):012x}        16"),
                    ("Image VSD", "N/A"),
                    ("Device VSD", "N/A"),
                    ("PSID", model.psid),
                    ("Security Attributes", "secure-fw"),
                ],
                key_width=23,
            )
        )
        + "\n"
    )


def render_mlxfwmanager(node: NodeState) -> ToolOutput:
    """`mlxfwmanager --query` (and `mlxup --query`): every ConnectX adapter's firmware."""
    model = node.profile.hca
    lines = ["Querying Mellanox devices firmware ...", ""]
    adapters = [h for h in node.hcas if h.ca_type == model.ca_type]
    for number, hca in enumerate(adapters, start=1):
        lines += [f"Device #{number}:", "----------", ""]
        lines += aligned_pairs(
            [
                ("Device Type", model.device_type),
                ("Part Number", model.part_number),
                ("Description", model.description),
                ("PSID", model.psid),
                ("PCI Device Name", f"/dev/mst/mt{model.ca_type[2:]}_pciconf{number - 1}"),
                ("Base GUID", f"{hca.guid:016x}"),
                ("Versions", "Current        Available     "),
            ],
            key_width=18,
            indent="  ",
        )
        lines += [
            f"     {name:<15}{version:<15}N/A           "
            for name, version in (("FW", hca.firmware), ("PXE", model.pxe_version), ("UEFI", model.uefi_version))
        ]
        lines += ["", *aligned_pairs([("Status", "No matching image found")], key_width=18, indent="  "), ""]
    return ToolOutput("\n".join(lines) + "\n")


def firmware_inventory(node: NodeState, packaged: bool = False) -> list[tuple[str, str]]:
    """(component, version) as the BMC's Redfish FirmwareInventory names them: what runs on
    the node, or with `packaged` what the profile's firmware package carries."""
    p = node.profile
    cx = [p.hca.firmware if packaged else h.firmware for h in node.hcas if h.ca_type == p.hca.ca_type]
    items = [(f"CX7_{i}", version) for i, version in enumerate(cx)]
    items += [(f"HGX_FW_GPU_SXM_{g.index + 1}", p.vbios_version if packaged else g.vbios_version) for g in node.gpus]
    items += [(f"HGX_InfoROM_GPU_SXM_{g.index + 1}", p.inforom_image) for g in node.gpus]
    items += [(f"HGX_FW_NVSwitch_{i}", p.nvswitch_firmware) for i in range(p.nvswitch_count)]
    return sorted(items)


def render_nvfwupd_show_version(node: NodeState, with_package: bool, as_json: bool) -> ToolOutput:
    """`nvfwupd show_version [-p PKG] [-j]`; the package, when given, is the profile's baseline."""
    packaged = dict(firmware_inventory(node, packaged=True)) if with_package else {}
    package_names = ["nvfw_HGX_sim_baseline"] if with_package else []
    rows = []
    for component, running in firmware_inventory(node):
        version = packaged.get(component, "N/A")
        rows.append((component, running, version, "Yes" if version == running else "No"))
    if as_json:
        document = {
            "Connection Status": "Successful",
            "System Model": f"HGX {node.profile.gpu_name.removeprefix('NVIDIA ')} 8-GPU",
            "Part number": "965-24387-0002-001",
            "Serial number": node.gpus[0].serial,
            "Packages": package_names,
            "Firmware Devices": [
                {"AP Name": c, "Sys Version": r, "Pkg Version": pk, "Up-To-Date": up} for c, r, pk, up in rows
            ],
            "Error Code": 0,
        }
        return ToolOutput(json.dumps(document, indent=4) + "\n")
    lines = [
        f"System Model: HGX {node.profile.gpu_name.removeprefix('NVIDIA ')} 8-GPU",
        "Part number: 965-24387-0002-001",
        f"Serial number: {node.gpus[0].serial}",
        f"Packages: {package_names}",
        "Connection Status: Successful",
        "",
        "Firmware Devices:",
    ]
    table = [("AP Name", "Sys Version", "Pkg Version", "Up-To-Date"), ("-------", "-----------", "-----------", "----------")]
    lines += [f"{a:<41}{b:<31}{c:<31}{d:<10}" for a, b, c, d in table + rows]
    lines += ["-" * 120, "Error Code: 0"]
    return ToolOutput("\n".join(lines) + "\n")
