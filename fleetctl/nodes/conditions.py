"""What is wrong with a node and what it waits for, at a glance: kubectl-style conditions
(`Unreachable`, `CheckFailed`, `DrainHeld`, ...) and sinfo-style reasons, from rows the
database already holds. Pure: the caller reads the rows, these functions decide.

A node's state says where it is in its lifecycle; its conditions say what the evidence
says about it. A production node whose every check has timed out for twenty minutes is
`production` and `Unreachable`; one the capacity guard will not let go is `production`
and `DrainHeld`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from fleetctl.nodes.lifecycle import NodeState

# The executor's error kinds (fleetctl/executors/base.py) that mean the node could not be
# reached at all: nothing ran on it, so nothing is known about its hardware.
UNREACHABLE_KINDS = frozenset({"unreachable", "timeout", "auth_failed", "host_key"})
# The guard's decisions recorded as automation events (workflows/definitions/capacity_guard.py).
GUARD_DENIALS = frozenset({"deny", "breaker_open"})
GUARD_DECISIONS = GUARD_DENIALS | {"grant", "force"}
# The word shown when no condition holds (kubectl's Ready).
READY = "Ready"
# The words Slurm operators filter by (sinfo's states), as fleetctl's states.
STATE_WORDS = {
    "drained": ("maintenance",),
    "drain": ("draining", "maintenance"),  # sinfo's "drain": draining or drained
    "out": ("draining", "maintenance", "rma"),
}


# The condition of a node taken out of service: whatever its last checks said, it is not
# Ready (a `grep -v Ready` must find every one of them).
OUT_OF_SERVICE = {
    NodeState.DRAINING.value: "Maintenance",
    NodeState.MAINTENANCE.value: "Maintenance",
    NodeState.RMA.value: "InRMA",
    NodeState.RETIRED.value: "Retired",
}


class UnknownState(ValueError):
    pass


def states_named(values: Iterable[str]) -> list[str]:
    """`--state` values (each may be a comma-separated list) as fleetctl's states, in the
    order named, without repeats. A word that names no state raises UnknownState."""
    found: list[str] = []
    known = {s.value for s in NodeState}
    for value in values:
        for word in (w.strip().lower() for w in value.split(",")):
            if not word:
                continue
            if word in known:
                found.append(word)
            elif word in STATE_WORDS:
                found.extend(STATE_WORDS[word])
            else:
                raise UnknownState(f"unknown state {word!r} (one of: {', '.join([*sorted(known), *STATE_WORDS])})")
    return list(dict.fromkeys(found))


@dataclass(frozen=True)
class CheckRow:
    """One recorded run of a check (a CheckRun, reduced to what a summary needs)."""

    check: str
    status: str
    reason: str
    at: datetime
    error_kind: str | None = None
    metrics: dict[str, Any] | None = None


@dataclass(frozen=True)
class CheckSummary:
    """The latest run of one check, and how long its current status has lasted: one row per
    check instead of the same error repeated once per sweep."""

    check: str
    status: str
    reason: str
    at: datetime  # the latest run
    since: datetime  # the first run of the current streak of this status
    runs: int  # runs in the current streak (at least 1)
    error_kind: str | None = None
    metrics: dict[str, Any] | None = None


@dataclass(frozen=True)
class DrainHeld:
    """An automated drain of a production node that the capacity guard refuses: the guard's
    latest decision about the node since it last changed state is a refusal. Why, since
    when (the first refusal after the last grant), how often asked."""

    reason: str
    since: datetime
    last: datetime
    refusals: int


# What holds a drain back, as a bounded class (the exporter's `held_by` label: no free text,
# so a new refusal makes no new series), from the start of the capacity guard's refusal
# (fleetctl.nodes.capacity._decide and checker_storm word them). The breaker was already open
# (`breaker`: an operator must resume automation), this request's storm opened it
# (`storm_window`), or a limit of the fleet or the node's rack (each frees as nodes return).
HELD_BY = (
    ("automation paused:", "breaker"),
    ("checker storm:", "breaker"),
    ("agent silence storm:", "breaker"),
    ("storm:", "storm_window"),
    ("fleet limit:", "fleet_limit"),
    ("rack limit:", "rack_limit"),
)
HELD_BY_CLASSES = (*tuple(dict.fromkeys(cls for _, cls in HELD_BY)), "other")


def held_by(refusal: str) -> str:
    """The class of the guard's refusal `refusal` (HELD_BY_CLASSES); `other` for a text the
    guard does not write (an older fleetctl's, or a row written by hand)."""
    for prefix, cls in HELD_BY:
        if refusal.startswith(prefix):
            return cls
    return "other"


# The conditions a node in production can carry (`conditions`): the exporter's `condition`
# label of the unhealthy nodes still in production, every one of them a bounded word. A failed
# or stuck runbook run (RemediationFailed, RemediationStuck) has its own series, whatever the
# node's state (exporter_server.needs_operator_family).
PRODUCTION_CONDITIONS = (
    "Stalled",
    "Suspect",
    "Unreachable",
    "CheckFailed",
    "CheckError",
    "DrainHeld",
    "StragglerSuspected",
    "Stale",
    "Unchecked",
)


@dataclass(frozen=True)
class Condition:
    # Retired, InRMA, Maintenance, NotAdmitted, Stalled, Suspect, Unreachable, CheckFailed, CheckError,
    # DrainHeld, StragglerSuspected, RemediationFailed, RemediationStuck, Stale, Unchecked
    type: str
    reason: str
    since: datetime | None = None
    # What the HEALTH cell says beside the type, in brackets ("" for nothing): Stale's
    # evidence age ("2d": no space, so `awk` reads the cell whole), as CheckFailed's count.
    health_note: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"type": self.type, "reason": self.reason, "since": self.since}


class RunStatus(str, Enum):
    """A remediation run's status as the Remediation workflow records it."""

    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    ESCALATED = "escalated"  # sent to RMA
    INTERRUPTED = "interrupted"  # a critical event cut it short; the node's workflow starts the next
    DRY_RUN = "dry_run"


# A live run that has finished no step for this long is stuck: past the longest a step waits
# by design (a hardware step waits up to 3 hours for the node's drain,
# workflows/definitions/remediation.py OUT_OF_SERVICE_WAIT), with an hour to spare.
REMEDIATION_STUCK_AFTER = timedelta(hours=4)


@dataclass(frozen=True)
class RunRow:
    """A node's newest live remediation run, reduced to what its condition needs: the step it
    stopped at (the failed one; for a run still going, the last one it finished, "" if none)."""

    run_key: str
    runbook: str
    status: str  # RunStatus
    started_at: datetime
    finished_at: datetime | None = None
    step: str = ""
    step_detail: str = ""
    last_progress: datetime | None = None  # when its latest step finished (None: no step yet)


def remediation_condition(
    node: str,
    state: str,
    run: RunRow | None,
    state_since: datetime | None,
    now: datetime | None,
    rma_held: bool = False,
) -> Condition | None:
    """`RemediationFailed` when the node's newest live run failed and the node has not moved
    since (a run that failed before the node last changed state is over: an operator or the
    lifecycle has acted); `RemediationStuck` when it is still running and has finished no step
    for REMEDIATION_STUCK_AFTER (not judged without `now`, nor while its RMA is held for an
    operator, which says so itself). The reason names the run, the step, why, and what the
    operator can do."""
    if run is None or state == "retired":
        return None
    if run.status == RunStatus.FAILED.value:
        if state_since is not None and run.finished_at is not None and state_since > run.finished_at:
            return None
        at = f" at step {run.step}" if run.step else ""
        return Condition(
            "RemediationFailed",
            f"runbook {run.runbook} (run {run.run_key}) failed{at}: {run.step_detail or 'no step detail'}; "
            f"see `fleetctl runbook runs --node {node}`, fix the cause, then `fleetctl runbook run {run.runbook} "
            f"--node {node}` again, or `fleetctl node rma {node} --reason ...`",
            run.finished_at,
        )
    if run.status == RunStatus.RUNNING.value and now is not None and not rma_held:
        progress = run.last_progress or run.started_at
        if now - progress < REMEDIATION_STUCK_AFTER:
            return None
        after = f"after step {run.step}" if run.step else "before its first step"
        hours = (now - progress).total_seconds() / 3600
        return Condition(
            "RemediationStuck",
            f"runbook {run.runbook} (run {run.run_key}) has finished no step for {hours:.0f}h, {after}; "
            f"see `fleetctl runbook runs --node {node}` and the run's workflow in Temporal",
            progress,
        )
    return None


def summarise_checks(runs: Iterable[CheckRow]) -> list[CheckSummary]:
    """One summary per check, newest first, from runs in any order. The streak counts back
    from the latest run while the status stays the same."""
    by_check: dict[str, list[CheckRow]] = {}
    for r in sorted(runs, key=lambda r: r.at, reverse=True):
        by_check.setdefault(r.check, []).append(r)
    summaries = []
    for check, newest_first in by_check.items():
        latest = newest_first[0]
        streak = 0
        for r in newest_first:
            if r.status != latest.status:
                break
            streak += 1
        summaries.append(
            CheckSummary(
                check,
                latest.status,
                latest.reason,
                latest.at,
                newest_first[streak - 1].at,
                streak,
                latest.error_kind,
                latest.metrics,
            )
        )
    return sorted(summaries, key=lambda s: s.at, reverse=True)


def conditions(
    state: str,
    checks: Sequence[CheckSummary],
    held: DrainHeld | None,
    last_cause: str = "",
    suspect: Condition | None = None,
    stalled: Condition | None = None,
    state_since: datetime | None = None,
    stale: Condition | None = None,
    drained_outside: Condition | None = None,
    remediation: Condition | None = None,
) -> list[Condition]:
    """What is wrong with the node, most serious first; empty when nothing is. `checks` from
    summarise_checks; `last_cause` is the cause of the node's latest transition; `suspect`
    the reachability judgement (fleetctl.nodes.reachability) made since it entered its state;
    `drained_outside` another tool's drain of the node in its scheduler (scheduler_sync:
    no job lands on it, whatever fleetctl says); `remediation` its failed or stuck runbook
    run (remediation_condition: it waits for an operator), right after its state's;
    `stale` the age judgement of its newest check (stale_evidence);
    `stalled` the stall watcher's (fleetctl.nodes.stalls): its workflow acts on nothing now,
    so whatever else the evidence says, an XID would not drain it. A node out of service
    (draining, maintenance, RMA, retired) carries that (`OUT_OF_SERVICE`), after those two,
    since `state_since`, for the cause that took it there; a retired node nothing else."""
    if state == NodeState.RETIRED.value:
        return [Condition(OUT_OF_SERVICE[state], last_cause or state, state_since)]
    found: list[Condition] = []
    if stalled is not None:
        found.append(stalled)
    if suspect is not None:
        found.append(suspect)
    if state in OUT_OF_SERVICE:
        found.append(Condition(OUT_OF_SERVICE[state], last_cause or state, state_since))
    elif NodeState(state).not_yet_admitted:  # not Ready until admission lets it into production
        found.append(Condition("NotAdmitted", f"{state}: not yet admitted to production", state_since))
    if remediation is not None:
        found.append(remediation)
    newest = checks[0] if checks else None
    if newest is not None and newest.status == "error" and newest.error_kind in UNREACHABLE_KINDS:
        found.append(Condition("Unreachable", newest.reason, newest.since))
    failed = [c for c in checks if c.status == "fail"]
    if failed:
        found.append(
            Condition("CheckFailed", "; ".join(f"{c.check}: {c.reason}" for c in failed), min(c.since for c in failed))
        )
    errored = [
        c
        for c in checks
        if c.status == "error"
        and not (any(f.type == "Unreachable" for f in found) and c.error_kind in UNREACHABLE_KINDS)
    ]
    if errored:
        found.append(
            Condition("CheckError", "; ".join(f"{c.check}: {c.reason}" for c in errored), min(c.since for c in errored))
        )
    if drained_outside is not None:
        found.append(drained_outside)
    if held is not None:
        found.append(Condition("DrainHeld", held.reason, held.since))
    if "straggler" in last_cause:
        found.append(Condition("StragglerSuspected", last_cause))
    # `Unchecked` is said of a node no check has ever judged, `Stale` of one whose newest
    # check is old: two facts, two words.
    if not checks and NodeState(state).in_service:
        found.append(Condition("Unchecked", "no check has run on the node since it entered service"))
    elif stale is not None:
        found.append(stale)
    return found


def stale_evidence(
    state: str,
    checks: Sequence[CheckSummary],
    agent_seen_at: datetime | None,
    now: datetime,
    sweep_every_s: float | None,
    agent_silence_s: float,
    jobs: Sequence[str] | None = None,
) -> Condition | None:
    """`Stale` for a node in service whose newest evidence (its latest check run) is older
    than its fleet's sweep interval while no agent reports (never heard, or silent past
    `agent_silence_s`): what it says may no longer be true, so it is not Ready. None when
    the evidence is fresh, an agent reports, the node was never checked (`Unchecked`), or no
    sweep interval is known (`sweep_every_s` None: no sweep is scheduled, or Temporal did not
    say), since then nothing says how old is too old. The reason says when it was last
    checked and, where `jobs` (the jobs running on it; None: not known) name one, why not
    since: a sweep checks only a node its scheduler holds idle. `since` is that last check."""
    if not NodeState(state).in_service or not checks or sweep_every_s is None:
        return None
    if agent_seen_at is not None and (now - agent_seen_at).total_seconds() <= agent_silence_s:
        return None
    newest = max(c.at for c in checks)
    age_s = (now - newest).total_seconds()
    if age_s <= sweep_every_s:
        return None
    why_not = f"; not since: busy with {_jobs_words(jobs)}" if jobs else ""
    return Condition(
        "Stale",
        f"last checked {_age(age_s)} ago, at {newest:%Y-%m-%dT%H:%M}Z (sweep every {_age(sweep_every_s)}, "
        f"no agent reports){why_not}",
        newest,
        _age(age_s),
    )


def _jobs_words(jobs: Sequence[str]) -> str:
    shown = ", ".join(jobs[:3])
    return f"job{'s' if len(jobs) > 1 else ''} {shown}" + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")


def _age(seconds: float) -> str:
    seconds = int(seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


def health_word(state: str, found: Sequence[Condition], checks: Sequence[CheckSummary]) -> str:
    """The HEALTH cell: the condition types (with how many checks fail or error, how old
    stale evidence is; `node show` says more), or Ready. A node is never Ready
    without a check behind it (no `pass` without evidence), nor out of service."""
    if found:
        words = []
        for c in found:
            if c.type in ("CheckFailed", "CheckError"):
                count = sum(1 for s in checks if s.status == ("fail" if c.type == "CheckFailed" else "error"))
                words.append(f"{c.type}({count})")
            elif c.health_note:
                words.append(f"{c.type}({c.health_note})")
            else:
                words.append(c.type)
        return ",".join(words)
    if not checks:
        return "-"
    return READY


def reason(state: str, last_cause: str, last_actor: str, last_at: datetime | None, held: DrainHeld | None) -> str:
    """The REASON cell, as `sinfo -R` and scontrol's `Reason=... [user@time]`: why a node is
    out of service, or why its drain is held; empty for a node that is simply in service."""
    if held is not None:
        return f"drain held: {held.reason}"
    if NodeState(state).in_service or last_at is None or not last_cause:
        return ""
    return f"{last_cause} [{last_actor}@{last_at:%Y-%m-%dT%H:%M}]"


@dataclass(frozen=True)
class RunInFlight:
    """A node's live runbook run still going: which, and how many of its steps have finished."""

    run_key: str
    runbook: str
    steps_done: int
    last_step: str = ""  # the name of the last step it finished ("" before the first)


def doing(
    activity: str,
    jobs: Sequence[str] | None,
    run: RunInFlight | None,
    rmas_held: Sequence[int] = (),
    rmas_open: Sequence[int] = (),
) -> str:
    """What the node is doing now, as `node show` says it after `now:`: what its workflow is
    doing (`activity`: a check, a drain; "" when the workflow is between phases or not
    reached), the RMA it waits on an operator for, its runbook's step in flight, the RMA it is
    out for, the jobs it runs; "idle" only when none of these is so. The workflow alone said
    "idle" of a node running a job or waiting for an operator: its words describe the workflow."""
    parts = [activity] if activity else []
    parts += [f"waiting for an operator on RMA {i}" for i in rmas_held]
    if run is not None:
        after = f", after {run.last_step}" if run.last_step else ""
        parts.append(f"runbook {run.runbook}: step {run.steps_done + 1} of run {run.run_key}{after}")
    parts += [f"in RMA {i} with the vendor" for i in rmas_open]
    if jobs:
        parts.append(f"running {_jobs_words(jobs)}")
    return "; ".join(parts) or "idle"
