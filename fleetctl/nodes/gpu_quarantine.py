"""GPU-level quarantine: whether a fault takes one GPU out of its scheduler, or the node. Pure.

The unit of action is the node unless the site's Xid policy (checks.xid_policy, `scope: gpu`)
says a code's fault is confined to the GPU that logged it: NVIDIA's XID 48 (a double-bit ECC
error) or 94 (a contained memory error) on one GPU leaves the other seven of an HGX node
working, as NVSentinel's partial drain and Kubernetes DRA device taints treat them. Then:

- the GPU the event names (its PCI bus id, as the kernel's Xid line gives it) goes out of the
  scheduler alone, and the node stays in production with one GPU fewer;
- the same GPU again is already out: nothing more;
- a fault on a second GPU while one is out is no longer one GPU's: two bad GPUs on a board
  point at the board, its power or its NVSwitches, and the node drains as before;
- an event that names no GPU (an operator's report, an intake alert) cannot be confined: the node.

The capacity guard counts a GPU out as 1/N of its node (gpu_share): N GPUs out of one node's N
cost what draining it costs, so quarantine is never a way around the guard's limits.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from enum import Enum

from fleetctl.checks.xid_policy import FaultScope, XidPolicy, fault_scope

# A GPU's PCI address as the kernel's Xid line prints it (0000:2b:00), or nvidia-smi's
# (00000000:2B:00.0): domain, bus, device, and maybe the function.
_PCI = re.compile(r"(?:PCI:)?([0-9A-Fa-f]{4,8}):([0-9A-Fa-f]{2}):([0-9A-Fa-f]{2})(?:\.[0-7])?")


class QuarantineAction(str, Enum):
    """What a fault's scope makes the node's workflow do."""

    QUARANTINE_GPU = "quarantine_gpu"  # take the one GPU out of the scheduler
    ALREADY_OUT = "already_out"  # the same GPU is out already: nothing more
    DRAIN_NODE = "drain_node"  # the node, as for any other fault


@dataclass(frozen=True)
class ScopeVerdict:
    action: QuarantineAction
    gpu: str  # the GPU's key (gpu_key) for a GPU's action, "" for the node
    reason: str


class NotAGpuAddress(ValueError):
    """A GPU named by something that is not a PCI address."""


def gpu_key(pci: str) -> str:
    """One GPU's name, however a tool prints its PCI address: '00000000:2B:00.0', 'PCI:0000:2b:00'
    and '0000:2b:00' are the same GPU, '0000:2b:00'. NotAGpuAddress for anything else."""
    m = _PCI.fullmatch(pci.strip())
    if m is None:
        raise NotAGpuAddress(f"{pci[:40]!r} is not a GPU's PCI address (such as 0000:2b:00)")
    domain, bus, device = m.groups()
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}"


def named_gpu(pci: str) -> str:
    """The GPU an event names (gpu_key), or "" when it names none a GPU can be taken out by: an
    address a sender garbled must not cost the event its fault, which then takes out the node."""
    try:
        return gpu_key(pci) if pci else ""
    except NotAGpuAddress:
        return ""


def decide_scope(policy: XidPolicy, code: int | None, gpu: str, quarantined: Collection[str]) -> ScopeVerdict:
    """What a fault that drains takes out: `code` the event's Xid, `gpu` the PCI address it
    names ("" none), `quarantined` the keys of the node's GPUs out now (gpu_key)."""
    if fault_scope(policy, code) is not FaultScope.GPU:
        return ScopeVerdict(QuarantineAction.DRAIN_NODE, "", "the node: the policy scopes this fault to the node")
    if not gpu:
        return ScopeVerdict(QuarantineAction.DRAIN_NODE, "", f"the node: XID {code} names no GPU")
    key = gpu_key(gpu)
    if key in quarantined:
        return ScopeVerdict(QuarantineAction.ALREADY_OUT, key, f"GPU {key} is out of the scheduler already")
    if quarantined:
        others = ", ".join(sorted(quarantined))
        return ScopeVerdict(
            QuarantineAction.DRAIN_NODE, "", f"the node: XID {code} on GPU {key} while GPU {others} is out already"
        )
    return ScopeVerdict(QuarantineAction.QUARANTINE_GPU, key, f"GPU {key} only: XID {code} is confined to it")


def gpu_share(gpus_on_node: int) -> float:
    """What one GPU out costs the capacity guard, in nodes: 1/N of a node of N GPUs."""
    if gpus_on_node < 1:
        raise ValueError(f"a node with GPUs has at least one, not {gpus_on_node}")
    return 1.0 / gpus_on_node


def gpus_usable(gpus_on_node: int, quarantined: int) -> int:
    """The GPUs a scheduler may still place work on (Slurm's GRES count, a device plugin's
    allocatable): the node's, less those out."""
    return max(0, gpus_on_node - quarantined)
