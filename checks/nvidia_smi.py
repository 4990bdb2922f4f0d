"""`nvidia-smi --query-gpu=... --format=csv` and `nvidia-smi -q`: per-GPU health facts.

Both formats become the same `GpuHealth` records, so one evaluator judges them: GPU count
and model against the profile, uncorrectable ECC, row remapping (pending -> reset needed,
failure or exhausted banks -> RMA, per NVIDIA's GPU memory error management guide),
clock event (throttle) reasons, temperatures and PCIe link width.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fleetctl.checks._text import NOT_AVAILABLE, UnjudgeableOutput, integer, number, verdict
from fleetctl.checks.profiles import GpuProfile
from fleetctl.checks.result import CheckResult, Finding
from fleetctl.checks.signatures import signatures

# NVML's nvmlClocksEventReason* bits, as printed in clocks_event_reasons.active.
CLOCK_EVENT_BITS = {
    0x1: "Idle",
    0x2: "Applications Clocks Setting",
    0x4: "SW Power Cap",
    0x8: "HW Slowdown",
    0x10: "Sync Boost",
    0x20: "SW Thermal Slowdown",
    0x40: "HW Thermal Slowdown",
    0x80: "HW Power Brake Slowdown",
    0x100: "Display Clock Setting",
}
# Hardware slowdowns mean the GPU protects itself (overheat, power brake from the PSU or
# baseboard): the node is unfit. Software thermal slowdown is the early sign. A power cap
# under full load is normal operation.
THROTTLE_SEVERITY = {
    "HW Slowdown": "fail",
    "HW Thermal Slowdown": "fail",
    "HW Power Brake Slowdown": "fail",
    "SW Thermal Slowdown": "warn",
    "SW Power Cap": "info",
}
# Cell values by which nvidia-smi says it could not read the GPU at all.
GPU_READ_ERRORS = ("ERR!", "Unknown Error", "GPU is lost", "GPU requires reset")


@dataclass
class GpuHealth:
    index: int
    name: str | None = None
    uuid: str | None = None
    serial: str | None = None
    bus_id: str | None = None
    vbios: str | None = None
    temperature_c: float | None = None
    memory_temperature_c: float | None = None
    power_draw_w: float | None = None
    power_limit_w: float | None = None
    clock_events: list[str] = field(default_factory=list)
    ecc_corrected_volatile: int | None = None
    ecc_uncorrected_volatile: int | None = None
    ecc_uncorrected_aggregate: int | None = None
    ecc_corrected_aggregate: int | None = None  # -q only: lifetime count, for the record
    remapped_correctable: int | None = None
    remapped_uncorrectable: int | None = None
    remap_pending: bool | None = None
    retirement_pending: bool | None = None  # dynamic page retirement (before A100): reset to retire
    remap_failure: bool | None = None
    remap_histogram: dict[str, int] = field(default_factory=dict)  # max/high/partial/low/none
    pcie_gen: int | None = None  # drops at idle to save power: recorded, not judged
    pcie_gen_max: int | None = None
    pcie_width: int | None = None
    pcie_width_max: int | None = None
    read_errors: list[str] = field(default_factory=list)  # "<field>: <error>"
    # -q's Fabric section (State, Status, CliqueId, ClusterUUID, Health/Summary): the GPU's
    # registration with its multi-node NVLink domain, judged on profiles that have one.
    fabric: dict[str, str] = field(default_factory=dict)


@dataclass
class NvidiaSmiReport:
    gpus: list[GpuHealth]
    driver_version: str | None = None
    attached_gpus: int | None = None  # what -q says it is about to print
    lost_gpus: list[tuple[str, str]] = field(default_factory=list)  # (PCI address, error)
    detailed: bool = False  # nvidia-smi -q (which reports the fabric state), not the CSV query
    table: bool = False  # the default table: no remapped rows, clock event reasons or PCIe link
    table_complete: bool = False  # the table reached its Processes section: not cut between GPUs


_LOST = re.compile(r"Unable to determine the device handle for (?:GPU\s*)?(?P<pci>[0-9A-Fa-f:.]+):\s*(?P<error>.+)")


_DRIVER_MISMATCH = "Failed to initialize NVML: Driver/library version mismatch"


def parse_nvidia_smi(text: str) -> NvidiaSmiReport:
    lost = [(m["pci"], m["error"].strip()) for m in _LOST.finditer(text)]
    if "==============NVSMI LOG==============" in text or re.search(r"^GPU [0-9A-Fa-f]{4,8}:", text, re.M):
        report = _parse_q(text)
    elif (header_at := _csv_header_line(text)) is not None:
        report = _parse_csv(text.splitlines()[header_at:])
    elif _TABLE_BANNER.search(text):
        report = _parse_table(text)
    elif "No devices were found" in text or lost:
        report = NvidiaSmiReport([])
    else:
        raise UnjudgeableOutput("not nvidia-smi's table, --query-gpu CSV or -q output")
    report.lost_gpus = lost
    return report


# ---- the default table ------------------------------------------------------------------
#
# `nvidia-smi` with no arguments, the form operators paste most. Each GPU is a block of two
# rows (three with the MIG M. column, 450+ drivers) closed by a border:
#
#   |   0  NVIDIA H100 80GB HBM3          On  |   00000000:18:00.0 Off |                    0 |
#   | N/A   30C    P0            100W /  700W |       1MiB /  81559MiB |      0%      Default |
#
# It shows the GPUs NVML can see, their temperature and power, ERR! for a field NVML cannot
# read and the volatile uncorrectable ECC count; not the remapped rows, the clock event
# reasons or the PCIe link, which the -q and CSV forms carry.

_TABLE_BANNER = re.compile(r"^\|\s*NVIDIA-SMI \S+\s+Driver Version:\s*(?P<driver>\S+)", re.M)
_TABLE_NAME_ROW = re.compile(
    r"^\|\s*(?P<index>\d+)\s+(?P<name>.+?)\s+(?P<persistence>On|Off|ERR!)\s*\|"
    r"\s*(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s+(?P<display>\S+)\s*\|"
    r"\s*(?P<ecc>\S+)\s*\|$"
)
_TABLE_STATE_ROW = re.compile(
    r"^\|\s*(?P<fan>\S+)\s+(?P<temp>\S+)\s+(?P<perf>\S+)\s+(?P<draw>\S+)\s*/\s*(?P<cap>\S+)\s*\|"
    r"\s*\S+\s*/\s*\S+\s*\|.*\|$"
)
_TABLE_BORDER = re.compile(r"^\+-[-+]*\+$")
_TABLE_INDEX_ROW = re.compile(r"^\|\s*\d+\s{2,}\S")  # "|   3  NVIDIA H100 ...": a GPU's first row
_TABLE_AFTER_GPUS = re.compile(r"^\|\s*(?:MIG devices|Processes):")
_ECC_OFF = "Off"  # ECC disabled on the GPU: no counter to read


def _parse_table(text: str) -> NvidiaSmiReport:
    """The GPUs of nvidia-smi's default table. A GPU block cut before its border, or a table
    cut before its Processes section, is recorded (`complete`) so that a GPU count can be
    told from a cut table: the count is judged only on a complete table."""
    lines = [line.strip() for line in text.splitlines()]
    # The GPU blocks end where the MIG devices' or the processes' table begins.
    end = next((at for at, line in enumerate(lines) if _TABLE_AFTER_GPUS.match(line)), len(lines))
    lines = lines[:end]
    gpus: list[GpuHealth] = []
    open_block: GpuHealth | None = None
    for at, line in enumerate(lines):
        if _TABLE_INDEX_ROW.match(line) and not _TABLE_NAME_ROW.match(line):
            # A GPU's first row that cannot be read (ERR! where its bus id would be): never skipped.
            raise UnjudgeableOutput(f"unreadable GPU row in the table: {line[:80]!r}")
        if m := _TABLE_NAME_ROW.match(line):
            state = _TABLE_STATE_ROW.match(lines[at + 1]) if at + 1 < len(lines) else None
            if state is None:
                raise UnjudgeableOutput(f"GPU {m['index']}'s table row has no state row under it: cut short")
            open_block = _gpu_from_table(m, state)
            gpus.append(open_block)
        elif open_block is not None and _TABLE_BORDER.match(line):
            open_block = None
    if open_block is not None:
        raise UnjudgeableOutput(f"the table ends inside GPU {open_block.index}'s block: cut short")
    banner = _TABLE_BANNER.search(text)
    return NvidiaSmiReport(
        gpus,
        driver_version=banner["driver"] if banner else None,
        table=True,
        table_complete=bool(re.search(r"^\|\s*Processes:", text, re.M)),
    )


def _gpu_from_table(name_row: re.Match[str], state_row: re.Match[str]) -> GpuHealth:
    gpu = GpuHealth(index=int(name_row["index"]), bus_id=name_row["bus"])
    # A name the table cut to its column ends in "..."; it is kept as printed.
    gpu.name = name_row["name"].strip()
    cells = {
        "persistence_mode": name_row["persistence"],
        "fan.speed": state_row["fan"],
        "temperature.gpu": state_row["temp"],
        "pstate": state_row["perf"],
        "power.draw": state_row["draw"],
        "power.limit": state_row["cap"],
        "ecc.errors.uncorrected.volatile.total": name_row["ecc"],
    }
    read = _Reader(gpu, cells)
    read.text("persistence_mode")
    read.text("pstate")
    read.num("fan.speed")
    gpu.temperature_c = read.num("temperature.gpu")
    gpu.power_draw_w = read.num("power.draw")
    gpu.power_limit_w = read.num("power.limit")
    if cells["ecc.errors.uncorrected.volatile.total"] != _ECC_OFF:
        gpu.ecc_uncorrected_volatile = read.int("ecc.errors.uncorrected.volatile.total")
    return gpu


# ---- CSV --------------------------------------------------------------------------------


_CSV_FIELD = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*(?: \[[^]]+\])?$")


def _csv_header_line(text: str) -> int | None:
    """The line of a --query-gpu header: comma-separated field names like 'power.draw [W]'."""
    for number_, line in enumerate(text.splitlines()):
        names = [n.strip() for n in line.split(",")]
        if len(names) >= 2 and all(_CSV_FIELD.match(n) for n in names):
            return number_
    return None


def _parse_csv(lines: list[str]) -> NvidiaSmiReport:
    block = [lines[0]]
    for line in lines[1:]:  # the table ends at the first blank or comment line
        if not line.strip() or line.lstrip().startswith("#"):
            break
        block.append(line)
    rows = list(csv.reader(block, skipinitialspace=True))
    header = [
        re.sub(r"\s*\[.*\]$", "", h.strip()).replace("clocks_throttle_reasons", "clocks_event_reasons") for h in rows[0]
    ]
    gpus = []
    for position, row in enumerate(rows[1:]):
        if len(row) != len(header):
            raise UnjudgeableOutput(f"CSV row {position + 1} has {len(row)} fields, the header {len(header)}")
        cells = {name: value.strip() for name, value in zip(header, row, strict=False)}
        gpus.append(_gpu_from_csv(cells, position))
    drivers = set(_csv_cell(rows, header, "driver_version"))
    return NvidiaSmiReport(gpus, driver_version=next(iter(drivers)) if len(drivers) == 1 else None)


def _csv_cell(rows: list[list[str]], header: list[str], name: str) -> list[str]:
    if name not in header:
        return []
    return [row[header.index(name)].strip() for row in rows[1:]]


def _gpu_from_csv(cells: dict[str, str], position: int) -> GpuHealth:
    gpu = GpuHealth(index=position)
    read = _Reader(gpu, cells)
    gpu.index = integer(cells["index"]) if "index" in cells else position
    gpu.name, gpu.uuid, gpu.serial = cells.get("name"), cells.get("uuid"), cells.get("serial")
    gpu.bus_id, gpu.vbios = cells.get("pci.bus_id"), cells.get("vbios_version")
    gpu.temperature_c = read.num("temperature.gpu")
    gpu.memory_temperature_c = read.num("temperature.memory")
    gpu.power_draw_w = read.num("power.draw")
    gpu.power_limit_w = read.num("power.limit")
    mask = read.int("clocks_event_reasons.active")
    gpu.clock_events = [reason for bit, reason in CLOCK_EVENT_BITS.items() if mask and mask & bit]
    gpu.ecc_corrected_volatile = read.int("ecc.errors.corrected.volatile.total")
    gpu.ecc_uncorrected_volatile = read.int("ecc.errors.uncorrected.volatile.total")
    gpu.ecc_uncorrected_aggregate = read.int("ecc.errors.uncorrected.aggregate.total")
    gpu.remapped_correctable = read.int("remapped_rows.correctable")
    gpu.remapped_uncorrectable = read.int("remapped_rows.uncorrectable")
    gpu.remap_pending = read.flag("remapped_rows.pending")
    gpu.retirement_pending = read.flag("retired_pages.pending")
    gpu.remap_failure = read.flag("remapped_rows.failure")
    for bucket in ("max", "high", "partial", "low", "none"):
        if (value := read.int(f"remapped_rows.histogram.{bucket}")) is not None:
            gpu.remap_histogram[bucket] = value
    gpu.pcie_gen = read.int("pcie.link.gen.current")
    gpu.pcie_gen_max = read.int("pcie.link.gen.max")
    gpu.pcie_width = read.int("pcie.link.width.current")
    gpu.pcie_width_max = read.int("pcie.link.width.max")
    return gpu


class _Reader:
    """Reads one GPU's cells; a cell that says the GPU could not be read is recorded, not parsed."""

    def __init__(self, gpu: GpuHealth, cells: dict[str, str]):
        self.gpu, self.cells = gpu, cells

    def _cell(self, key: str) -> str | None:
        value = self.cells.get(key)
        if not value or value.strip("[]") in NOT_AVAILABLE or value.startswith("[Requested functionality"):
            return None
        if any(error in value for error in GPU_READ_ERRORS):
            self.gpu.read_errors.append(f"{key}: {value}")
            return None
        return value

    def text(self, key: str) -> str | None:
        """A cell read only for a read error in it (the table's ERR! in any column)."""
        return self._cell(key)

    def num(self, key: str) -> float | None:
        value = self._cell(key)
        return None if value is None else number(value, strip_unit=True)

    def int(self, key: str) -> int | None:
        value = self._cell(key)
        return None if value is None else integer(value, strip_unit=True)

    def flag(self, key: str) -> bool | None:
        value = self._cell(key)
        if value is None:
            return None
        if value not in ("Yes", "No", "0", "1"):
            raise UnjudgeableOutput(f"{key} is {value!r}, expected Yes or No")
        return value in ("Yes", "1")


# ---- -q ---------------------------------------------------------------------------------

_Q_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[^:]+?)\s*(?::\s*(?P<value>.*?))?\s*$")
_Q_GPU = re.compile(r"^GPU (?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$")


def _parse_q(text: str) -> NvidiaSmiReport:
    top: dict[str, str] = {}
    blocks: list[tuple[str, dict[str, str]]] = []
    stack: list[tuple[int, str]] = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("=") or line.lstrip().startswith("#"):
            continue
        if m := _Q_GPU.match(line):
            blocks.append((m["bus"], {}))
            stack = []
            continue
        if not (m := _Q_LINE.match(line)):
            raise UnjudgeableOutput(f"not a `nvidia-smi -q` line: {line.strip()[:40]!r}")
        depth = len(m["indent"].expandtabs(4))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        path = "/".join([key for _, key in stack] + [m["key"]])
        (blocks[-1][1] if blocks else top)[path] = m["value"] or ""
        stack.append((depth, m["key"]))
    if any("Product Name" in fields for _, fields in blocks):
        for bus, fields in blocks:
            # Every driver ends a GPU's full block with its Processes entry (or Capabilities after it).
            if "Processes" not in fields:
                raise UnjudgeableOutput(f"nvidia-smi -q block for GPU {bus} is cut short (no Processes section)")
    else:
        _check_sections_complete(blocks)
    gpus = [_gpu_from_q(bus, fields, index) for index, (bus, fields) in enumerate(blocks)]
    attached = top.get("Attached GPUs")
    return NvidiaSmiReport(gpus, top.get("Driver Version"), integer(attached) if attached else None, detailed=True)


def _check_sections_complete(blocks: list[tuple[str, dict[str, str]]]) -> None:
    """`nvidia-smi -q -d SECTION[,...]` prints only those sections, the same ones for
    every GPU: a block missing a section or entry the first block has was cut short."""

    def outline(fields: dict[str, str]) -> set[str]:
        return {path for path in fields if path.count("/") <= 2}

    expected = outline(blocks[0][1]) if blocks else set()
    for bus, fields in blocks:
        if missing := sorted(expected - outline(fields)):
            raise UnjudgeableOutput(f"nvidia-smi -q block for GPU {bus} is cut short (no {missing[0]!r})")


_MEASUREMENT = re.compile(r"^\S+ (?:W|C|MHz|MiB|KB/s|%|mV|us)$")


def _gpu_from_q(bus: str, f: dict[str, str], index: int) -> GpuHealth:
    gpu = GpuHealth(index=index, bus_id=bus)
    read = _Reader(gpu, f)
    gpu.name, gpu.uuid, gpu.serial = f.get("Product Name"), f.get("GPU UUID"), f.get("Serial Number")
    gpu.vbios = f.get("VBIOS Version")
    for path, value in f.items():
        # Every "<number> <unit>" value must be a number, read or not: a garbled one means
        # the text is damaged, and what else in it is damaged cannot be told.
        if _MEASUREMENT.match(value):
            read.num(path)
    gpu.temperature_c = read.num("Temperature/GPU Current Temp")
    gpu.memory_temperature_c = read.num("Temperature/Memory Current Temp")
    gpu.power_draw_w = read.num("GPU Power Readings/Power Draw") or read.num("Power Readings/Power Draw")
    gpu.power_limit_w = read.num("GPU Power Readings/Current Power Limit") or read.num("Power Readings/Power Limit")
    for path, value in f.items():
        section, _, reason = path.partition("/")
        if section in ("Clocks Event Reasons", "Clocks Throttle Reasons") and value == "Active":
            gpu.clock_events.append(reason.rsplit("/", 1)[-1])
    gpu.ecc_corrected_volatile = _sum_ecc(read, f, "ECC Errors/Volatile/", corrected=True)
    gpu.ecc_uncorrected_volatile = _sum_ecc(read, f, "ECC Errors/Volatile/", corrected=False)
    gpu.ecc_uncorrected_aggregate = _sum_ecc(read, f, "ECC Errors/Aggregate/", corrected=False)
    gpu.ecc_corrected_aggregate = _sum_ecc(read, f, "ECC Errors/Aggregate/", corrected=True)
    gpu.remapped_correctable = read.int("Remapped Rows/Correctable Error")
    gpu.remapped_uncorrectable = read.int("Remapped Rows/Uncorrectable Error")
    gpu.remap_pending = read.flag("Remapped Rows/Pending")
    # "Pending Page Blacklist" (older drivers) or "Pending Page Retirement".
    gpu.retirement_pending = next(
        (read.flag(path) for path in f if path.startswith("Retired Pages/Pending Page")), None
    )
    gpu.remap_failure = read.flag("Remapped Rows/Remapping Failure Occurred")
    for bucket in ("Max", "High", "Partial", "Low", "None"):
        if (banks := read.int(f"Remapped Rows/Bank Remap Availability Histogram/{bucket}")) is not None:
            gpu.remap_histogram[bucket.lower()] = banks
    gpu.pcie_gen = read.int("PCI/GPU Link Info/PCIe Generation/Current")
    gpu.pcie_gen_max = read.int("PCI/GPU Link Info/PCIe Generation/Max")
    gpu.pcie_width = read.int("PCI/GPU Link Info/Link Width/Current")
    gpu.pcie_width_max = read.int("PCI/GPU Link Info/Link Width/Max")
    gpu.fabric = {path[len("Fabric/") :]: value for path, value in f.items() if path.startswith("Fabric/")}
    return gpu


_ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def _judge_fabric(gpu: GpuHealth, where: str) -> list[Finding]:
    """A GPU of a multi-node NVLink domain (GB200 NVL72): registered with the fabric
    (State Completed, Status Success), in a clique of a cluster (non-zero CliqueId and
    ClusterUUID), and healthy. Azure/azhpc-images#506: a node with Status "Insufficient
    Resources", CliqueId 0 and a zero ClusterUUID had passed a check that looked only for N/A."""
    fabric = gpu.fabric
    if not fabric:
        return [Finding("no Fabric section: the NVLink domain registration was not reported", where, "warn")]
    found: list[Finding] = []
    if fabric.get("State") != "Completed":
        found.append(Finding(f"NVLink fabric registration {fabric.get('State', 'not stated')!r}, not Completed", where))
    elif fabric.get("Status") != "Success":
        found.append(Finding(f"NVLink fabric registration failed: {fabric.get('Status', 'no status')}", where))
    elif fabric.get("CliqueId", "0") == "0" or fabric.get("ClusterUUID", _ZERO_UUID) == _ZERO_UUID:
        found.append(Finding("not in an NVLink clique (CliqueId 0 or a zero ClusterUUID)", where))
    if fabric.get("Health/Summary") == "Unhealthy":
        found.append(Finding("NVLink fabric health: Unhealthy", where))
    return found


def _sum_ecc(read: _Reader, fields: dict[str, str], prefix: str, corrected: bool) -> int | None:
    """Sum the counters under Volatile/ or Aggregate/: "SRAM/DRAM (Un)correctable" on 525+
    drivers, "Single Bit/Total" and "Double Bit/Total" before."""
    total, seen = 0, False
    for path in fields:
        if not path.startswith(prefix):
            continue
        leaf = path[len(prefix) :]
        if corrected:
            wanted = ("Correctable" in leaf and "Uncorrectable" not in leaf) or leaf == "Single Bit/Total"
        else:
            wanted = ("Uncorrectable" in leaf and "Sources" not in leaf) or leaf == "Double Bit/Total"
        if wanted and (value := read.int(path)) is not None:
            total, seen = total + value, True
    return total if seen else None


# ---- judgement --------------------------------------------------------------------------


def judge_nvidia_smi(text: str, profile: GpuProfile | None) -> CheckResult:
    table = signatures()
    if _DRIVER_MISMATCH in text:
        # NVML refused the loaded driver: no GPU can be read, and that is the fault itself.
        return verdict([table["nvidia_smi_driver_mismatch"].finding("", None)], {}, "")
    report = parse_nvidia_smi(text)
    gpus = report.gpus
    findings = [table["nvidia_smi_device_handle"].finding(error, pci) for pci, error in report.lost_gpus]
    if report.attached_gpus is not None and report.attached_gpus > len(gpus):
        raise UnjudgeableOutput(f"nvidia-smi -q announced {report.attached_gpus} GPUs but printed {len(gpus)}")
    # A table cut between two GPU blocks looks like a node short of GPUs: its count is no evidence.
    countable = not report.table or report.table_complete
    if profile is not None:
        findings += _judge_inventory(report, profile, countable)
    elif not gpus and not report.lost_gpus:
        findings.append(Finding("no GPUs visible to nvidia-smi"))
    for gpu in gpus:
        findings += _judge_gpu(gpu, profile, report.detailed)
    if report.table and gpus:
        findings.append(
            Finding(
                "the default table shows no remapped rows, clock event reasons or PCIe links: not checked", None, "info"
            )
        )
    if profile is not None and not countable and not any(f.severity == "fail" for f in findings):
        raise UnjudgeableOutput(
            f"the table lists {len(gpus)} GPUs and ends before its Processes section: cut short, "
            "the GPUs cannot be counted"
        )
    if gpus and all(g.ecc_uncorrected_volatile is None for g in gpus):
        # The ECC rule needs the counter; an output without it has not shown there are none.
        findings.append(Finding("uncorrectable ECC errors not in the output: not checked", None, "info"))
    metrics = _metrics(report)
    names = sorted({g.name for g in gpus if g.name})
    return verdict(
        findings,
        metrics,
        f"{len(gpus)} GPUs healthy"
        + (f" ({names[0]})" if len(names) == 1 else "")
        + ("; ECC not reported, not checked" if metrics["ecc_uncorrected_volatile"] is None and gpus else "")
        + ("; default table: remapped rows, throttling and PCIe links not shown" if report.table and gpus else ""),
    )


def _judge_inventory(report: NvidiaSmiReport, profile: GpuProfile, countable: bool) -> list[Finding]:
    """The GPU count (where the output is whole) and model against the profile. A model name
    the table cut ("NVIDIA A100-SXM...") is held to what it shows: a profile's name pattern
    must begin with it."""
    findings: list[Finding] = []
    if countable and len(report.gpus) < profile.gpu_count:
        detail = f"{len(report.gpus)} GPUs visible, {profile.name} has {profile.gpu_count}"
        findings.append(signatures()["nvidia_smi_gpu_missing"].finding(detail, None))
    for gpu in report.gpus:
        if gpu.name and not _name_fits(gpu.name, profile):
            findings.append(Finding(f"model {gpu.name!r} is not a {profile.name} GPU", f"GPU {gpu.index}"))
    return findings


def _name_fits(name: str, profile: GpuProfile) -> bool:
    if not name.endswith("..."):
        return profile.matches_gpu_name(name)
    shown = name[:-3].strip().lower().removeprefix("nvidia ")
    return any(
        pattern.lower().startswith(shown) or shown.startswith(pattern.lower()) for pattern in profile.gpu_name_patterns
    )


def judge_nvidia_smi_memory(text: str, profile: GpuProfile | None) -> CheckResult:
    """The GPUs' memory alone (the nvidia-smi query's output, judged as judge_nvidia_smi
    judges it): uncorrectable ECC errors since the driver's load, a failed or pending row
    remap, a pending page retirement, spare rows running out. Whether the memory must go back
    to the vendor after a GPU reset, whatever else the output shows (a thermal slowdown, a
    degraded link, a GPU missing are burn-in's to judge). An output with no GPU cannot be
    judged: it says nothing about the memory."""
    report = parse_nvidia_smi(text)
    if not report.gpus:
        raise UnjudgeableOutput("no GPUs in the output: their memory cannot be judged")
    findings = [f for gpu in report.gpus for f in _judge_memory(gpu, profile)]
    if report.table and not any(f.severity == "fail" for f in findings):
        # The table shows the ECC count alone: what the memory is judged on (remapped rows,
        # pending remaps, spare banks) is not in it, so it can fail the memory, never clear it.
        raise UnjudgeableOutput("the default table shows no remapped rows: run nvidia-smi --query-gpu ... or -q")
    if all(g.ecc_uncorrected_volatile is None for g in report.gpus):
        findings.append(Finding("uncorrectable ECC errors not in the output: not checked", None, "info"))
    return verdict(findings, _metrics(report), f"memory of {len(report.gpus)} GPUs healthy")


def _judge_gpu(gpu: GpuHealth, profile: GpuProfile | None, detailed: bool) -> list[Finding]:
    where = f"GPU {gpu.index}"
    found = [signatures()["nvidia_smi_read_error"].finding(error, where) for error in gpu.read_errors]
    if detailed and profile is not None and profile.nvlink_domain_gpus:
        found += _judge_fabric(gpu, where)
    found += _judge_memory(gpu, profile)
    for reason in gpu.clock_events:
        if severity := THROTTLE_SEVERITY.get(reason):
            found.append(Finding(f"clocks limited by {reason}", where, severity))
    if gpu.pcie_width and gpu.pcie_width_max and gpu.pcie_width < gpu.pcie_width_max:
        found.append(Finding(f"PCIe link x{gpu.pcie_width} of x{gpu.pcie_width_max}: degraded link", where, "warn"))
    if profile is not None:
        checks = (
            (gpu.temperature_c, profile.gpu_temperature_c, "GPU temperature", "C"),
            (gpu.memory_temperature_c, profile.memory_temperature_c, "memory temperature", "C"),
            (gpu.ecc_corrected_volatile, profile.ecc_corrected_volatile, "correctable ECC errors", "since driver load"),
        )
        found += [
            f
            for value, limit, what, unit in checks
            if value is not None and (f := limit.judge(value, what, unit, where))
        ]
    return found


def _judge_memory(gpu: GpuHealth, profile: GpuProfile | None) -> list[Finding]:
    """A GPU's memory findings: NVIDIA's rules for uncorrectable errors and row remapping."""
    where = f"GPU {gpu.index}"
    found: list[Finding] = []
    if gpu.ecc_uncorrected_volatile:
        found.append(Finding(f"{gpu.ecc_uncorrected_volatile} uncorrectable ECC errors since driver load", where))
    if gpu.remap_failure:
        found.append(Finding("row remapping failed: RMA the GPU", where))
    if gpu.remap_pending:
        found.append(Finding("row remap pending: reset the GPU to activate it", where))
    if gpu.retirement_pending:
        # NVIDIA's dynamic page retirement: the page is retired at the next driver load.
        found.append(Finding("page retirement pending: reset the GPU (or reload the driver) to retire it", where))
    exhausted = gpu.remap_histogram.get("none", 0) + gpu.remap_histogram.get("low", 0)
    low_limit = profile.remap_histogram_low_fail if profile else 1
    if exhausted >= low_limit:
        found.append(Finding(f"{exhausted} memory banks with low or no spare rows left: RMA the GPU", where))
    elif gpu.remap_histogram.get("partial", 0):
        found.append(Finding(f"{gpu.remap_histogram['partial']} banks with partial remap availability", where, "warn"))
    if not gpu.remap_failure and not gpu.remap_pending and gpu.remapped_uncorrectable:
        found.append(
            Finding(
                f"{gpu.remapped_uncorrectable} rows remapped after uncorrectable errors (serviceable)", where, "warn"
            )
        )
    elif not gpu.remapped_uncorrectable and gpu.ecc_uncorrected_aggregate and not gpu.ecc_uncorrected_volatile:
        found.append(
            Finding(f"{gpu.ecc_uncorrected_aggregate} uncorrectable ECC errors in the GPU's lifetime", where, "warn")
        )
    return found


def _total(values: list[int]) -> int | None:
    return sum(values) if values else None


_T = TypeVar("_T")


def _known(values: Iterable[_T | None]) -> list[_T]:
    return [v for v in values if v is not None]


def _metrics(report: NvidiaSmiReport) -> dict[str, Any]:
    gpus = report.gpus
    temperatures = _known(g.temperature_c for g in gpus)
    names = sorted({g.name for g in gpus if g.name})
    return {
        "gpu_count": len(gpus),
        "gpu_model": names[0] if len(names) == 1 else names or None,
        "driver_version": report.driver_version,
        "vbios_versions": sorted({g.vbios for g in gpus if g.vbios}),
        "max_temperature_c": max(temperatures, default=None),
        "power_draw_w": sum(_known(g.power_draw_w for g in gpus)) or None,
        # None when no GPU's output has the counter: absent is not zero.
        "ecc_uncorrected_volatile": _total(_known(g.ecc_uncorrected_volatile for g in gpus)),
        "ecc_corrected_volatile": _total(_known(g.ecc_corrected_volatile for g in gpus)),
        "remap_pending_gpus": [g.index for g in gpus if g.remap_pending],
        "remap_failure_gpus": [g.index for g in gpus if g.remap_failure],
        "throttled_gpus": [
            g.index for g in gpus if any(THROTTLE_SEVERITY.get(r) in ("fail", "warn") for r in g.clock_events)
        ],
        "gpus": [
            {
                "index": g.index,
                "name": g.name,
                "uuid": g.uuid,
                "serial": g.serial,
                "bus_id": g.bus_id,
                "vbios": g.vbios,
                "temperature_c": g.temperature_c,
                "power_draw_w": g.power_draw_w,
            }
            for g in gpus
        ],
    }
