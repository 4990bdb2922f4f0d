"""Where fleetctl and the schedulers disagree about nodes, and making the schedulers match.

fleetctl's node workflows own node state: a node in production should be schedulable,
every other state should be drained in its scheduler. A drain or resume by hand leaves
the two disagreeing; `reconcile` finds it, and with `fix` makes the scheduler match fleetctl
(never the reverse: to keep a node out, drain it through fleetctl).

A drain another tool made (Node Health Check's `NHC: ...`, SUNK's `k8s: ...`, a person's)
is that tool's to lift: reconcile reports it with its owner, the word before the reason's
first colon, and resumes it only when the operator names that owner (`--include-owner`).

Each worker also looks for such drains of its fleet's production nodes every
settings.external_drain_watch_s (`external_drains`, workflows.worker.watch_external_drains):
each becomes a health event of the node (source `external-drain`, the tool's reason and
owner; `node list` shows it as the condition DrainedOutside until the drain is lifted), and
under external_drain_policy `maintenance` a drain asked of the capacity guard.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from fleetctl.nodes.capacity import EXTERNAL_DRAIN
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.schedulers.base import (
    BURN_IN_HOLD,
    ReadsNodeStates,
    Scheduler,
    SchedulerError,
    SchedulerNodeState,
    is_check_hold,
)

# Schedulers asked at once: each question is a command or an API call of its own.
PARALLEL = 8

# What each difference means, and what --fix does about it (None: nothing it can do).
DIFFERENCES = {
    "not_drained": ("out of service in fleetctl, schedulable in the scheduler", "drain"),
    "stale_fleetctl_drain": ("in production, but still drained by fleetctl", "resume"),
    # Lifted by the check when it ends; one that stays names a check cut off (a sweep terminated).
    "check_hold": ("in production, held by fleetctl for a check", None),
    # The force resume only for an owner the operator named; otherwise nothing.
    "drained_by_someone_else": ("in production, but drained outside fleetctl", "force resume"),
    "down": ("in production, but down in the scheduler", None),
    "unreachable": ("the scheduler could not be asked", None),
}


# A drain reason that names its tool: "NHC: ...", "k8s: ...". A name is one short word.
_OWNER = re.compile(r"\s*([A-Za-z][A-Za-z0-9_.-]{0,31})\s*:")


def drain_owner(reason: str | None) -> str:
    """The tool a drain's reason names ("NHC: check_hw_cpuinfo ..." -> "NHC"), or "" when it
    names none (a person's free text, or no reason at all)."""
    found = _OWNER.match(reason or "")
    return found.group(1) if found else ""


def valid_owner(name: str) -> bool:
    return _OWNER.fullmatch(f"{name}:") is not None


class NodeRecord(Protocol):
    """What these comparisons read of a node: a fleetctl Node row (fleetctl.db.models.Node)."""

    @property
    def name(self) -> str: ...
    @property
    def scheduler(self) -> str: ...
    @property
    def state(self) -> str: ...
    @property
    def state_since(self) -> datetime: ...


@dataclass
class Difference:
    node: str
    scheduler: str
    fleetctl_state: str
    scheduler_state: str
    reason: str | None
    difference: str
    meaning: str
    action: str | None
    fixed: bool = False
    error: str = ""
    owner: str = ""  # the tool that drained the node (drained_by_someone_else)


def compare(
    node: NodeRecord,
    scheduler: Scheduler,
    include_owners: frozenset[str] = frozenset(),
    read: SchedulerNodeState | SchedulerError | None = None,
) -> Difference | None:
    """How `scheduler` sees `node` (a fleetctl Node row) differently from fleetctl, or None.
    Another tool's drain gets an action only when its owner is in `include_owners`
    (compared without case: `nhc` names NHC). `read`: what a read of many nodes at once
    answered for this one (ReadsNodeStates), else the scheduler is asked for it alone."""

    def difference(kind: str, scheduler_state: str = "", reason: str | None = None) -> Difference:
        meaning, action = DIFFERENCES[kind]
        return Difference(node.name, node.scheduler, node.state, scheduler_state, reason, kind, meaning, action)

    try:
        if isinstance(read, SchedulerError):
            raise read
        seen = read or scheduler.node_state(node.name)
    except SchedulerError as exc:
        return difference("unreachable", "unknown", str(exc))
    if not NodeState(node.state).in_service:
        return None if seen.drained else difference("not_drained", seen.state, seen.reason)
    if seen.drained and is_check_hold(seen.reason):
        # Held for a sweep check or a recheck: the check lifts it; resuming it here would let
        # a job land in the middle of the check.
        return difference("check_hold", seen.state, seen.reason)
    if seen.drained and seen.owned_by_fleetctl:
        return difference("stale_fleetctl_drain", seen.state, seen.reason)
    if seen.drained:
        found = difference("drained_by_someone_else", seen.state, seen.reason)
        found.owner = drain_owner(seen.reason)
        if not found.owner or found.owner.lower() not in {o.lower() for o in include_owners}:
            found.action = None  # its owner's to lift
        return found
    if seen.state == "down":
        return difference("down", seen.state, seen.reason)
    return None


EXTERNAL_DRAIN_POLICIES = ("record-only", "maintenance")


@dataclass(frozen=True)
class ExternalDrain:
    """A production node drained in its scheduler by another tool (or a person)."""

    node: str
    scheduler: str
    owner: str  # "" when the reason names no tool
    reason: str
    # One per drain reason per spell in production: the health event's id, so a drain seen on
    # every watch is recorded once, and a new reason (or a new spell) is recorded again.
    event_id: str

    @property
    def message(self) -> str:
        by = self.owner or "someone (the reason names no tool)"
        return f"drained in {self.scheduler} outside fleetctl by {by}: {self.reason or '(no reason given)'}"


def external_drain_id(node: str, state_since: datetime, scheduler: str, reason: str) -> str:
    digest = hashlib.sha256(f"{scheduler}\0{reason}".encode()).hexdigest()[:16]
    return f"{EXTERNAL_DRAIN}/{node}/{state_since.isoformat()}/{digest}"


def episode_id(drain_id: str, recorded: Iterable[str]) -> str:
    """The health event id of the drain's current episode: `drain_id#N`, N the episodes whose
    lifting is already `recorded` (event ids), so the same drain made again after it was
    lifted, in the same spell in production, is recorded (and shown) again."""
    lifted = sum(1 for key in recorded if key.startswith(f"{drain_id}#") and key.endswith("/lifted"))
    return f"{drain_id}#{lifted}"


def external_drains(
    nodes: Iterable[NodeRecord], schedulers: Mapping[str, Scheduler]
) -> tuple[list[ExternalDrain], set[str]]:
    """The production nodes among `nodes` (Node rows) that another tool drained in their
    scheduler, as reconcile reports them (compared, never fixed), and the names of those
    whose scheduler could not be asked (nothing is known of their drains)."""
    production = {n.name: n for n in nodes if n.state == NodeState.PRODUCTION.value}
    differences = reconcile(production.values(), schedulers, False)
    return (
        [
            ExternalDrain(
                d.node,
                d.scheduler,
                d.owner,
                d.reason or "",
                external_drain_id(d.node, production[d.node].state_since, d.scheduler, d.reason or ""),
            )
            for d in differences
            if d.difference == "drained_by_someone_else"
        ],
        {d.node for d in differences if d.difference == "unreachable"},
    )


def fix(found: Difference, scheduler: Scheduler) -> None:
    """Make the scheduler match fleetctl for one difference; records the outcome on `found`."""
    try:
        if found.difference == "not_drained":
            scheduler.drain(found.node, f"reconcile: fleetctl has the node in {found.fleetctl_state}")
        elif found.difference == "stale_fleetctl_drain":
            scheduler.resume(found.node)
        elif found.difference == "drained_by_someone_else" and found.action is not None:
            scheduler.resume(found.node, force=True)
        else:
            return
    except SchedulerError as exc:
        found.error = str(exc)
        return
    found.fixed = True


def reconcile(
    nodes: Iterable[NodeRecord],
    schedulers: Mapping[str, Scheduler],
    fix_them: bool,
    on_checked: Callable[[], None] = lambda: None,
    include_owners: frozenset[str] = frozenset(),
) -> list[Difference]:
    """Compare every node (fleetctl Node rows) with its scheduler (`schedulers` by kind), fixing
    what can be fixed when `fix_them` (other tools' drains: only those of `include_owners`);
    `on_checked` is called once per node, for progress."""

    nodes = list(nodes)
    read_at_once = _read_at_once(nodes, schedulers)

    def check(node: NodeRecord) -> list[Difference]:
        differences = []
        for kind, member in _members(node, schedulers):
            found = compare(node, member, include_owners, _read_for(read_at_once.get(id(member)), kind, node.name))
            if found is None:
                continue
            found.scheduler = kind
            if fix_them:
                fix(found, member)
            differences.append(found)
        on_checked()
        return differences

    with ThreadPoolExecutor(PARALLEL) as pool:
        return [d for found in pool.map(check, nodes) for d in found]


def _members(node: NodeRecord, schedulers: Mapping[str, Scheduler]) -> list[tuple[str, Scheduler]]:
    """The schedulers that run `node`: a node several run (fleetctl.schedulers.combined) is
    compared in each."""
    scheduler = schedulers[node.scheduler]
    return list(getattr(scheduler, "members", ((node.scheduler, scheduler),)))


def _read_at_once(
    nodes: list[NodeRecord], schedulers: Mapping[str, Scheduler]
) -> dict[int, dict[str, SchedulerNodeState] | SchedulerError]:
    """Each scheduler that reads many nodes in one call (ReadsNodeStates), asked once for all
    of its nodes here (by the scheduler object's id): a watch over 10,000 nodes is one sinfo a
    round. A scheduler that cannot be asked answers its error for every one of its nodes."""
    asked: dict[int, tuple[ReadsNodeStates, list[str]]] = {}
    for node in nodes:
        for _, member in _members(node, schedulers):
            if isinstance(member, ReadsNodeStates):
                asked.setdefault(id(member), (member, []))[1].append(node.name)
    answers: dict[int, dict[str, SchedulerNodeState] | SchedulerError] = {}
    for key, (reader, names) in asked.items():
        try:
            answers[key] = reader.node_states(names)
        except SchedulerError as exc:
            answers[key] = exc
    return answers


def _read_for(
    states: dict[str, SchedulerNodeState] | SchedulerError | None, kind: str, node: str
) -> SchedulerNodeState | SchedulerError | None:
    """What a read of many nodes at once says of `node` (None: its scheduler was not read so)."""
    if states is None or isinstance(states, SchedulerError):
        return states
    return states.get(node) or SchedulerError(f"{kind} does not know node {node}")


def hold_new_nodes(nodes: Iterable[tuple[str, str]], schedulers: Mapping[str, Scheduler]) -> list[str]:
    """Hold each (node, scheduler kind) imported for burn-in in its scheduler (BURN_IN_HOLD),
    which places work on any node it has not drained; admission lifts the hold. Why each
    refused, one line per node (admission takes the hold again before any check)."""

    def hold(node: tuple[str, str]) -> str:
        name, kind = node
        try:
            schedulers[kind].drain(name, BURN_IN_HOLD)
        except SchedulerError as exc:
            return f"{name}: not held in {kind}: {exc}"
        return ""

    with ThreadPoolExecutor(PARALLEL) as pool:
        return [refusal for refusal in pool.map(hold, list(nodes)) if refusal]
