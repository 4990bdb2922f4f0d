"""A simulated GPU node: answers the check catalog's commands in the real tools' formats.

Every node is a pure function of (node name, seed, GPU profile, active faults, time): its
serials, UUIDs and PCI bus ids come from the seed, so a fleet looks the same in every
process; run-to-run jitter comes from a per-command counter. Faults are SimFaultSpec rows
the caller stores (the CLI injects, the worker's checks see them): this module reads them
through `faults_for` and never touches a database.

Inventory entries address simulated nodes as `sim://NAME`.
"""

from __future__ import annotations

import math
import os
import random
import re
import shlex
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from fleetctl.executors.base import (
    CommandResult,
    CommandTimeout,
    NodeTarget,
    NodeUnreachable,
    validate_node_name,
)
from fleetctl.executors.sim_render import (
    REASON_HW_SLOWDOWN,
    REASON_HW_THERMAL,
    AllReduceRun,
    GpuState,
    HcaModel,
    HcaState,
    IbWriteBwRun,
    KernelEvent,
    NodeState,
    SimProfile,
    ToolOutput,
    render_all_reduce_perf,
    render_dcgmi_diag,
    render_flint_query,
    render_hpl,
    render_ib_write_bw,
    render_ibstat,
    render_kernel_log,
    render_mlxfwmanager,
    render_nvfwupd_show_version,
    render_nvidia_smi_q,
    render_nvidia_smi_query,
)

SIM_SCHEME = "sim://"

FAULT_KINDS: tuple[str, ...] = (
    "xid79",  # GPU fallen off the bus
    "xid48",  # double-bit ECC error; the row remap that follows fails
    "row-remap-failure",  # no spare row left for an uncorrectable error
    "row-remap-pending",  # a remap waits for a GPU reset
    "nvlink-degraded",  # all-reduce 75-85% of healthy: a straggler
    "thermal-throttle",  # HW thermal slowdown: hot, slow clocks, low HPL
    "ib-port-down",  # one InfiniBand port down
    "firmware-drift",  # VBIOS and ConnectX firmware older than the profile's
    "flaky",  # stress tests fail on about half the runs
    "unreachable",  # the executor raises NodeUnreachable
)


@dataclass
class SimFaultSpec:
    """One injected fault. `gpu` picks the GPU (or HCA, for ib-port-down); None lets the
    fault choose (all GPUs for thermal-throttle and firmware-drift, else one from `seed`).
    The fault appears at `not_before` (unix time); with `rate_per_hour` it appears at a
    random time after that, drawn from an exponential distribution seeded by `seed`, so
    injectors give each node its own seed."""

    kind: str
    gpu: int | None = None
    not_before: float = 0.0
    rate_per_hour: float | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        if self.kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; valid kinds: {', '.join(FAULT_KINDS)}")
        if self.gpu is not None and self.gpu < 0:
            raise ValueError(f"gpu must be 0 or more, not {self.gpu}")
        if self.rate_per_hour is not None and self.rate_per_hour <= 0:
            raise ValueError(f"rate_per_hour must be positive, not {self.rate_per_hour}")


def fault_onset(spec: SimFaultSpec) -> float:
    """When the fault appears (unix time); a rate fault's time is fixed by its seed."""
    if spec.rate_per_hour is None:
        return spec.not_before
    draw = random.Random(f"{spec.kind}/{spec.gpu}/{spec.seed}/{spec.not_before}/{spec.rate_per_hour}").random()
    return spec.not_before - math.log(1.0 - draw) / spec.rate_per_hour * 3600.0


def active_faults(specs: Sequence[SimFaultSpec], now: float) -> list[SimFaultSpec]:
    """The faults that have appeared by `now`. Pure: no clock, no I/O."""
    return [spec for spec in specs if fault_onset(spec) <= now]


# --- healthy values per profile ------------------------------------------------------------

_CX7 = HcaModel(
    ca_type="MT4129",
    device_type="ConnectX7",
    part_number="MCX75310AAS-NEAT_Ax",
    description="NVIDIA ConnectX-7 HHHL Adapter card; 400Gb/s NDR IB; Single-port OSFP; PCIe 5.0 x16; "
    "Crypto Disabled; Secure Boot Enabled",
    psid="MT_0000000838",
    firmware="28.41.1000",
    drifted_firmware="28.39.1002",
    pxe_version="3.7.0400",
    uefi_version="14.34.0012",
)
_CX6 = HcaModel(
    ca_type="MT4123",
    device_type="ConnectX6",
    part_number="MCX653105A-HDAT_Ax",
    description="ConnectX-6 VPI adapter card; HDR IB (200Gb/s) and 200GbE; single-port QSFP56; PCIe4.0 x16; "
    "tall bracket; ROHS R6",
    psid="MT_0000000223",
    firmware="20.39.1002",
    drifted_firmware="20.35.1012",
    pxe_version="3.6.0902",
    uefi_version="14.29.0014",
)
# GPU bus numbers of HGX baseboards in common 8-GPU servers (DGX / Dell XE9680 / Supermicro).
_HGX_BUSES = (
    (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB),
    (0x19, 0x3B, 0x4C, 0x5D, 0x9B, 0xBB, 0xCB, 0xDB),
    (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF),
)
_HGX_A100_BUSES = (
    (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD),
    (0x10, 0x16, 0x49, 0x4D, 0x8A, 0x8E, 0xC8, 0xCB),
)

SIM_PROFILES: dict[str, SimProfile] = {
    p.name: p
    for p in (
        SimProfile(
            name="h100-sxm",
            gpu_name="NVIDIA H100 80GB HBM3",
            gpu_count=8,
            architecture="Hopper",
            pci_device_id=0x2330,
            pci_subsystem_id=0x16C1,
            memory_mib=81559,
            memory_reserved_mib=454,
            board_part_number="692-2G520-0200-000",
            gpu_part_number="2330-885-A1",
            inforom_image="G520.0200.00.05",
            driver_version="550.90.07",
            cuda_version="12.4",
            dcgm_version="3.3.8",
            vbios_version="96.00.99.00.01",
            drifted_vbios_version="96.00.74.00.01",
            power_limit_w=700.0,
            min_power_limit_w=200.0,
            max_sm_clock_mhz=1980,
            memory_clock_mhz=2619,
            pcie_gen=5,
            remap_banks=2560,
            compute_cap="9.0",
            nvswitch_count=4,
            nvswitch_firmware="96.10.6D.00.01",
            allreduce_busbw_gbps=478.0,
            allreduce_latency_us=28.0,
            hpl_gflops_per_gpu=49500.0,
            ib_rate_gbps=400,
            ib_write_bw_efficiency=0.97,
            hca=_CX7,
            gpu_bus_layouts=_HGX_BUSES,
        ),
        SimProfile(
            name="h200-sxm",
            gpu_name="NVIDIA H200",
            gpu_count=8,
            architecture="Hopper",
            pci_device_id=0x2335,
            pci_subsystem_id=0x18BE,
            memory_mib=143771,
            memory_reserved_mib=548,
            board_part_number="692-2G530-0200-000",
            gpu_part_number="2335-885-A1",
            inforom_image="G530.0200.00.03",
            driver_version="560.35.03",
            cuda_version="12.6",
            dcgm_version="3.3.8",
            vbios_version="96.00.A5.00.01",
            drifted_vbios_version="96.00.88.00.01",
            power_limit_w=700.0,
            min_power_limit_w=200.0,
            max_sm_clock_mhz=1980,
            memory_clock_mhz=3201,
            pcie_gen=5,
            remap_banks=4096,
            compute_cap="9.0",
            nvswitch_count=4,
            nvswitch_firmware="96.10.6D.00.01",
            allreduce_busbw_gbps=486.0,
            allreduce_latency_us=28.0,
            hpl_gflops_per_gpu=51500.0,
            ib_rate_gbps=400,
            ib_write_bw_efficiency=0.97,
            hca=_CX7,
            gpu_bus_layouts=_HGX_BUSES,
        ),
        SimProfile(
            name="a100-sxm-80gb",
            gpu_name="NVIDIA A100-SXM4-80GB",
            gpu_count=8,
            architecture="Ampere",
            pci_device_id=0x20B2,
            pci_subsystem_id=0x1463,
            memory_mib=81920,
            memory_reserved_mib=606,
            board_part_number="692-2G506-0212-002",
            gpu_part_number="20B2-895-A1",
            inforom_image="G506.0212.00.02",
            driver_version="535.183.01",
            cuda_version="12.2",
            dcgm_version="3.3.3",
            vbios_version="92.00.45.00.06",
            drifted_vbios_version="92.00.36.00.02",
            power_limit_w=400.0,
            min_power_limit_w=100.0,
            max_sm_clock_mhz=1410,
            memory_clock_mhz=1593,
            pcie_gen=4,
            remap_banks=640,
            compute_cap="8.0",
            nvswitch_count=6,
            nvswitch_firmware="92.10.18.00.01",
            allreduce_busbw_gbps=240.0,
            allreduce_latency_us=24.0,
            hpl_gflops_per_gpu=18000.0,
            ib_rate_gbps=200,
            ib_write_bw_efficiency=0.96,
            hca=_CX6,
            gpu_bus_layouts=_HGX_A100_BUSES,
        ),
        SimProfile(
            name="b200",
            gpu_name="NVIDIA B200",
            gpu_count=8,
            architecture="Blackwell",
            pci_device_id=0x2901,
            pci_subsystem_id=0x1999,
            memory_mib=183359,
            memory_reserved_mib=711,
            board_part_number="692-2G525-0220-000",
            gpu_part_number="2901-886-A1",
            inforom_image="G525.0220.00.02",
            driver_version="570.124.06",
            cuda_version="12.8",
            dcgm_version="4.1.1",
            vbios_version="97.00.5B.00.02",
            drifted_vbios_version="97.00.47.00.01",
            power_limit_w=1000.0,
            min_power_limit_w=200.0,
            max_sm_clock_mhz=1965,
            memory_clock_mhz=3996,
            pcie_gen=5,
            remap_banks=4096,
            compute_cap="10.0",
            nvswitch_count=2,
            nvswitch_firmware="97.10.3B.00.01",
            allreduce_busbw_gbps=765.0,
            allreduce_latency_us=30.0,
            hpl_gflops_per_gpu=33500.0,
            ib_rate_gbps=400,
            ib_write_bw_efficiency=0.97,
            hca=_CX7,
            gpu_bus_layouts=_HGX_BUSES,
        ),
    )
}


def sim_profile(name: str) -> SimProfile:
    if name not in SIM_PROFILES:
        raise ValueError(f"unknown simulated GPU profile {name!r}; known: {', '.join(SIM_PROFILES)}")
    return SIM_PROFILES[name]


# --- the node's state ----------------------------------------------------------------------

_REBOOT_PERIOD_S = 30 * 86400.0  # a simulated node reboots once a month, at its own phase
_KERNEL = "5.15.0-119-generic"
# Ethernet front-end NIC next to the 8 InfiniBand rails (what ibstat lists on HGX servers).
_FRONTEND_NIC = ("MT41692", "32.41.1000", 200)


def _identity_rng(seed: int, node: str, *parts: object) -> random.Random:
    return random.Random("/".join(map(str, (seed, node, *parts))))


def _fault_gpu(spec: SimFaultSpec, count: int) -> int:
    return (spec.gpu if spec.gpu is not None else spec.seed) % count


def build_node_state(
    node: str,
    profile: SimProfile,
    seed: int,
    faults: Sequence[SimFaultSpec],
    now: float,
    transient_failure: bool = False,
) -> NodeState:
    """The node as its tools see it at `now`, with `faults` (already active) applied."""
    rng = _identity_rng(seed, node)
    buses = rng.choice(profile.gpu_bus_layouts)
    gpus = [
        GpuState(
            index=i,
            bus=bus,
            serial=f"16{rng.randint(50, 54)}{rng.randrange(10**9):09d}",
            uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128))}",
            vbios_version=profile.vbios_version,
            temperature_c=rng.randint(28, 37),
            memory_temperature_c=rng.randint(33, 43),
            power_draw_w=profile.power_limit_w * rng.uniform(0.10, 0.14),
            sm_clock_mhz=345,
            hpl_gflops=profile.hpl_gflops_per_gpu * rng.gauss(1.0, 0.012),
        )
        for i, bus in enumerate(buses[: profile.gpu_count])
    ]
    oui = rng.choice((0x946DAE, 0xA088C2, 0x58A2E1, 0xB83FD2))
    rail_lids = rng.sample(range(2, 4000), profile.gpu_count)
    hcas = [
        HcaState(
            name=f"mlx5_{i}",
            ca_type=profile.hca.ca_type,
            firmware=profile.hca.firmware,
            guid=oui << 40 | 0x0300 << 24 | rng.getrandbits(24),
            pci_bus=gpu.bus - 2,
            lid=rail_lids[i],
            rate_gbps=profile.ib_rate_gbps,
            write_bw_gbps=profile.ib_rate_gbps * profile.ib_write_bw_efficiency * rng.gauss(1.0, 0.004),
        )
        for i, gpu in enumerate(gpus)
    ]
    ca_type, firmware, rate = _FRONTEND_NIC
    hcas.append(
        HcaState(
            name=f"mlx5_{len(hcas)}",
            ca_type=ca_type,
            firmware=firmware,
            guid=oui << 40 | 0x0300 << 24 | rng.getrandbits(24),
            pci_bus=0xE1,
            lid=0,
            rate_gbps=rate,
            link_layer="Ethernet",
        )
    )
    uptime = (now + rng.uniform(0, _REBOOT_PERIOD_S)) % _REBOOT_PERIOD_S + 600.0
    state = NodeState(
        hostname=node,
        profile=profile,
        gpus=gpus,
        hcas=hcas,
        boot_time=now - uptime,
        now=now,
        allreduce_busbw_gbps=profile.allreduce_busbw_gbps * rng.uniform(0.985, 1.01),
        transient_failure=transient_failure,
    )
    state.kernel_events = _boot_messages(state)
    for spec in faults:
        _apply_fault(state, spec, seed)
    return state


def _boot_messages(node: NodeState) -> list[KernelEvent]:
    boot, p = node.boot_time, node.profile
    events = [
        KernelEvent(boot, f"Linux version {_KERNEL} (buildd@lcy02-amd64-075) #129-Ubuntu SMP Fri Aug  2 19:25:20 UTC 2024"),
        KernelEvent(boot, f"Command line: BOOT_IMAGE=/boot/vmlinuz-{_KERNEL} root=/dev/md0 ro iommu=pt"),
    ]
    events += [
        KernelEvent(boot + 3.2 + i * 0.05, f"mlx5_core {hca.pci_address}: firmware version: {hca.firmware}")
        for i, hca in enumerate(node.hcas)
    ]
    events += [
        KernelEvent(boot + 5.8, "nvidia: loading out-of-tree module taints kernel."),
        KernelEvent(boot + 5.9, "nvidia-nvlink: Nvlink Core is being initialized, major device number 511"),
        KernelEvent(
            boot + 6.1,
            f"NVRM: loading NVIDIA UNIX x86_64 Kernel Module  {p.driver_version}  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Tue Jul  2 22:04:44 UTC 2024",
        ),
    ]
    return events


def _apply_fault(node: NodeState, spec: SimFaultSpec, seed: int) -> None:
    """Change the healthy state the way the fault would, and log what the kernel would."""
    p = node.profile
    gpu = node.gpus[_fault_gpu(spec, len(node.gpus))]
    # A fault from before the last boot shows again once the driver loads.
    at = max(fault_onset(spec), node.boot_time + 300.0)

    def xid(code: int, text: str) -> None:
        node.kernel_events.append(KernelEvent(at, f"NVRM: Xid ({gpu.kernel_pci}): {code}, {text}"))

    if spec.kind == "xid79":
        gpu.lost = True
        node.kernel_events.append(KernelEvent(at, f"NVRM: GPU at {gpu.kernel_pci}: {gpu.uuid}"))
        xid(79, "pid='<unknown>', name=<unknown>, GPU has fallen off the bus.")
        node.kernel_events.append(KernelEvent(at, f"NVRM: GPU {gpu.kernel_pci[4:]}.0: GPU has fallen off the bus."))
    elif spec.kind in ("xid48", "row-remap-failure"):
        gpu.ecc_uncorrected_volatile += 1
        gpu.ecc_uncorrected_aggregate += 1
        gpu.remap_uncorrectable += 1
        gpu.remap_failure = True
        gpu.banks_none += 1
        if spec.kind == "xid48":
            xid(48, "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been "
                "detected on GPU in the framebuffer at partition 6, subpartition 0.")
        xid(64, "pid='<unknown>', name=<unknown>, Row Remapper Error: failed to remap row "
            "(bank has no spare rows), reset gpu and contact support.")
    elif spec.kind == "row-remap-pending":
        gpu.ecc_corrected_volatile += 3
        gpu.remap_correctable += 1
        gpu.remap_pending = True
        gpu.banks_partial += 1
        xid(63, "pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate.")
    elif spec.kind == "nvlink-degraded":
        factor = random.Random(f"{seed}/{node.hostname}/nvlink/{spec.seed}").uniform(0.75, 0.85)
        node.allreduce_busbw_gbps = p.allreduce_busbw_gbps * factor
    elif spec.kind == "thermal-throttle":
        for hot in node.gpus if spec.gpu is None else [gpu]:
            hot.temperature_c = 91 + hot.index % 3
            hot.memory_temperature_c = 97
            hot.event_reasons = REASON_HW_SLOWDOWN | REASON_HW_THERMAL
            hot.sm_clock_mhz = int(p.max_sm_clock_mhz * 0.55)
            hot.hpl_gflops = p.hpl_gflops_per_gpu * 0.55
    elif spec.kind == "ib-port-down":
        hca = node.hcas[_fault_gpu(spec, p.gpu_count)]
        hca.state, hca.physical_state, hca.rate_gbps = "Down", "Polling", 10
        node.kernel_events.append(KernelEvent(at, f"mlx5_core {hca.pci_address}: Port 1 link down (Polling)"))
    elif spec.kind == "firmware-drift":
        for old in node.gpus if spec.gpu is None else [gpu]:
            old.vbios_version = p.drifted_vbios_version
        for hca in node.hcas if spec.gpu is None else [node.hcas[spec.gpu % p.gpu_count]]:
            if hca.ca_type == p.hca.ca_type:
                hca.firmware = p.hca.drifted_firmware
    # "flaky" acts per run (transient_failure) and "unreachable" in the executor.


# --- commands ------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolRun:
    output: ToolOutput
    seconds: float  # how long the real tool would take


class _UsageError(Exception):
    pass


def _bytes(text: str) -> int:
    """nccl-tests and perftest sizes: 8, 256M, 8G, 1KB."""
    match = re.fullmatch(r"(\d+)([KMGkmg]?)[Bb]?", text)
    if not match:
        raise _UsageError(f"invalid size {text!r}")
    return int(match[1]) * 1024 ** " KMG".index(match[2].upper() or " ")


def _options(args: Sequence[str], with_value: set[str]) -> tuple[dict[str, str], list[str]]:
    """Split argv into {flag: value} (value "" for switches) and positional arguments.
    Accepts `--flag=value`, `--flag value` and `-f value` for flags in `with_value`."""
    flags: dict[str, str] = {}
    positional: list[str] = []
    items = iter(args)
    for arg in items:
        if arg.startswith("-") and len(arg) > 1:
            name, eq, value = arg.partition("=")
            if not eq and name in with_value:
                value = next(items, None)
                if value is None:
                    raise _UsageError(f"option {name} needs a value")
            flags[name] = value
        else:
            positional.append(arg)
    return flags, positional


def _flag(flags: dict[str, str], *names: str, default: str | None = None) -> str | None:
    return next((flags[n] for n in names if n in flags), default)


@dataclass(frozen=True)
class _Call:
    node: NodeState
    args: list[str]
    rng: random.Random
    ranks: int | None  # processes an MPI launcher started


def _nvidia_smi(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"--query-gpu", "--format", "-d", "--display", "-i", "--id"})
    query = _flag(flags, "--query-gpu")
    ids = _flag(flags, "-i", "--id")
    indices = [int(i) for i in ids.split(",")] if ids else None
    if query is not None:
        fmt = (_flag(flags, "--format") or "").split(",")
        if "csv" not in fmt:
            raise _UsageError("--query-gpu needs --format=csv")
        fields = [f.strip() for f in query.split(",") if f.strip()]
        return ToolRun(render_nvidia_smi_query(call.node, fields, "noheader" not in fmt, "nounits" not in fmt, indices), 0.4)
    if "-q" in flags or "--query" in flags:
        display = _flag(flags, "-d", "--display")
        sections = [d.strip().upper() for d in display.split(",")] if display else None
        return ToolRun(render_nvidia_smi_q(call.node, sections, indices), 1.5)
    raise _UsageError("simulated nvidia-smi answers --query-gpu=... --format=csv and -q")


_DCGM_LEVELS = {"1": 1, "short": 1, "2": 2, "medium": 2, "3": 3, "long": 3, "4": 4, "xlong": 4}
_DCGM_SECONDS = {1: 15.0, 2: 120.0, 3: 900.0, 4: 2700.0}


def _dcgmi(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"-r", "--run", "-g", "--group", "-p", "--parameters", "-i"})
    level = _DCGM_LEVELS.get(_flag(flags, "-r", "--run") or "")
    if positional[:1] != ["diag"] or level is None:
        raise _UsageError("simulated dcgmi answers `diag -r 1|2|3|4 [-j]`")
    as_json = "-j" in flags or "--json" in flags
    return ToolRun(render_dcgmi_diag(call.node, level, as_json), _DCGM_SECONDS[level])


_NCCL_VALUE_FLAGS = {
    f"-{short}" for short in "betfignwcdoarmpzGCNRTy"
} | {"--minbytes", "--maxbytes", "--stepfactor", "--stepbytes", "--ngpus", "--nthreads", "--iters",
     "--warmup_iters", "--check", "--datatype", "--op"}


def _all_reduce_perf(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, _NCCL_VALUE_FLAGS)
    run = AllReduceRun(
        min_bytes=_bytes(_flag(flags, "-b", "--minbytes", default="32M")),
        max_bytes=_bytes(_flag(flags, "-e", "--maxbytes", default="32M")),
        step_factor=int(_flag(flags, "-f", "--stepfactor", default="1")),
        step_bytes=_bytes(_flag(flags, "-i", "--stepbytes", default="1M")),
        gpus=int(_flag(flags, "-g", "--ngpus", default="1")),
        threads=int(_flag(flags, "-t", "--nthreads", default="1")),
        iters=int(_flag(flags, "-n", "--iters", default="20")),
        warmup_iters=int(_flag(flags, "-w", "--warmup_iters", default="5")),
        check=int(_flag(flags, "-c", "--check", default="1")),
    )
    if run.step_factor < 2 and run.step_bytes < 1:
        raise _UsageError("all_reduce_perf needs -f >= 2 or -i >= 1 to step through sizes")
    output, seconds = render_all_reduce_perf(call.node, run, call.rng)
    return ToolRun(output, 15.0 + seconds)  # NCCL init and connection setup


def _xhpl(call: _Call) -> ToolRun:
    ranks = call.ranks or call.node.profile.gpu_count
    output, seconds = render_hpl(call.node, min(ranks, len(call.node.gpus)), call.rng)
    return ToolRun(output, 40.0 + seconds)  # matrix generation and warm-up


def _dmesg(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, {"-l", "--level", "-f", "--facility"})
    style = "dmesg-T" if {"-T", "--ctime"} & flags.keys() else "dmesg"
    return ToolRun(render_kernel_log(call.node, style), 0.2)


def _journalctl(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, {"-o", "--output", "-b", "--boot", "-S", "--since", "-U", "--until", "-n", "--lines"})
    if not {"-k", "--dmesg"} & flags.keys():
        raise _UsageError("simulated journalctl answers -k (kernel messages)")
    return ToolRun(render_kernel_log(call.node, "journal"), 0.5)


def _ibstat(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, set())
    if "-l" in flags or "--list_of_cas" in flags:
        return ToolRun(ToolOutput("".join(f"{h.name}\n" for h in call.node.hcas)), 0.1)
    return ToolRun(render_ibstat(call.node, positional), 0.1)


_PERFTEST_VALUE_FLAGS = {
    *(f"-{c}" for c in "dsqDnxmpTiutQlIwSrE"),
    "--ib-dev", "--size", "--qp", "--duration", "--iters", "--port", "--mtu", "--gid-index", "--tos",
    "--source_ip", "--ib-port", "--tx-depth", "--rx-depth",
}


def _ib_write_bw(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, _PERFTEST_VALUE_FLAGS)
    duration = _flag(flags, "-D", "--duration")
    run = IbWriteBwRun(
        device=_flag(flags, "-d", "--ib-dev", default=call.node.hcas[0].name),
        size=_bytes(_flag(flags, "-s", "--size", default="65536")),
        qps=int(_flag(flags, "-q", "--qp", default="1")),
        duration_s=float(duration) if duration is not None else None,
        iterations=int(_flag(flags, "-n", "--iters", default="5000")),
        report_gbits="--report_gbits" in flags,
        server=positional[0] if positional else None,
        sweep="-a" in flags or "--all" in flags,
    )
    output, seconds = render_ib_write_bw(call.node, run, call.rng)
    return ToolRun(output, 1.5 + seconds)


def _hca_named(node: NodeState, device: str) -> HcaState | None:
    """flint's -d: mlx5_N, /dev/mst/mt4129_pciconfN or a PCI address (37:00.0)."""
    adapters = [h for h in node.hcas if h.ca_type == node.profile.hca.ca_type]
    if match := re.fullmatch(r"/dev/mst/mt\d+_pciconf(\d+)", device):
        index = int(match[1])
        return adapters[index] if index < len(adapters) else None
    if match := re.fullmatch(r"(?:0000:)?([0-9a-fA-F]{2}):00\.0", device):
        return next((h for h in adapters if h.pci_bus == int(match[1], 16)), None)
    return next((h for h in adapters if h.name == device), None)


def _flint(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"-d", "--device", "-i", "--image"})
    device = _flag(flags, "-d", "--device")
    if device is None or positional[:1] not in (["query"], ["q"]):
        raise _UsageError("simulated flint answers `-d DEVICE query`")
    hca = _hca_named(call.node, device)
    if hca is None:
        return ToolRun(ToolOutput("", f'-E- Cannot open Device: "{device}". No such file or directory. MFE_CR_ERROR\n', 1), 0.5)
    return ToolRun(render_flint_query(call.node, hca), 2.0)


def _mlxfwmanager(call: _Call) -> ToolRun:
    flags, _ = _options(call.args, {"-d", "--dev"})
    if not {"--query", "-q"} & flags.keys():
        raise _UsageError("simulated mlxfwmanager answers --query")
    return ToolRun(render_mlxfwmanager(call.node), 6.0)


def _nvfwupd(call: _Call) -> ToolRun:
    flags, positional = _options(call.args, {"-t", "--target", "-p", "--package", "-c", "--config"})
    if "show_version" not in positional:
        raise _UsageError("simulated nvfwupd answers show_version")
    with_package = bool({"-p", "--package"} & flags.keys())
    as_json = "-j" in flags or "--json" in flags
    return ToolRun(render_nvfwupd_show_version(call.node, with_package, as_json), 10.0)


def _sleep(call: _Call) -> ToolRun:
    return ToolRun(ToolOutput(""), sum(float(a.rstrip("s")) for a in call.args))


_TOOLS: dict[str, Callable[[_Call], ToolRun]] = {
    "nvidia-smi": _nvidia_smi,
    "dcgmi": _dcgmi,
    "all_reduce_perf": _all_reduce_perf,
    "xhpl": _xhpl,
    "hpl.sh": _xhpl,
    "dmesg": _dmesg,
    "journalctl": _journalctl,
    "ibstat": _ibstat,
    "ib_write_bw": _ib_write_bw,
    "flint": _flint,
    "mstflint": _flint,
    "mlxfwmanager": _mlxfwmanager,
    "mlxup": _mlxfwmanager,
    "nvfwupd": _nvfwupd,
    "nvfwupd.py": _nvfwupd,
    "sleep": _sleep,
    "hostname": lambda call: ToolRun(ToolOutput(call.node.hostname + "\n"), 0.0),
    "true": lambda call: ToolRun(ToolOutput(""), 0.0),
}
# The tools whose runs a `flaky` node can spoil: the ones that stress the GPUs.
STRESS_TOOLS = frozenset({"dcgmi", "all_reduce_perf", "xhpl", "hpl.sh"})

# Launcher options that take a value, so the program name can be found after them.
_LAUNCHER_VALUE_FLAGS = {
    "-np", "-n", "-c", "-N", "--np", "-H", "--host", "--hostfile", "-hostfile", "--map-by", "--bind-to",
    "--rank-by", "-x", "--npernode", "--ntasks", "--ntasks-per-node", "--gpus-per-node", "--cpu-bind",
    "--mpi", "-w", "--nodelist", "-p", "--partition", "-t", "--time",
}
_LAUNCHER_RANK_FLAGS = {"-np", "-n", "-c", "--np", "--ntasks"}


def _unwrap(argv: Sequence[str]) -> tuple[list[str], int | None]:
    """Strip sudo/env/timeout/nice and MPI or Slurm launchers; return the program's argv and
    the number of ranks a launcher asked for."""
    args, ranks = list(argv), None
    while args:
        tool = os.path.basename(args[0])
        if tool in ("sudo", "env", "nice", "timeout", "stdbuf"):
            rest = args[1:]
            while rest and (rest[0].startswith("-") or "=" in rest[0]):
                rest = rest[1:]
            if tool == "timeout" and rest:
                rest = rest[1:]  # the duration
            args = rest
        elif tool in ("mpirun", "mpiexec", "srun"):
            rest = args[1:]
            while rest and rest[0].startswith("-"):
                flag, eq, value = rest[0].partition("=")
                takes_value = not eq and flag in _LAUNCHER_VALUE_FLAGS
                if flag in _LAUNCHER_RANK_FLAGS:
                    ranks = int(value if eq else rest[1])
                elif flag == "--mca":  # --mca KEY VALUE
                    rest = rest[2:]
                rest = rest[2 if takes_value else 1 :]
            args = rest
        else:
            break
    return args, ranks


_SCRIPT_SPLIT = re.compile(r"(&&|\|\||[;&|\n])")
_REDIRECT = re.compile(r"(\d?)>>?\s*(&1|\S+)")


class _NodeShell:
    """Runs commands against one node state; `sh -c` scripts get a tiny shell."""

    def __init__(self, node: NodeState, rng: random.Random):
        self.node = node
        self.rng = rng

    def run(self, argv: Sequence[str]) -> ToolRun:
        args, ranks = _unwrap(argv)
        if not args:
            return ToolRun(ToolOutput(""), 0.0)
        tool = os.path.basename(args[0])
        if tool in ("sh", "bash") and len(args) >= 3 and args[1] in ("-c", "-lc", "-ec"):
            return self.run_script(args[2])
        handler = _TOOLS.get(tool)
        if handler is None:
            return ToolRun(ToolOutput("", f"bash: line 1: {args[0]}: command not found\n", 127), 0.0)
        try:
            return handler(_Call(self.node, args[1:], self.rng, ranks))
        except (_UsageError, ValueError) as exc:
            return ToolRun(ToolOutput("", f"{tool}: {exc}\n", 2), 0.0)

    def run_script(self, script: str) -> ToolRun:
        """`;`, `&&`, `||`, background `&` with `wait`, and redirections to files (dropped)."""
        pieces = _SCRIPT_SPLIT.split(script)
        stdout, stderr = [], []
        clock = background_end = 0.0
        status, skip = 0, False
        for text, operator in zip(pieces[::2], pieces[1::2] + [""]):
            if operator == "|":
                return ToolRun(ToolOutput("", "sh: pipelines are not simulated\n", 2), clock)
            text = text.strip()
            if text and not skip:
                result, seconds = self._simple_command(text, background_end - clock)
                if operator == "&":
                    background_end = max(background_end, clock + seconds)
                    status = 0
                else:
                    clock += seconds
                    status = result.exit_status
                stdout.append(result.stdout)
                stderr.append(result.stderr)
            skip = (operator == "&&" and status != 0) or (operator == "||" and status == 0)
        return ToolRun(ToolOutput("".join(stdout), "".join(stderr), status), clock)

    def _simple_command(self, text: str, background_left: float) -> tuple[ToolOutput, float]:
        redirects = _REDIRECT.findall(text)
        words = shlex.split(_REDIRECT.sub("", text))
        if words == ["wait"]:
            return ToolOutput(""), max(background_left, 0.0)
        run = self.run(words)
        out, err = run.output.stdout, run.output.stderr
        for stream, target in redirects:
            if stream == "2" and target == "&1":
                out, err = out + err, ""
            elif stream == "2":
                err = ""
            else:
                out = ""
        return ToolOutput(out, err, run.output.exit_status), run.seconds


# --- the executor --------------------------------------------------------------------------


def sim_node_name(target: NodeTarget) -> str:
    if not target.address.startswith(SIM_SCHEME):
        raise ValueError(f"{target.name}: {target.address!r} is not a simulated node (want {SIM_SCHEME}NAME)")
    return validate_node_name(target.address[len(SIM_SCHEME) :])


class SimExecutor:
    """The Executor for `sim://` nodes.

    `faults_for(name)` returns a node's fault specs (stored by the caller, shared between
    processes). A command takes its real duration times `time_scale` (0 = instant) of
    wall time, through `sleep`; `now` is the clock faults and timestamps are read from.
    """

    def __init__(
        self,
        faults_for: Callable[[str], list[SimFaultSpec]],
        seed: int = 0,
        time_scale: float = 0.0,
        now: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ):
        if time_scale < 0:
            raise ValueError(f"time_scale must be 0 or more, not {time_scale}")
        self._faults_for = faults_for
        self._seed = seed
        self._time_scale = time_scale
        self._now = now
        self._sleep = sleep
        # Per node and command: the n-th run gets its own jitter and flaky outcome.
        self._runs: Counter[tuple[str, tuple[str, ...]]] = Counter()

    def run(self, target: NodeTarget, argv: Sequence[str], timeout_s: float) -> CommandResult:
        name = sim_node_name(target)
        now = self._now()
        faults = active_faults(self._faults_for(target.name), now)
        if any(f.kind == "unreachable" for f in faults):
            raise NodeUnreachable(target.name, f"ssh: connect to host {name} port {target.port}: Connection timed out")
        key = (name, tuple(argv))
        run_number = self._runs[key]
        self._runs[key] += 1
        flaky = [f for f in faults if f.kind == "flaky"]
        transient = bool(flaky) and _touches_stress_tool(argv) and any(
            random.Random(f"{self._seed}/{name}/flaky/{f.seed}/{run_number}").random() < 0.5 for f in flaky
        )
        state = build_node_state(name, sim_profile(target.profile), self._seed, faults, now, transient)
        jitter = _identity_rng(self._seed, name, "run", *argv, run_number)
        result = _NodeShell(state, jitter).run(argv)
        wall_s = result.seconds * self._time_scale
        if wall_s > timeout_s:
            self._sleep(timeout_s)
            raise CommandTimeout(target.name, f"{shlex.join(argv)} still running after {timeout_s:g} s")
        self._sleep(wall_s)
        out = result.output
        return CommandResult(tuple(argv), out.exit_status, out.stdout, out.stderr, wall_s)

    def close(self) -> None:
        """Nothing to release: a simulated node holds no connection."""


def _touches_stress_tool(argv: Sequence[str]) -> bool:
    words = [os.path.basename(w) for arg in argv for w in arg.split()]
    return any(w in STRESS_TOOLS for w in words)


# --- inventory -----------------------------------------------------------------------------


def render_inventory(
    nodes: int, racks: int, profile: str, seed: int, name_prefix: str = "gpu"
) -> list[dict]:
    """Inventory entries (the `nodes:` list of an inventory YAML) for a simulated fleet:
    gpu-001 ... in contiguous blocks over rack-01 ..., all of one profile."""
    sim_profile(profile)
    if nodes < 1 or racks < 1:
        raise ValueError("a simulated fleet needs at least one node and one rack")
    if racks > nodes:
        raise ValueError(f"{racks} racks for {nodes} nodes would leave racks empty")
    width = max(3, len(str(nodes)))
    entries = []
    for i in range(nodes):
        name = validate_node_name(f"{name_prefix}-{i + 1:0{width}d}")
        rack = f"rack-{i * racks // nodes + 1:02d}"
        entries.append(
            {
                "name": name,
                "address": f"{SIM_SCHEME}{name}",
                "bmc": f"{SIM_SCHEME}{name}-bmc",
                "rack": rack,
                "profile": profile,
                "scheduler": "sim",
                "labels": {"rack": rack, "sim-seed": str(seed)},
            }
        )
    return entries
