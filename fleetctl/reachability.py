"""When a node that checks cannot reach is suspect. Pure.

A check that could not run (`error: unreachable`) says nothing about the hardware, so one
never drains a node. But a node that no check has reached for several sweeps in a row is
not serving either (its jobs cannot be placed, its GPUs cannot be judged), and left alone
it stays in production for good. After `unreachable_runs` consecutive unreachable check
runs the node is suspect, and automation drains it through the capacity guard: the guard's
limits and its storm breaker still hold, so a network partition or a checker outage that
makes many nodes look unreachable at once opens the breaker instead of draining them all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

UNREACHABLE = "unreachable"  # fleetctl.executors.base.NodeUnreachable.kind, as check runs record it


@dataclass(frozen=True)
class ReachabilityPolicy:
    unreachable_runs: int = 3


@dataclass(frozen=True)
class Reachability:
    suspect: bool
    reason: str


def judge_reachability(error_kinds: Sequence[str | None], policy: ReachabilityPolicy = ReachabilityPolicy()) -> Reachability:
    """`error_kinds`: the node's latest check runs, newest first, each run's error kind (None
    for a run that reached the node, whatever it judged)."""
    streak = 0
    for kind in error_kinds:
        if kind != UNREACHABLE:
            break
        streak += 1
    if streak >= policy.unreachable_runs:
        return Reachability(True, f"{streak} check run{'s' if streak != 1 else ''} in a row could not reach the node")
    return Reachability(False, f"{streak} of {policy.unreachable_runs} consecutive unreachable check runs")
