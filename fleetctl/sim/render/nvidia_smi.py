"""`nvidia-smi --query-gpu=... --format=csv` and `nvidia-smi -q` (read by checks.nvidia_smi
and checks.firmware)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from fleetctl.sim.node import (
    REASON_GPU_IDLE,
    REASON_HW_SLOWDOWN,
    REASON_HW_THERMAL,
    REASON_SW_THERMAL,
    GpuState,
    NodeState,
    ToolOutput,
)
from fleetctl.sim.profiles import SimProfile
from fleetctl.sim.render._layout import ReportTree, ctime, report_lines

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


def _yes_no(flag: bool) -> str:
    return "Yes" if flag else "No"


def _active(flag: bool) -> str:
    return "Active" if flag else "Not Active"


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
        "fabric.state": (None, lambda n, g: g.fabric_state),
        "fabric.status": (None, lambda n, g: g.fabric_status),
    }
    for position, label in enumerate(_HISTOGRAM_LABELS):
        fields[f"remapped_rows.histogram.{label.lower()}"] = (None, _histogram_bucket(position))
    for _, suffix, bit in _REASON_NAMES:
        fields[f"clocks_event_reasons.{suffix}"] = (None, _event_reason(bit))
    return fields


def _histogram_bucket(position: int) -> Callable[[NodeState, GpuState], str]:
    return lambda n, g: str(_bank_histogram(n.profile, g)[position])


def _event_reason(bit: int) -> Callable[[NodeState, GpuState], str]:
    return lambda n, g: _active(bool(g.event_reasons & bit))


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
    for requested, name in zip(fields, canonical, strict=False):
        if name not in QUERY_FIELDS:
            return ToolOutput(f'Field "{requested}" is not a valid field to query.\n\n', exit_status=2)
    # nvidia-smi opens every device before printing; one it cannot open is reported first.
    selected = _selected(node, indices)
    lines = [_lost_gpu_line(g) for g in selected if g.lost]
    if header:
        lines.append(
            ", ".join(
                f"{name} [{QUERY_FIELDS[name][0]}]" if units and QUERY_FIELDS[name][0] else name for name in canonical
            )
        )
    for gpu in selected:
        if not gpu.lost:
            lines.append(", ".join(_query_cell(node, gpu, name, units) for name in canonical))
    return ToolOutput(
        "\n".join(lines) + "\n", exit_status=NVML_ERROR_GPU_IS_LOST if any(g.lost for g in selected) else 0
    )


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

    def watts(value: float) -> str:
        return f"{value:.2f} W"

    # Sections that mix leaves and sub-sections are named: a list literal nested in a tuple
    # gets no type context from the ReportTree union, so mypy would widen its items.
    pci: ReportTree = [
        ("Bus", f"0x{gpu.bus:02X}"),
        ("Device", "0x00"),
        ("Domain", "0x0000"),
        ("Device Id", f"0x{p.pci_device_id:04X}10DE"),
        ("Bus Id", gpu.pci_bus_id),
        ("Sub System Id", f"0x{p.pci_subsystem_id:04X}10DE"),
        (
            "GPU Link Info",
            [
                ("PCIe Generation", [("Max", str(p.pcie_gen)), ("Current", str(p.pcie_gen))]),
                ("Link Width", [("Max", "16x"), ("Current", "16x")]),
            ],
        ),
        ("Replays Since Reset", "0"),
        ("Replay Number Rollovers", "0"),
    ]
    clocks_event_reasons: ReportTree = [
        ("Idle", reason["Idle"]),
        ("Applications Clocks Setting", reason["Applications Clocks Setting"]),
        ("SW Power Cap", reason["SW Power Cap"]),
        (
            "HW Slowdown",
            reason["HW Slowdown"],
            [
                ("HW Thermal Slowdown", reason["HW Thermal Slowdown"]),
                ("HW Power Brake Slowdown", reason["HW Power Brake Slowdown"]),
            ],
        ),
        ("Sync Boost", reason["Sync Boost"]),
        ("SW Thermal Slowdown", reason["SW Thermal Slowdown"]),
        ("Display Clock Setting", reason["Display Clock Setting"]),
    ]
    remapped_rows: ReportTree = [
        ("Correctable Error", str(gpu.remap_correctable)),
        ("Uncorrectable Error", str(gpu.remap_uncorrectable)),
        ("Pending", _yes_no(gpu.remap_pending)),
        ("Remapping Failure Occurred", _yes_no(gpu.remap_failure)),
        (
            "Bank Remap Availability Histogram",
            [
                (label, f"{count} bank(s)")
                for label, count in zip(_HISTOGRAM_LABELS, _bank_histogram(p, gpu), strict=False)
            ],
        ),
    ]
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
        (
            "Inforom Version",
            [
                ("Image Version", p.inforom_image),
                ("OEM Object", "2.1"),
                ("ECC Object", "7.16"),
                ("Power Management Object", "N/A"),
            ],
        ),
        (
            "GPU Reset Status",
            [
                ("Reset Required", _yes_no(gpu.remap_pending)),
                ("Drain and Reset Recommended", "No"),
            ],
        ),
        ("GSP Firmware Version", p.driver_version),
        ("PCI", pci),
        ("Fan Speed", "N/A"),
        ("Performance State", "P0"),
        ("Clocks Event Reasons", clocks_event_reasons),
        (
            "FB Memory Usage",
            [
                ("Total", f"{p.memory_mib} MiB"),
                ("Reserved", f"{p.memory_reserved_mib} MiB"),
                ("Used", "1 MiB"),
                ("Free", f"{p.memory_mib - p.memory_reserved_mib - 1} MiB"),
            ],
        ),
        ("Compute Mode", "Default"),
        ("Utilization", [("Gpu", "0 %"), ("Memory", "0 %"), ("Encoder", "0 %"), ("Decoder", "0 %")]),
        ("ECC Mode", [("Current", "Enabled"), ("Pending", "Enabled")]),
        (
            "ECC Errors",
            [
                ("Volatile", ecc_counts(gpu.ecc_uncorrected_volatile)),
                ("Aggregate", [*ecc_counts(gpu.ecc_uncorrected_aggregate), ("SRAM Threshold Exceeded", "No")]),
            ],
        ),
        (
            "Retired Pages",
            [
                ("Single Bit ECC", "N/A"),
                ("Double Bit ECC", "N/A"),
                ("Pending Page Blacklist", "N/A"),
            ],
        ),
        ("Remapped Rows", remapped_rows),
        (
            "Temperature",
            [
                ("GPU Current Temp", f"{gpu.temperature_c} C"),
                # Headroom to the slowdown limit, as Hopper reports it.
                ("GPU T.Limit Temp", f"{87 - gpu.temperature_c} C"),
                ("GPU Shutdown T.Limit Temp", "-8 C"),
                ("GPU Slowdown T.Limit Temp", "-2 C"),
                ("GPU Max Operating T.Limit Temp", "0 C"),
                ("GPU Target Temperature", "N/A"),
                ("Memory Current Temp", f"{gpu.memory_temperature_c} C"),
                ("Memory Max Operating T.Limit Temp", "0 C"),
            ],
        ),
        (
            "GPU Power Readings",
            [
                ("Power Draw", watts(gpu.power_draw_w)),
                ("Current Power Limit", watts(p.power_limit_w)),
                ("Requested Power Limit", watts(p.power_limit_w)),
                ("Default Power Limit", watts(p.power_limit_w)),
                ("Min Power Limit", watts(p.min_power_limit_w)),
                ("Max Power Limit", watts(p.power_limit_w)),
            ],
        ),
        (
            "Clocks",
            [
                ("Graphics", f"{gpu.sm_clock_mhz} MHz"),
                ("SM", f"{gpu.sm_clock_mhz} MHz"),
                ("Memory", f"{p.memory_clock_mhz} MHz"),
            ],
        ),
        (
            "Max Clocks",
            [
                ("Graphics", f"{p.max_sm_clock_mhz} MHz"),
                ("SM", f"{p.max_sm_clock_mhz} MHz"),
                ("Memory", f"{p.memory_clock_mhz} MHz"),
            ],
        ),
        ("Fabric", _fabric(node, gpu)),
        ("Processes", "None"),
    ]


def _fabric(node: NodeState, gpu: GpuState) -> ReportTree:
    """The Fabric section: on a GPU of a multi-node NVLink domain (GB200) its clique, cluster and
    health too, in the layout kubernetes-sigs/dra-driver-nvidia-gpu#626 shows (a GB200 node)."""
    if not node.domain:
        return [("State", gpu.fabric_state), ("Status", gpu.fabric_status)]
    return [
        ("State", gpu.fabric_state),
        ("Status", gpu.fabric_status),
        ("CliqueId", str(node.clique_id)),
        ("ClusterUUID", node.cluster_uuid),
        ("Health", [("Summary", "Healthy"), ("Bandwidth", "Full")]),
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
            return ToolOutput(
                f'Invalid combination of input arguments: "{unknown[0]}" is not a valid -d option.\n', exit_status=2
            )
        wanted = {section for d in display for section in Q_DISPLAY_SECTIONS[d]}
    selected = _selected(node, indices)
    lines = [_lost_gpu_line(g) for g in selected if g.lost]  # as for --query-gpu
    lines += [
        "",
        "==============NVSMI LOG==============",
        "",
        f"{'Timestamp'.ljust(42)}: {ctime(node.now)}",
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
    return ToolOutput(
        "\n".join(lines) + "\n", exit_status=NVML_ERROR_GPU_IS_LOST if any(g.lost for g in selected) else 0
    )


def render_nvidia_smi_reset(node: NodeState, indices: Sequence[int] | None) -> ToolOutput:
    """`nvidia-smi -r [-i N]`: a GPU that fell off the bus cannot be reset (NVML cannot reach it)."""
    selected = _selected(node, indices)
    lost = [g for g in selected if g.lost]
    if lost:
        return ToolOutput("", "".join(_lost_gpu_line(g) + "\n" for g in lost), NVML_ERROR_GPU_IS_LOST)
    return ToolOutput("".join(f"GPU {g.pci_bus_id} was successfully reset.\n" for g in selected) + "All done.\n")
