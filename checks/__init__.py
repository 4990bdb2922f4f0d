"""Checks: text from a node's tools in, a typed verdict out. Pure; imports nothing of fleetctl.

    judge("nccl", output_text, profile="h100-sxm") -> CheckResult
"""

from __future__ import annotations

from collections.abc import Callable

from checks._text import UnjudgeableOutput
from checks.dcgm import judge_dcgm
from checks.firmware import judge_firmware
from checks.hpl import judge_hpl
from checks.ib import judge_ib
from checks.nccl import judge_nccl
from checks.nvidia_smi import judge_nvidia_smi
from checks.profiles import GpuProfile, UnknownProfile, load_profile, profile_names
from checks.result import CheckResult, Finding, Status
from checks.xid import judge_xid

_JUDGES: dict[str, Callable[[str, GpuProfile | None], CheckResult]] = {
    "nccl": judge_nccl,
    "hpl": judge_hpl,
    "dcgm": judge_dcgm,
    "nvidia-smi": judge_nvidia_smi,
    "xid": judge_xid,
    "ib": judge_ib,
    "firmware": judge_firmware,
}
KINDS: tuple[str, ...] = tuple(_JUDGES)


def judge(kind: str, text: str, profile: str | None = None) -> CheckResult:
    """Judge one tool's output. Bad text gives an ERROR result, never an exception; an
    unknown kind or profile is the caller's mistake and raises ValueError (UnknownProfile)."""
    if kind not in _JUDGES:
        raise ValueError(f"unknown check kind {kind!r}; known kinds: {', '.join(KINDS)}")
    gpu_profile = load_profile(profile) if profile else None
    if not text.strip():
        return CheckResult(Status.ERROR, {}, [], "the output is empty")
    try:
        return _JUDGES[kind](text, gpu_profile)
    except UnjudgeableOutput as exc:
        return CheckResult(Status.ERROR, {}, [], str(exc))
    except (ValueError, KeyError, IndexError, TypeError, AttributeError, StopIteration, RecursionError, OverflowError) as exc:
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
