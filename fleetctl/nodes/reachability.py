"""When a node that checks cannot reach, or whose agent has fallen silent, is suspect. Pure.

A check that could not run (`error: unreachable`) says nothing about the hardware, so one
never drains a node. But a node that no check has reached for several sweeps in a row is
not serving either (its jobs cannot be placed, its GPUs cannot be judged), and left alone
it stays in production for good. After `unreachable_runs` consecutive unreachable check
runs the node is suspect, and automation drains it through the capacity guard: the guard's
limits and its storm breaker still hold, so a network partition or a checker outage that
makes many nodes look unreachable at once opens the breaker instead of draining them all.

The same holds for a node whose agent (`fleetctl agent`) has said nothing for longer than the
configured silence: the agent is the node's own watcher, and a node it no longer watches can
lose its GPUs unseen. Only a node whose agent was heard at least once is judged (a fleet runs
agents on some nodes and not others), and only over its time in production: a node that has
just come back from repair gets the whole silence before it is judged again."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

UNREACHABLE = "unreachable"  # fleetctl.executors.base.NodeUnreachable.kind, as check runs record it


@dataclass(frozen=True)
class ReachabilityPolicy:
    unreachable_runs: int = 3


@dataclass(frozen=True)
class Reachability:
    suspect: bool
    reason: str


def judge_reachability(
    error_kinds: Sequence[str | None], policy: ReachabilityPolicy = ReachabilityPolicy()
) -> Reachability:
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


def judge_agent_silence(
    seen_at: datetime | None, in_state_since: datetime, now: datetime, silence_s: float
) -> Reachability:
    """`seen_at`: when the node's agent was last heard (None: it never was, so it has no agent
    to judge); `in_state_since`: when the node entered production; `silence_s`: 0 disables."""
    if seen_at is None or silence_s <= 0:
        return Reachability(False, "no agent judged" if seen_at is None else "agent silence is not judged")
    quiet_s = (now - max(seen_at, in_state_since)).total_seconds()
    if quiet_s > silence_s:
        return Reachability(True, f"agent silent since {seen_at:%Y-%m-%d %H:%M:%S} UTC (over {silence_s:g} s)")
    return Reachability(False, f"agent heard {max(0.0, (now - seen_at).total_seconds()):.0f} s ago")


# A sweep asks the guard about this many silent nodes at most, the longest silent first (the
# rest the next sweep): an intake outage silences every agent at once, and one guarded
# drain per node of a 10,000-node fleet would outgrow the sweep's history. The guard is told
# how many fell silent, all of them, so its breaker sees the whole storm.
SILENT_ASKED_PER_SWEEP = 100


@dataclass
class FleetSilence:
    with_agent: int = 0  # nodes whose agent was heard at least once: the ones judged
    silent_total: int = 0
    silent: list[tuple[str, datetime, Reachability]] = field(default_factory=list)  # (node, last heard, verdict)


def judge_fleet_silence(
    nodes: Iterable[tuple[str, datetime | None, datetime]],
    now: datetime,
    silence_s: float,
    limit: int = SILENT_ASKED_PER_SWEEP,
) -> FleetSilence:
    """`nodes`: (name, agent last heard or None, in production since) of the production nodes;
    the silent among them, the longest silent first, at most `limit` named."""
    judged = FleetSilence()
    for name, seen, since in nodes:
        if seen is None:
            continue
        judged.with_agent += 1
        verdict = judge_agent_silence(seen, since, now, silence_s)
        if verdict.suspect:
            judged.silent.append((name, seen, verdict))
    judged.silent_total = len(judged.silent)
    judged.silent = sorted(judged.silent, key=lambda s: (s[1], s[0]))[:limit]
    return judged
