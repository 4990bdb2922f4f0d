"""Checks: text from a node's tools in, a typed verdict out. Pure; imports nothing of fleetctl.

judge("nccl", output_text, profile="h100-sxm") -> CheckResult
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from fleetctl.checks._text import UnjudgeableOutput
from fleetctl.checks.result import CheckResult, Finding, Status

if TYPE_CHECKING:
    from fleetctl.checks.profiles import GpuProfile, UnknownProfile, load_profile, profile_names

# Each kind's judge, imported on its first use: importing `checks` (for its result types, or
# checks.safe_yaml for a config file) must not import every parser, which would cost
# `fleetctl node event` (the first step of the reaction to a critical fault) its start-up.
_JUDGES: dict[str, tuple[str, str]] = {
    "nccl": ("fleetctl.checks.nccl", "judge_nccl"),
    "hpl": ("fleetctl.checks.hpl", "judge_hpl"),
    "dcgm": ("fleetctl.checks.dcgm", "judge_dcgm"),
    "dcgm-health": ("fleetctl.checks.dcgm_health", "judge_dcgm_health"),
    "nvidia-smi": ("fleetctl.checks.nvidia_smi", "judge_nvidia_smi"),
    "nvidia-smi-memory": ("fleetctl.checks.nvidia_smi", "judge_nvidia_smi_memory"),
    "xid": ("fleetctl.checks.xid", "judge_xid"),
    "ib": ("fleetctl.checks.ib", "judge_ib"),
    "ib-rails": ("fleetctl.checks.ib", "judge_ib_rails"),
    "nccl-pairs": ("fleetctl.checks.nccl", "judge_nccl_pairs"),
    "firmware": ("fleetctl.checks.firmware", "judge_firmware"),
    "pcie": ("fleetctl.checks.host", "judge_pcie"),
    "pcie-aer": ("fleetctl.checks.host", "judge_pcie_aer"),
    "memory": ("fleetctl.checks.host", "judge_memory"),
    "cpu": ("fleetctl.checks.host", "judge_cpu"),
    "disk": ("fleetctl.checks.host", "judge_disk"),
    "services": ("fleetctl.checks.host", "judge_services"),
    "versions": ("fleetctl.checks.host", "judge_versions"),
    "clock": ("fleetctl.checks.host", "judge_clock"),
    "imex": ("fleetctl.checks.imex", "judge_imex"),
    "nvme": ("fleetctl.checks.storage", "judge_nvme"),
    "bmc-log": ("fleetctl.checks.chassis", "judge_bmc_log"),
    "bmc-sensors": ("fleetctl.checks.chassis", "judge_bmc_sensors"),
}
KINDS: tuple[str, ...] = tuple(_JUDGES)
_PROFILE_NAMES = ("GpuProfile", "UnknownProfile", "load_profile", "profile_names")


def __getattr__(name: str) -> Any:
    """The profile names, re-exported here, imported when first asked for."""
    if name in _PROFILE_NAMES:
        return getattr(importlib.import_module("fleetctl.checks.profiles"), name)
    raise AttributeError(f"module 'checks' has no attribute {name!r}")


def judge(kind: str, text: str, profile: str | None = None, profiles_dir: str | None = None) -> CheckResult:
    """Judge one tool's output. Bad text gives an ERROR result, never an exception; an
    unknown kind or profile is the caller's mistake and raises ValueError (UnknownProfile,
    ProfileError). `profiles_dir`: the site profiles (default: FLEETCTL_PROFILES_DIR's)."""
    if kind not in _JUDGES:
        raise ValueError(f"unknown check kind {kind!r}; known kinds: {', '.join(KINDS)}")
    from fleetctl.checks.profiles import load_profile

    gpu_profile = load_profile(profile, profiles_dir) if profile else None
    if not text.strip():
        return CheckResult(Status.ERROR, {}, [], "the output is empty")
    try:
        module, function = _JUDGES[kind]
        judge_kind: Callable[[str, GpuProfile | None], CheckResult] = getattr(importlib.import_module(module), function)
        return judge_kind(text, gpu_profile)
    except UnjudgeableOutput as exc:
        return CheckResult(Status.ERROR, {}, [], str(exc))
    except (
        ValueError,
        KeyError,
        IndexError,
        TypeError,
        AttributeError,
        StopIteration,
        RecursionError,
        OverflowError,
    ) as exc:
        # A shape no parser rule foresaw (or JSON nested past Python's recursion limit);
        # still a verdict, never a crash in a workflow.
        return CheckResult(Status.ERROR, {}, [], f"unreadable {kind} output ({type(exc).__name__}: {exc})")


__all__ = [
    "KINDS",
    "CheckResult",
    "Finding",
    "GpuProfile",
    "Status",
    "UnknownProfile",
    "judge",
    "load_profile",
    "profile_names",
]
