"""A quarantined GPU's return to its scheduler: whether it is due, what its Xid's catalog action
asks before its recheck, and what the recheck's outcome makes of it. Pure.

NVIDIA's Xid catalog (checks/catalog/xid.tsv, read by checks.xid_catalog) gives each code an
immediate action. A GPU taken out for a code whose action is a GPU reset (XID 48's
WORKFLOW_XID_48, XID 64's RESET_GPU) is reset, then its checks (RETURN_CHECKS) run on it alone;
a code the application recovers from (XID 94's RESTART_APP) needs no reset, only the checks. A
code whose action is the node's (a reboot, the mechanics, NVIDIA's support) cannot be undone
from the GPU: it stays out for an operator. A GPU whose reset or checks fail stays out, and
after `max_failed` failed returns its node is drained for its remediation: a fault a reset
does not clear (a row remap that failed, memory running out of spare rows) is the vendor's.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from fleetctl.checks.xid_catalog import xid_action

# The catalog's checks a GPU must pass to go back, each run on that GPU alone: its memory as
# NVIDIA's row-remapping rules judge it (what a runbook asks after a GPU reset), then DCGM's
# short diagnostic on it.
RETURN_CHECKS: tuple[str, ...] = ("nvidia-smi-memory", "dcgm-r1")


class ReturnStep(str, Enum):
    """What a GPU's Xid asks before its recheck."""

    RESET_THEN_CHECK = "reset_then_check"  # the catalog's action is a GPU reset
    CHECK = "check"  # the application's (or nobody's) to act on: the GPU only rechecked
    LEAVE_OUT = "leave_out"  # the node's to act on: an operator's


class ReturnVerdict(str, Enum):
    """What a return's outcome makes of the GPU."""

    RETURN = "return"  # back in the scheduler
    KEEP_OUT = "keep_out"  # out, its failure recorded; returned again on a later run
    DRAIN_NODE = "drain_node"  # out, and its node drained for its remediation


# The catalog's actions (checks.xid_catalog.BUCKET_ACTIONS's values) by what they ask of a GPU.
_RESET = frozenset({"reset_gpu"})
_CHECK_ONLY = frozenset({"ignore", "restart_app"})


def return_step(code: int | None) -> tuple[ReturnStep, str]:
    """What the catalog's action for `code` (the Xid that took the GPU out; None: none named)
    asks before the GPU's recheck, and why."""
    if code is None:
        return ReturnStep.LEAVE_OUT, "no Xid recorded: its fault is not known, an operator's to judge"
    entry = xid_action(code)
    if entry.action in _RESET:
        return ReturnStep.RESET_THEN_CHECK, f"XID {code}: the catalog's action is a GPU reset ({entry.nvidia_action})"
    if entry.action in _CHECK_ONLY:
        return ReturnStep.CHECK, f"XID {code}: the catalog's action is the application's ({entry.nvidia_action})"
    return ReturnStep.LEAVE_OUT, f"XID {code}: the catalog's action is {entry.action}, not the GPU's alone"


def due(out_for_s: float, settle_s: float) -> bool:
    """Whether a GPU out for `out_for_s` has settled: its fault's burst judged."""
    return out_for_s >= settle_s


@dataclass(frozen=True)
class ReturnOutcome:
    verdict: ReturnVerdict
    reason: str


def judge_return(failure: str, failed_before: int, max_failed: int) -> ReturnOutcome:
    """`failure`: why this return's reset or checks failed ("" none failed); `failed_before`:
    the GPU's failed returns since it went out."""
    if not failure:
        return ReturnOutcome(ReturnVerdict.RETURN, "reset and rechecked clean")
    failed = failed_before + 1
    if failed >= max_failed:
        return ReturnOutcome(
            ReturnVerdict.DRAIN_NODE, f"return {failed} of {max_failed} failed: {failure}; the node to its remediation"
        )
    return ReturnOutcome(ReturnVerdict.KEEP_OUT, f"return {failed} of {max_failed} failed: {failure}")
