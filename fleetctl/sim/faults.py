"""Faults injected into simulated nodes: their kinds, and when each appears.

Pure: a fault is data (SimFaultSpec) the caller stores; when it appears is a function of
the spec. What a fault does to a node is in `fleetctl.sim.node`.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass

FAULT_KINDS: tuple[str, ...] = (
    "xid79",  # GPU fallen off the bus
    "xid48",  # double-bit ECC error; the row remap that follows fails
    "xid48-remapped",  # double-bit ECC error whose row remap succeeded: pending until the GPU's reset
    "row-remap-failure",  # no spare row left for an uncorrectable error
    "row-remap-pending",  # a remap waits for a GPU reset
    "nvlink-degraded",  # all-reduce 75-85% of healthy: a straggler
    "thermal-throttle",  # HW thermal slowdown: hot, slow clocks, low HPL
    "ib-port-down",  # one InfiniBand port down
    "ib-rail-slow",  # one rail's RDMA bandwidth ~55% (its PCIe link trained down): ibstat still Active at full rate
    "ib-link-flap",  # one rail's link goes down and retrains every FLAP_PERIOD_S under load
    "fabric-slow",  # the path beyond the node (leaf uplinks, cabling) carries ~60%: only multi-node runs see it
    # The node's leaf switch has half its uplinks: every all-reduce between its nodes and another leaf's runs at
    # half speed, one within the leaf at full; it acts on every node of the leaf (the inventory's `switch`).
    "leaf-uplink-slow",
    "firmware-drift",  # VBIOS and ConnectX firmware older than the profile's
    # The host around the GPUs (checks/host.py)
    "pcie-downtrained",  # one GPU's PCIe link trained to x8 of x16 (a riser, a seating)
    "pcie-aer-fatal",  # a fatal PCIe error (Surprise Down) on one GPU's link, counted and logged
    "memory-dimm-lost",  # a quarter of the DIMMs gone from MemTotal
    "memory-uncorrected",  # an uncorrected DIMM error (EDAC ue_count, logged)
    "cpu-offline",  # CPUs offline
    "disk-full",  # the root filesystem 98% full
    "fs-readonly",  # /raid remounted read-only after an I/O error
    "fabricmanager-down",  # nvidia-fabricmanager failed
    "driver-mismatch",  # the driver upgraded without a reboot: NVML refuses the loaded module
    "clock-drift",  # chrony lost its source: unsynchronised, seconds off
    # The GPUs and their fabric
    "gpu-init-failed",  # one GPU never initialised (RmInitAdapter failed, GSP did not boot): missing from NVML
    "nvswitch-sxid-fatal",  # an NVSwitch of an HGX baseboard logs a fatal SXid: NVLink through it stalls
    # The multi-node NVLink domain (GB200 NVL72)
    "imex-down",  # the tray's nvidia-imex failed: its own nvidia-imex-ctl cannot reach it, the domain lists it down
    "fabric-unhealthy",  # the tray's GPUs are not registered with the NVLink fabric (Fabric Status not Success)
    "flaky",  # stress tests fail on about half the runs
    "unreachable",  # the executor raises NodeUnreachable
)

# The faults of a node's leaf switch rather than of the node: every node on that switch sees them.
LEAF_FAULT_KINDS = frozenset({"leaf-uplink-slow"})

# How often a flapping link goes down and retrains: a few times over an every-rail check.
FLAP_PERIOD_S = 20.0

# What a repair cures on a simulated node: the faults a real GPU reset or reboot clears, and
# a firmware update (firmware-drift is one fault: any completed update clears it).
CURED_BY: dict[str, frozenset[str]] = {
    "gpu_reset": frozenset({"row-remap-pending", "nvlink-degraded", "xid48-remapped"}),
    # A reboot also loads the installed driver, restarts the daemons and steps the clock; a
    # lost DIMM, a narrow link, a full or damaged filesystem stay.
    # A fatal SXid needs the system restarted (the signature's action: NVIDIA's Fabric Manager
    # guide, "Restart the system to reset the GPUs and NVSwitches"); IMEX starts again with it.
    # A GPU that never initialised is not cured by a restart here (the simulator is never
    # kinder: one that fails its init again is hardware), nor the fabric registration of a
    # tray, which the rack's NVSwitch trays refuse.
    "reboot": frozenset(
        {
            "xid79",
            "row-remap-pending",
            "nvlink-degraded",
            "driver-mismatch",
            "fabricmanager-down",
            "clock-drift",
            "nvswitch-sxid-fatal",
            "imex-down",
        }
    ),
    "firmware_update": frozenset({"firmware-drift"}),
}


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
