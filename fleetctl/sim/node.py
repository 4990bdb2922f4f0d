"""A simulated node's state, as its tools see it: built from the node's name, the seed, its
GPU profile, its active faults and the time.

Every node is a pure function of those: its serials, UUIDs and PCI bus ids come from the
seed, so a fleet looks the same in every process.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from fleetctl.checks.profiles import load_profile
from fleetctl.sim.faults import SimFaultSpec, fault_onset
from fleetctl.sim.profiles import SimProfile

# Bits of nvidia-smi's clocks_event_reasons.active mask (nvml.h nvmlClocksEventReason*).
REASON_GPU_IDLE = 0x1
REASON_HW_SLOWDOWN = 0x8
REASON_SW_THERMAL = 0x20
REASON_HW_THERMAL = 0x40


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
    # Its registration with the multi-node NVLink fabric (nvidia-smi -q's Fabric section; GB200).
    fabric_state: str = "Completed"
    fabric_status: str = "Success"

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
    flapping_since: float | None = None  # the link goes down and retrains every FLAP_PERIOD_S from then

    @property
    def pci_address(self) -> str:
        return f"0000:{self.pci_bus:02x}:00.0"

    @property
    def mac(self) -> int:
        """The MAC inside a ConnectX node GUID (OUI + 0300 + NIC-specific: 946dae0300c2b690)."""
        return (self.guid >> 40) << 24 | self.guid & 0xFFFFFF


@dataclass
class Filesystem:
    source: str
    fstype: str
    target: str
    size_kb: int
    used_kb: int
    inodes: int
    inodes_used: int
    options: str = "rw,relatime"


@dataclass
class HostState:
    """The host around the GPUs as its tools show it (lspci, sysfs, lscpu, df, systemctl,
    chronyc): healthy by default, as the node's profile (checks/profiles) expects it."""

    memory_kb: int
    cpus: int
    cpus_offline: int = 0
    edac_corrected: int = 0
    edac_uncorrected: int = 0
    narrow_pci_buses: set[int] = field(default_factory=set)  # GPUs and HCAs whose link trained to x8
    aer_fatal_buses: set[int] = field(default_factory=set)
    filesystems: list[Filesystem] = field(default_factory=list)
    services: dict[str, str] = field(default_factory=dict)  # unit -> ActiveState ("" : not installed)
    loaded_driver: str = ""  # the kernel module's version; the profile's driver is the installed one
    clock_offset_s: float = 0.000012
    clock_synchronised: bool = True
    nvme_drives: int = 2  # NVMe controllers nvme0.. (the boot drive and a local scratch drive), all healthy


@dataclass(frozen=True)
class DomainMember:
    """A tray of the node's multi-node NVLink domain as its IMEX daemons see it."""

    name: str
    address: str  # the IP its IMEX daemon listens on (nodes_config.cfg)
    imex_ready: bool  # its daemon runs (no imex-down, the tray reachable)


@dataclass(frozen=True)
class KernelEvent:
    at: float  # unix time
    text: str


@dataclass(frozen=True)
class SimLeaf:
    """A node's leaf switch and the active faults of the switch (LEAF_FAULT_KINDS, from
    whichever of its nodes they were injected on)."""

    name: str
    faults: tuple[SimFaultSpec, ...] = ()


@dataclass
class NodeState:
    hostname: str
    profile: SimProfile
    gpus: list[GpuState]
    hcas: list[HcaState]
    boot_time: float
    now: float
    allreduce_busbw_gbps: float
    host: HostState
    kernel_events: list[KernelEvent] = field(default_factory=list)
    multinode_busbw_gbps: float = 0.0  # two-node all-reduce over healthy rails (see fabric_busbw_gbps)
    fabric_path_factor: float = 1.0  # what the network beyond the node's ports lets through
    # Its leaf switch (the inventory's `switch`; "" when none is known) and what that leaf's
    # uplinks let through to other leaves: a run within the leaf never crosses them.
    leaf: str = ""
    leaf_uplink_factor: float = 1.0
    # This run hits the intermittent fault of a `flaky` node: stress tests go wrong.
    transient_failure: bool = False
    boot_id: str = ""  # /proc/sys/kernel/random/boot_id: new on every boot
    # The trays of its multi-node NVLink domain in IMEX's order, itself among them; empty on
    # a node with no such domain (HGX). The fabric's clique and cluster ids come from it.
    domain: tuple[DomainMember, ...] = ()
    clique_id: int = 0
    cluster_uuid: str = "00000000-0000-0000-0000-000000000000"
    # GPUs the driver never initialised: on the PCI bus (lspci) but not in NVML or CUDA.
    uninitialised_gpus: list[GpuState] = field(default_factory=list)

    @property
    def visible_gpus(self) -> list[GpuState]:
        return [g for g in self.gpus if not g.lost]

    @property
    def lost_gpus(self) -> list[GpuState]:
        return [g for g in self.gpus if g.lost]

    @property
    def rails(self) -> list[HcaState]:
        return [h for h in self.hcas if h.link_layer == "InfiniBand"]

    @property
    def fabric_busbw_gbps(self) -> float:
        """What this node sustains in a multi-node all-reduce. NCCL splits the data evenly
        over the rails, so the slowest rail sets the pace; a down rail's share moves to the
        others; a link that keeps retraining stalls every ring through it."""
        up = [h for h in self.rails if h.state == "Active"]
        if not up:
            return 0.0
        healthy = self.profile.ib_rate_gbps * self.profile.ib_write_bw_efficiency
        slowest = min(1.0, min(h.write_bw_gbps for h in up) / healthy)
        flapping = FLAP_SLOWDOWN if any(h.flapping_since is not None for h in up) else 1.0
        return self.multinode_busbw_gbps * len(up) / len(self.rails) * slowest * flapping * self.fabric_path_factor


@dataclass(frozen=True)
class ToolOutput:
    stdout: str
    stderr: str = ""
    exit_status: int = 0


FLAP_SLOWDOWN = 0.6  # all-reduce over a rail that retrains every few tens of seconds
FABRIC_SLOW_FACTOR = 0.6  # fabric-slow: half the leaf's uplinks down, or a mis-set adaptive routing
LEAF_UPLINK_SLOW_FACTOR = 0.5  # leaf-uplink-slow: half a leaf's uplinks down, its cross-leaf traffic on the rest
RAIL_SLOW_FACTOR = 0.55  # ib-rail-slow: a ConnectX-7 whose PCIe Gen5 x16 link trained to x8
_REBOOT_PERIOD_S = 30 * 86400.0  # a simulated node reboots once a month, at its own phase
KERNEL_RELEASE = "5.15.0-119-generic"
# NVSwitches of an HGX baseboard: the PCI bus of the first (its kernel log names them by it).
_NVSWITCH_BUS0 = 0x84
NVSWITCH_SLOW_FACTOR = 0.4  # nvswitch-sxid-fatal: the switch's links down, NVLink traffic rerouted or stalled
FABRIC_UNREGISTERED_FACTOR = 0.1  # fabric-unhealthy: no NVLink peer access, NCCL through host memory
# Ethernet front-end NIC next to the 8 InfiniBand rails (what ibstat lists on HGX servers).
_FRONTEND_NIC = ("MT41692", "32.41.1000", 200)


# A healthy GPU's HPL against its profile's, and one run's against the GPU's: normal spreads,
# cut at two of them. Uncut, about one fleet of eight healthy nodes in 300 held one whose
# slowest GPU and run together fell 4 % below the others, which the peer rule
# (checks.stragglers: robust z beyond 3.5, the spread floored at 1 %) rightly drains. Cut, a
# healthy node's HPL stays within 3.6 % of its profile's, short of what the rule drains among
# healthy peers; a straggler is a fault the simulator is told of (thermal-throttle,
# nvlink-degraded ...), never one a healthy node draws.
HPL_GPU_SPREAD = 0.012
HPL_RUN_SPREAD = 0.006


def healthy_spread(rng: random.Random, sigma: float) -> float:
    """A factor around 1 with standard deviation `sigma`, within two of it."""
    return min(max(rng.gauss(1.0, sigma), 1 - 2 * sigma), 1 + 2 * sigma)


def identity_rng(seed: int, node: str, *parts: object) -> random.Random:
    return random.Random("/".join(map(str, (seed, node, *parts))))


def domain_address(seed: int, domain: Sequence[str], name: str) -> str:
    """The IP a tray's IMEX daemon listens on: one subnet per domain, in the domain's order."""
    subnet = identity_rng(seed, "imex-subnet", domain[0]).randrange(16, 250)
    return f"172.31.{subnet}.{10 + list(domain).index(name)}"


def _fault_gpu(spec: SimFaultSpec, count: int) -> int:
    return (spec.gpu if spec.gpu is not None else spec.seed) % count


def build_node_state(
    node: str,
    profile: SimProfile,
    seed: int,
    faults: Sequence[SimFaultSpec],
    now: float,
    transient_failure: bool = False,
    booted_at: float | None = None,
    domain: Sequence[DomainMember] = (),
    leaf: SimLeaf | None = None,
) -> NodeState:
    """The node as its tools see it at `now`, with `faults` (already active) applied.
    `booted_at` is when its BMC last rebooted it; otherwise (and when the node's own monthly
    reboot came later) it last booted at its own phase. `domain`: the trays of its multi-node
    NVLink domain, itself among them; `leaf`: its leaf switch and that switch's active faults
    (the executor reads both from the fleet)."""
    rng = identity_rng(seed, node)
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
            hpl_gflops=profile.hpl_gflops_per_gpu * healthy_spread(rng, HPL_GPU_SPREAD),
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
    boot_time = now - uptime
    if booted_at is not None and boot_time < booted_at <= now:
        boot_time = booted_at
    state = NodeState(
        hostname=node,
        profile=profile,
        gpus=gpus,
        hcas=hcas,
        boot_time=boot_time,
        now=now,
        allreduce_busbw_gbps=profile.allreduce_busbw_gbps * rng.uniform(0.985, 1.01),
        host=_healthy_host(profile),
        transient_failure=transient_failure,
        # Its own generator: drawing from `rng` would change every value drawn after it.
        boot_id=str(uuid.UUID(int=identity_rng(seed, node, "boot", boot_time).getrandbits(128), version=4)),
        # Its own generator too, for the same reason.
        multinode_busbw_gbps=profile.multinode_allreduce_busbw_gbps
        * identity_rng(seed, node, "fabric").uniform(0.985, 1.01),
    )
    if domain:
        ids = identity_rng(seed, "nvlink-domain", domain[0].name)
        state.domain = tuple(domain)
        state.clique_id, state.cluster_uuid = (
            ids.randrange(1, 32766),
            str(uuid.UUID(int=ids.getrandbits(128), version=4)),
        )
    if leaf is not None:
        state.leaf = leaf.name
        if any(spec.kind == "leaf-uplink-slow" for spec in leaf.faults):
            state.leaf_uplink_factor = LEAF_UPLINK_SLOW_FACTOR
    state.kernel_events = _boot_messages(state)
    for spec in faults:
        _apply_fault(state, spec, seed)
    return state


def _healthy_host(profile: SimProfile) -> HostState:
    """What a healthy host of the profile shows: the memory (a little above its warning
    floor, as MemTotal sits ~1.5% under what is installed), CPUs, daemons and filesystems of
    checks/profiles' figures for it, the driver loaded as installed, the clock synchronised."""
    expected = load_profile(profile.name)
    memory_kb = int(expected.host_memory_gib.warn * 1.02 * 2**20)
    tib = 2**30  # kB
    return HostState(
        memory_kb=memory_kb,
        cpus=profile.host_cpus,
        filesystems=[
            Filesystem("/dev/md0", "ext4", "/", int(1.72 * tib), int(0.19 * tib), 117_178_368, 512_831),
            Filesystem(
                "/dev/nvme0n1p1",
                "vfat",
                "/boot/efi",
                523_248,
                6_216,
                0,
                0,
                "rw,relatime,fmask=0077,dmask=0077,errors=remount-ro",
            ),
            Filesystem(
                "/dev/md1",
                "ext4",
                "/raid",
                int(26.2 * tib),
                int(1.1 * tib),
                1_756_905_472,
                91_235,
                "rw,relatime,stripe=256",
            ),
        ],
        # What the profile requires runs; IMEX is installed only where a profile requires it
        # (GB200), the fabric manager likewise (HGX: its NVSwitches are on the baseboard).
        services={
            "nvidia-imex": "",
            "nvidia-fabricmanager": "",
            **dict.fromkeys(expected.required_services, "active"),
        },
        loaded_driver=profile.driver_version,
    )


def _boot_messages(node: NodeState) -> list[KernelEvent]:
    boot, p = node.boot_time, node.profile
    events = [
        KernelEvent(
            boot,
            f"Linux version {KERNEL_RELEASE} (buildd@lcy02-amd64-075) #129-Ubuntu SMP Fri Aug  2 19:25:20 UTC 2024",
        ),
        KernelEvent(boot, f"Command line: BOOT_IMAGE=/boot/vmlinuz-{KERNEL_RELEASE} root=/dev/md0 ro iommu=pt"),
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
            f"NVRM: loading NVIDIA UNIX {p.cpu_architecture} Kernel Module  {p.driver_version}  Release Build  "
            "(dvs-builder@U16-I3-B03-4-3)  Tue Jul  2 22:04:44 UTC 2024",
        ),
    ]
    return events


def fault_inapplicable(kind: str, profile: SimProfile) -> str:
    """Why a fault of `kind` has nothing to act on in a node of `profile` ("": it acts there):
    `fleetctl sim inject` refuses it, and a node given one anyway stays as it is."""
    expected = load_profile(profile.name)
    if kind in ("imex-down", "fabric-unhealthy") and not expected.nvlink_domain_gpus:
        return f"{profile.name} nodes are in no multi-node NVLink domain: no IMEX, no domain fabric"
    if kind == "nvswitch-sxid-fatal" and not profile.nvswitch_count:
        return f"{profile.name} nodes have no NVSwitch of their own (a GB200 tray's are in the rack's switch trays)"
    if kind == "fabricmanager-down" and "nvidia-fabricmanager" not in expected.required_services:
        return f"{profile.name} nodes run no fabric manager"
    return ""


def _apply_fault(node: NodeState, spec: SimFaultSpec, seed: int) -> None:
    """Change the healthy state the way the fault would, and log what the kernel would."""
    p = node.profile
    if fault_inapplicable(spec.kind, p):
        return
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
            xid(
                48,
                "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been "
                "detected on GPU in the framebuffer at partition 6, subpartition 0.",
            )
        xid(
            64,
            "pid='<unknown>', name=<unknown>, Row Remapper Error: failed to remap row "
            "(bank has no spare rows), reset gpu and contact support.",
        )
    elif spec.kind == "xid48-remapped":
        # NVIDIA's row remapping: a DBE whose row found a spare logs XID 63 instead of 64, and
        # the remap takes effect at the GPU's next reset (which the simulator's cures model).
        gpu.ecc_uncorrected_volatile += 1
        gpu.ecc_uncorrected_aggregate += 1
        gpu.remap_uncorrectable += 1
        gpu.remap_pending = True
        gpu.banks_partial += 1
        xid(
            48,
            "pid='<unknown>', name=<unknown>, An uncorrectable double bit error (DBE) has been "
            "detected on GPU in the framebuffer at partition 6, subpartition 0.",
        )
        xid(63, "pid='<unknown>', name=<unknown>, Row Remapper: New row marked for remapping, reset gpu to activate.")
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
    elif spec.kind == "ib-rail-slow":
        slow = node.hcas[_fault_gpu(spec, p.gpu_count)]
        slow.write_bw_gbps *= RAIL_SLOW_FACTOR
        node.host.narrow_pci_buses.add(slow.pci_bus)  # what slows it: lspci shows the link at x8
    elif spec.kind == "ib-link-flap":
        hca = node.hcas[_fault_gpu(spec, p.gpu_count)]
        hca.flapping_since = at
        node.kernel_events.append(KernelEvent(at, f"mlx5_core {hca.pci_address}: Port 1 link down (Polling)"))
        node.kernel_events.append(KernelEvent(at + 2.0, f"mlx5_core {hca.pci_address}: Port 1 link up"))
    elif spec.kind == "fabric-slow":
        node.fabric_path_factor = FABRIC_SLOW_FACTOR
    elif spec.kind == "firmware-drift":
        for old in node.gpus if spec.gpu is None else [gpu]:
            old.vbios_version = p.drifted_vbios_version
        for hca in node.hcas if spec.gpu is None else [node.hcas[spec.gpu % p.gpu_count]]:
            if hca.ca_type == p.hca.ca_type:
                hca.firmware = p.hca.drifted_firmware
    elif spec.kind in _HOST_FAULTS:
        _HOST_FAULTS[spec.kind](node, gpu, at)
    elif spec.kind in _GPU_FABRIC_FAULTS:
        _GPU_FABRIC_FAULTS[spec.kind](node, gpu, at)
    # "flaky" acts per run (transient_failure), "unreachable" in the executor and a leaf's
    # faults through `leaf` on every node of it.


def _pcie_aer_fatal(node: NodeState, gpu: GpuState, at: float) -> None:
    node.host.aer_fatal_buses.add(gpu.bus)
    node.kernel_events.append(
        KernelEvent(
            at,
            f"pcieport 0000:{gpu.bus - 1:02x}:01.0: AER: PCIe Bus Error: "
            "severity=Uncorrected (Fatal), type=Transaction Layer, (Receiver ID)",
        )
    )


def _memory_uncorrected(node: NodeState, gpu: GpuState, at: float) -> None:
    node.host.edac_uncorrected += 1
    node.kernel_events.append(KernelEvent(at, "EDAC MC1: 1 UE memory read error on CPU_SrcID#0_MC#1_Chan#0_DIMM#0"))


def _fs_readonly(node: NodeState, gpu: GpuState, at: float) -> None:
    raid = next(f for f in node.host.filesystems if f.target == "/raid")
    raid.options = raid.options.replace("rw,", "ro,", 1)
    node.kernel_events.append(KernelEvent(at, "EXT4-fs (md1): Remounting filesystem read-only"))


def _disk_full(node: NodeState, gpu: GpuState, at: float) -> None:
    root = next(f for f in node.host.filesystems if f.target == "/")
    root.used_kb = int(root.size_kb * 0.98)


def _clock_drift(node: NodeState, gpu: GpuState, at: float) -> None:
    node.host.clock_synchronised, node.host.clock_offset_s = False, 4.2


_HOST_FAULTS = {
    "pcie-downtrained": lambda node, gpu, at: node.host.narrow_pci_buses.add(gpu.bus),
    "pcie-aer-fatal": _pcie_aer_fatal,
    "memory-dimm-lost": lambda node, gpu, at: setattr(node.host, "memory_kb", node.host.memory_kb * 3 // 4),
    "memory-uncorrected": _memory_uncorrected,
    "cpu-offline": lambda node, gpu, at: setattr(node.host, "cpus_offline", 4),
    "disk-full": _disk_full,
    "fs-readonly": _fs_readonly,
    "fabricmanager-down": lambda node, gpu, at: node.host.services.update({"nvidia-fabricmanager": "failed"}),
    "driver-mismatch": lambda node, gpu, at: setattr(node.host, "loaded_driver", _OLDER_DRIVER),
    "clock-drift": _clock_drift,
}
# The module a driver-mismatch node still runs: the release before the installed one.
_OLDER_DRIVER = "535.183.06"


def _gpu_init_failed(node: NodeState, gpu: GpuState, at: float) -> None:
    """The driver's init of one GPU failed (GSP did not boot): NVML and CUDA never see it, lspci
    still does. The lines as the driver logs them (checks/xid.py's gpu_init_failed and
    gsp_boot_failed forms: NVIDIA/gpu-operator#1146, NVIDIA/open-gpu-kernel-modules#789)."""
    node.gpus.remove(gpu)
    node.uninitialised_gpus.append(gpu)
    pci = gpu.kernel_pci[4:] + ".0"  # 0000:2b:00.0
    node.kernel_events += [
        KernelEvent(at, "NVRM: RmInitAdapter: Cannot initialize GSP firmware RM"),
        KernelEvent(at, f"NVRM: GPU {pci}: RmInitAdapter failed! (0x62:0x40:2474)"),
        KernelEvent(at, f"NVRM: GPU {pci}: rm_init_adapter failed, device minor number {gpu.index}"),
    ]


def _nvswitch_sxid_fatal(node: NodeState, gpu: GpuState, at: float) -> None:
    """A fatal SXid on one NVSwitch of the baseboard, as the nvswitch driver logs it (NVIDIA's
    Fabric Manager guide, quoted in leptonai/gpud: "SXid (PCI:...): 20034, Fatal, Link 30 LTSSM
    Fault Up")."""
    switch = gpu.index % node.profile.nvswitch_count
    where = f"nvidia-nvswitch{switch}: SXid (PCI:0000:{_NVSWITCH_BUS0 + switch:02x}:00.0): 20034"
    node.kernel_events += [
        KernelEvent(at, f"{where}, Fatal, Link 30 LTSSM Fault Up"),
        KernelEvent(at, f"{where}, Severity 5 Engine instance 30 Sub-engine instance 00"),
    ]
    node.allreduce_busbw_gbps *= NVSWITCH_SLOW_FACTOR


def _imex_down(node: NodeState, gpu: GpuState, at: float) -> None:
    """The tray's nvidia-imex failed."""
    node.host.services["nvidia-imex"] = "failed"


def _fabric_unhealthy(node: NodeState, gpu: GpuState, at: float) -> None:
    """The tray's GPUs were refused by the NVLink fabric: registration Completed with a failed
    status, no clique, a zero cluster (Azure/azhpc-images#506's node), and no NVLink peer
    access for NCCL."""
    for refused in node.gpus:
        refused.fabric_status = "Insufficient Resources"
    node.clique_id, node.cluster_uuid = 0, "00000000-0000-0000-0000-000000000000"
    node.allreduce_busbw_gbps *= FABRIC_UNREGISTERED_FACTOR


_GPU_FABRIC_FAULTS = {
    "gpu-init-failed": _gpu_init_failed,
    "nvswitch-sxid-fatal": _nvswitch_sxid_fatal,
    "imex-down": _imex_down,
    "fabric-unhealthy": _fabric_unhealthy,
}
