"""Fleet reliability from recorded events: MTTF, MTTR, availability, ETTR, stragglers.

The functions here are pure: rows in (the plain dataclasses below), numbers out, with the
window [since, now] and `now` always passed in, never read from a clock. The database
loader that builds those rows is `fleetctl.reliability.metrics_store`; the Prometheus exporter is
`fleetctl.reliability.exporter_server`.

Definitions (what `fleetctl report` prints and the tests compute by hand):

- Time line of a node: its transitions in recorded order (node_events by id). The first
  interval starts at the node's created_at in `new`; each transition ends the interval of
  its from_state and starts one of its to_state; the last runs until `now`. Recorded times
  are made monotonic and capped at `now` (clock jumps: an event timed before the previous
  one, or in the future, gives an empty interval, never a negative one).
- Node-days per state: those intervals clipped to the window, summed per state.
- A failure: a transition out of production that records the fault behind it (its
  `failure`: `xid <code>`, `check <name>`, `straggler <check>` or `health`, written by the
  workflow that drained the node from the event it acted on), or any drain by automation,
  timed inside the window.
  Its cause label is that failure, or `automation` for a drain that records none. A drain
  for planned work (`fleetctl node drain --maintenance`, the default: failure `maintenance`;
  or an operator's drain that records nothing) is not a failure.
- MTTF: production node-hours in the window / failures in the window (none without failures).
- MTTR: mean time from a failure (leaving production) to returning to production, over the
  returns inside the window (nodes that have not returned do not count; a return from planned
  work is no repair and does not count).
- Availability: production time / time in the states that are capacity
  (`NodeState.is_capacity`: production, draining, maintenance, rma) in the window. Time
  before admission (new, firmware, burn-in, admission) and after retirement is not
  capacity that was lost. What was lost is split: planned (capacity time out of production
  since a planned drain, until the node is back or a check fails it on its way back) and
  unplanned (the rest: faults); availability excluding planned work is production /
  (production + unplanned).
- Times remediated (`lemons.LemonPolicy.times_remediated`, one figure wherever it is shown:
  the RMA reason, the report, `node show`): within the lemon window (default 7 days) ending
  at a moment, the node's live remediation runs begun, or its entries into maintenance to be
  remediated (`lemons.remediation_entries`: not the entry that ends a planned drain),
  whichever is more.
- Lemon node: one remediated at least the lemon threshold (default 3) times within a lemon
  window ending inside the report window; the report shows the most times remediated in
  such a window, the figure its RMA reason gave when it was sent away.
- Job ETTR (Meta's definition, Kokolis et al. 2024, arXiv:2410.21680): productive time /
  wall time over the job's life up to `now`, productive = wall - downtime during restarts
  - work lost since the last checkpoint. Downtime of a restart runs from the fault to the
  job running again (to the job's end or `now` when it never ran again); overlapping
  restarts count once. Work lost is known only for a restart after a recorded checkpoint
  (`fleetctl job checkpoint`): the job went back to the last checkpoint at or before the
  fault, losing the time from it, or from its previous resumption if later, to the fault.
  A job with a restart whose fault came before any checkpoint it reported has no measured
  ETTR (None, with why): what that restart lost is not known. Its lower bound takes each
  such restart to have lost everything since the job's start or its previous resumption.
  A requeue by the scheduler alone (counted, not timed) adds no downtime. Fleet ETTR is
  the wall-time-weighted mean: sum of productive time / sum of wall time over the jobs
  that ran inside the window; None when one of them has none, beside the fleet's lower
  bound (the same mean of the jobs' lower bounds).
- Restart latency: fault seen to job running again, for restarts whose fault is inside the
  window and that ran again.
- Interruptions by cause: each restart fleetctl ran, labelled from its cause as failures
  are (`xid <code>`, `check <name>`, `health`; `operator` for a restart by hand, else
  `other`); each requeue the scheduler counted beyond fleetctl's restarts (`scheduler
  requeue`); a job that ended because its node failed or it was preempted (`node_fail`,
  `preempted`, `boot_fail`). Jobs that ran inside the window.
- Failure rate per GPU: failures in the window / production GPU-hours (each node's
  production hours times its profile's GPU count). MTTF at a job size of G GPUs: 1 / (G x
  that rate), as a G-GPU job fails when any of its GPUs' nodes does.
- Checkpoint interval: the median gap between consecutive checkpoints of a job, pooled
  over every job that reported two or more.
- Predicted ETTR (the first-order model of Kokolis et al. 2024, checkpoint writes taken as
  free): 1 - G x rate x (restart time + checkpoint interval / 2), at least 0: each failure
  costs the restart time plus, on average, half a checkpoint interval of work. Per job, G
  is the job's GPUs, the interval its own (the fleet's when it reported fewer than two
  checkpoints) and the restart time the fleet's mean restart latency; for the fleet, the
  wall-time-weighted mean of the jobs' predictions, beside the measured fleet ETTR.
- Automated removal: a drain by automation (trigger `drain`, actor_kind `automation`) out
  of production, timed inside the window. Its rule is its failure label (`failure_label`).
- Outcome of an automated removal, judged at `now` from the node's transitions after the
  drain up to its next entry into production:
  - confirmed: the node went to RMA and the vendor replaced a part (`rma close --replaced`),
    or it was retired, before it returned to production; or it returned to production after a
    repair: a live remediation run's step with a repairing
    action (`REPAIRING_ACTIONS`: gpu_reset, reboot) that passed between the drain and the
    return, or a firmware update (the node entered the `firmware` state) in that span. The
    return itself is the proof the node then passed its checks (admission, or an operator's
    undrain). A repair that was not needed (a ladder that always resets first) cannot be
    told from one that fixed the node: it counts as confirmed.
  - unchanged: the node returned to production with no repair in between (a recheck or
    burn-in passed on the node as it was, or an operator undrained it), or its RMA came back
    with no fault found (`rma close --no-fault-found`): a likely false alarm.
  - open: neither yet (still draining, in maintenance, burn-in or admission, or in an RMA
    not yet closed; an RMA with no record is open too). The RMA judged is the node's first
    opened at or after the drain.
- Rule precision: confirmed / (confirmed + unchanged) over the rule's removals in the
  window; None when none is resolved. A rule is usually wrong when its precision is under
  `USUALLY_WRONG_BELOW` over at least `USUALLY_WRONG_MIN_RESOLVED` resolved removals.
- Stragglers: per GPU profile, each node's latest value of a straggler metric (NCCL
  all-reduce busbw_gbps, HPL gflops_per_gpu) judged against the profile's median by
  `checks.stragglers.find_stragglers`. Retired nodes are left out.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any

from fleetctl.checks.stragglers import STRAGGLER_METRICS, find_stragglers
from fleetctl.jobs.placement import FLEET_WIDE, IN_ISLAND, NOT_PLACED
from fleetctl.nodes.lifecycle import NodeState
from fleetctl.remediation.drains import PLANNED, DrainKind, drain_kind, is_planned_drain
from fleetctl.remediation.lemons import LemonPolicy, remediation_entries
from fleetctl.remediation.rma import RMA_NO_FAULT_FOUND, RMA_OPEN, RMA_REPLACED

PRODUCTION = NodeState.PRODUCTION.value


@dataclass(frozen=True)
class NodeRecord:
    name: str
    rack: str
    profile: str
    created_at: datetime
    gpus: int = 0  # the profile's GPU count (0: unknown, no GPU-hours)


@dataclass(frozen=True)
class Transition:
    node: str
    from_state: str
    to_state: str
    at: datetime
    trigger: str = ""
    cause: str = ""
    actor_kind: str = "operator"
    failure: str = ""


@dataclass(frozen=True)
class NodeHistory:
    node: NodeRecord
    transitions: tuple[Transition, ...]  # in recorded order
    # When each live remediation run of the node began (for the lemon figure).
    remediation_starts: tuple[datetime, ...] = ()
    # When each repairing step (REPAIRING_ACTIONS) of a live remediation run passed.
    repairs: tuple[datetime, ...] = ()
    # The node's RMAs: when each was opened and how it ended (fleetctl.remediation.rma.rma_outcome).
    rmas: tuple[RmaOutcome, ...] = ()


@dataclass(frozen=True)
class RmaOutcome:
    opened_at: datetime
    outcome: str  # rma.RMA_OPEN, RMA_REPLACED or RMA_NO_FAULT_FOUND


@dataclass(frozen=True)
class Interval:
    state: str
    start: datetime
    end: datetime
    # Out of production for planned work: since a planned drain (is_planned_drain), until the
    # node is back in production or a check fails it (then the time is the fault's).
    planned: bool = False

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()


@dataclass(frozen=True)
class RestartRecord:
    fault_seen_at: datetime
    running_at: datetime | None
    status: str = "succeeded"
    cause: str = ""
    failure: str = ""  # the failure it is counted under (job_restarts.failure), "" for none


@dataclass(frozen=True)
class JobRecord:
    job_id: str
    started_at: datetime | None
    ended_at: datetime | None = None
    last_checkpoint_at: datetime | None = None
    restarts: tuple[RestartRecord, ...] = ()
    name: str = ""
    checkpoints: tuple[datetime, ...] = ()  # every checkpoint the job reported
    gpus: int = 0  # GPUs the job runs on (nodes x GPUs per node)
    scheduler_restarts: int = 0  # requeues the scheduler counted, fleetctl's included
    state: str = ""  # the scheduler's state of the job (its last)


@dataclass(frozen=True)
class JobGoodput:
    job_id: str
    wall_seconds: float
    downtime_seconds: float
    lost_seconds: float  # the work lost that is known: since a checkpoint the job reported
    # Restarts with no checkpoint reported at or before their fault: what each lost is not
    # known, so the job's ETTR is not measured. At most it lost everything since the job's
    # start or its previous resumption (the job checkpoints nothing).
    unmeasured_restarts: int = 0
    unknown_lost_at_most: float = 0.0

    @property
    def measured(self) -> bool:
        return self.unmeasured_restarts == 0

    @property
    def productive_seconds(self) -> float:
        """Productive time with the unknown losses taken as none (exact when measured)."""
        return max(0.0, self.wall_seconds - self.downtime_seconds - self.lost_seconds)

    @property
    def productive_at_least(self) -> float:
        return max(0.0, self.productive_seconds - self.unknown_lost_at_most)

    @property
    def ettr(self) -> float | None:
        """The measured ETTR; None when a restart's lost work is not known (`ettr_at_least`)."""
        return self.productive_seconds / self.wall_seconds if self.measured else None

    @property
    def ettr_at_least(self) -> float:
        """A lower bound of the ETTR: every unknown loss at its most (the ETTR when measured)."""
        return self.productive_at_least / self.wall_seconds

    @property
    def ettr_unknown(self) -> str:
        """Why the ETTR is not measured, in words; "" when it is."""
        if self.measured:
            return ""
        return (
            f"{self.unmeasured_restarts} of its restarts came with no checkpoint reported before the fault: "
            "the work lost is not known"
        )


@dataclass(frozen=True)
class CheckSample:
    """One check run's metrics on one node; samples are given oldest first."""

    node: str
    profile: str
    check: str
    metrics: Mapping[str, Any]


@dataclass(frozen=True)
class FleetHistory:
    """What the report computes on: every node's history, the jobs, the straggler checks' runs."""

    nodes: list[NodeHistory]
    jobs: list[JobRecord]
    check_samples: list[CheckSample]


@dataclass(frozen=True)
class Summary:
    nodes: int
    production_hours: float
    failures: int
    mttf_hours: float | None
    repairs: int
    mttr_hours: float | None
    availability: float | None
    node_days: dict[str, float]
    causes: dict[str, int]
    production_gpu_hours: float = 0.0
    # Availability's loss split: capacity hours out of production for planned work, and for
    # faults; availability + the two as shares of capacity time = 1.
    planned_out_hours: float = 0.0
    unplanned_out_hours: float = 0.0
    # Availability with planned work left out: production / (production + unplanned out).
    availability_unplanned: float | None = None


# -- time lines ------------------------------------------------------------------------------


def timeline(created_at: datetime, transitions: Iterable[Transition], now: datetime) -> list[Transition]:
    """The transitions in recorded order, their times made monotonic and no later than `now`."""
    floor = min(created_at, now)
    out = []
    for t in transitions:
        at = min(max(t.at, floor), now)
        out.append(replace(t, at=at))
        floor = at
    return out


def intervals(created_at: datetime, events: Sequence[Transition], now: datetime) -> list[Interval]:
    """The states a node was in, from created_at to `now`; `events` from `timeline`."""
    start, state, planned = min(created_at, now), NodeState.NEW.value, False
    out = []
    for t in events:
        out.append(Interval(t.from_state, start, t.at, planned))
        start, state = t.at, t.to_state
        if t.from_state == PRODUCTION:
            planned = is_planned_drain(t.from_state, t.to_state, t.failure, t.actor_kind)
        elif t.to_state == NodeState.MAINTENANCE.value and t.from_state != NodeState.DRAINING.value:
            planned = False  # a check failed it on its way back (burn-in, admission): a fault now
    out.append(Interval(state, start, now, planned))
    return [i for i in out if i.end > i.start]


def clip(spans: Iterable[Interval], since: datetime, until: datetime) -> list[Interval]:
    out = []
    for i in spans:
        start, end = max(i.start, since), min(i.end, until)
        if end > start:
            out.append(Interval(i.state, start, end, i.planned))
    return out


def out_of_production_seconds(spans: Iterable[Interval]) -> tuple[float, float]:
    """Capacity time out of production, (planned, unplanned): what planned work cost, and
    what faults did (NodeState.is_capacity, as availability counts it)."""
    planned = unplanned = 0.0
    for i in spans:
        if i.state != PRODUCTION and NodeState(i.state).is_capacity:
            if i.planned:
                planned += i.seconds
            else:
                unplanned += i.seconds
    return planned, unplanned


def seconds_by_state(spans: Iterable[Interval]) -> dict[str, float]:
    totals: dict[str, float] = defaultdict(float)
    for i in spans:
        totals[i.state] += i.seconds
    return dict(totals)


def states_at(spans_by_node: Mapping[str, Sequence[Interval]], times: Sequence[datetime]) -> dict[str, list[int]]:
    """How many nodes were in each state at each of `times` (for the state-over-time plot)."""
    counts: dict[str, list[int]] = defaultdict(lambda: [0] * len(times))
    for spans in spans_by_node.values():
        for k, t in enumerate(times):
            for i in spans:
                if i.start <= t < i.end:
                    counts[i.state][k] += 1
                    break
    return dict(counts)


# -- failures and repairs ------------------------------------------------------------------------


def is_failure(t: Transition) -> bool:
    if t.from_state != PRODUCTION or t.to_state == PRODUCTION or t.failure == PLANNED:
        return False
    return bool(t.failure) or (t.actor_kind == "automation" and t.trigger == "drain")


def failure_label(t: Transition) -> str:
    return t.failure or "automation"


# The bounded classes of why a node left production (the exporter's `cause` label): no free
# text, no code, so a new fault makes no new series.
CAUSE_CLASSES = tuple(kind.value for kind in DrainKind)


def cause_class(t: Transition) -> str:
    """The class of a move out of production: `maintenance` for planned work, the kind of its
    failure (`xid`, `check`, `straggler`, `health`, `operator`), `automation` for an automated
    drain that records none, else `other` (an operator's retirement, ...). A failure that names
    no drain kind is a ValueError."""
    if is_planned_drain(t.from_state, t.to_state, t.failure, t.actor_kind):
        return DrainKind.MAINTENANCE.value
    if not is_failure(t):
        return DrainKind.OTHER.value
    return drain_kind(t.failure).value if t.failure else DrainKind.AUTOMATION.value


def failures(events: Iterable[Transition], since: datetime, until: datetime) -> list[Transition]:
    return [t for t in events if is_failure(t) and since <= t.at <= until]


def repair_seconds(events: Iterable[Transition], since: datetime, until: datetime) -> list[float]:
    """For each return to production inside the window after a failure: how long the node
    had been out. A return from planned work (a maintenance drain) is no repair."""
    out, left = [], None
    for t in events:
        if t.from_state == PRODUCTION and t.to_state != PRODUCTION:
            left = t.at if is_failure(t) else None
        elif t.to_state == PRODUCTION and left is not None:
            if since <= t.at <= until:
                out.append((t.at - left).total_seconds())
            left = None
    return out


def mttf_hours(production_seconds: float, failure_count: int) -> float | None:
    return production_seconds / 3600 / failure_count if failure_count else None


def availability(by_state: Mapping[str, float]) -> float | None:
    capacity = sum(seconds for state, seconds in by_state.items() if NodeState(state).is_capacity)
    return by_state.get(PRODUCTION, 0.0) / capacity if capacity > 0 else None


def summarise(histories: Sequence[NodeHistory], since: datetime, now: datetime) -> Summary:
    by_state: dict[str, float] = defaultdict(float)
    failed: list[Transition] = []
    repairs: list[float] = []
    gpu_seconds = planned = unplanned = 0.0
    for h in histories:
        events = timeline(h.node.created_at, h.transitions, now)
        spans = clip(intervals(h.node.created_at, events, now), since, now)
        for state, seconds in seconds_by_state(spans).items():
            by_state[state] += seconds
            if state == PRODUCTION:
                gpu_seconds += seconds * h.node.gpus
        out = out_of_production_seconds(spans)
        planned, unplanned = planned + out[0], unplanned + out[1]
        failed += failures(events, since, now)
        repairs += repair_seconds(events, since, now)
    production = by_state.get(PRODUCTION, 0.0)
    return Summary(
        nodes=len(histories),
        production_hours=by_state.get(PRODUCTION, 0.0) / 3600,
        failures=len(failed),
        mttf_hours=mttf_hours(by_state.get(PRODUCTION, 0.0), len(failed)),
        repairs=len(repairs),
        mttr_hours=sum(repairs) / len(repairs) / 3600 if repairs else None,
        availability=availability(by_state),
        node_days={state: seconds / 86400 for state, seconds in sorted(by_state.items())},
        causes=dict(Counter(failure_label(t) for t in failed).most_common()),
        production_gpu_hours=gpu_seconds / 3600,
        planned_out_hours=planned / 3600,
        unplanned_out_hours=unplanned / 3600,
        availability_unplanned=production / (production + unplanned) if production + unplanned > 0 else None,
    )


def lemon_nodes(
    histories: Sequence[NodeHistory],
    since: datetime,
    now: datetime,
    threshold: int = 3,
    window: timedelta = timedelta(days=7),
) -> dict[str, int]:
    """Lemon nodes and the most times each was remediated within one lemon window ending
    inside [since, now] (`LemonPolicy.times_remediated`, the figure of the RMA reason)."""
    policy = LemonPolicy(threshold, window)
    lemons = {}
    for h in histories:
        entries = remediation_entries(timeline(h.node.created_at, h.transitions, now))
        # The figure only grows at a run's start or an entry: its peak is at one of them.
        moments = [at for at in (*entries, *h.remediation_starts) if since <= at <= now]
        worst = max((policy.times_remediated(h.remediation_starts, entries, at) for at in moments), default=0)
        if worst >= policy.threshold:
            lemons[h.node.name] = worst
    return lemons


# -- rule precision ------------------------------------------------------------------------------

# Runbook actions that change the node: a node back in service after one was repaired.
REPAIRING_ACTIONS = frozenset({"gpu_reset", "reboot"})
CONFIRMED, UNCHANGED, OPEN = "confirmed", "unchanged", "open"
USUALLY_WRONG_BELOW = 0.5
USUALLY_WRONG_MIN_RESOLVED = 3
_BY_RMA = {RMA_REPLACED: CONFIRMED, RMA_NO_FAULT_FOUND: UNCHANGED, RMA_OPEN: OPEN}


@dataclass(frozen=True)
class Removal:
    node: str
    rule: str
    at: datetime
    outcome: str  # CONFIRMED, UNCHANGED or OPEN


@dataclass(frozen=True)
class RulePrecision:
    rule: str
    removals: int
    confirmed: int
    unchanged: int
    open: int

    @property
    def precision(self) -> float | None:
        resolved = self.confirmed + self.unchanged
        return self.confirmed / resolved if resolved else None

    @property
    def usually_wrong(self) -> bool:
        precision = self.precision
        return (
            precision is not None
            and precision < USUALLY_WRONG_BELOW
            and self.confirmed + self.unchanged >= USUALLY_WRONG_MIN_RESOLVED
        )


def is_automated_removal(t: Transition) -> bool:
    return t.trigger == "drain" and t.actor_kind == "automation" and t.from_state == PRODUCTION


def removal_outcome(
    after: Sequence[Transition], drained_at: datetime, repairs: Sequence[datetime], rmas: Sequence[RmaOutcome] = ()
) -> str:
    """The outcome of a removal at `drained_at` from the node's transitions `after` it and
    its RMAs: one that went to RMA is judged by the first RMA opened since the drain."""
    firmware = False
    for t in after:
        if t.to_state == NodeState.RMA.value:
            rma = min((r for r in rmas if r.opened_at >= drained_at), key=lambda r: r.opened_at, default=None)
            return _BY_RMA[rma.outcome] if rma is not None else OPEN
        if t.to_state == NodeState.RETIRED.value:
            return CONFIRMED
        firmware = firmware or t.to_state == NodeState.FIRMWARE.value
        if t.to_state == PRODUCTION:
            repaired = firmware or any(drained_at <= at <= t.at for at in repairs)
            return CONFIRMED if repaired else UNCHANGED
    return OPEN


def removals(history: NodeHistory, since: datetime, now: datetime) -> list[Removal]:
    """The node's automated removals inside [since, now], each with its outcome at `now`."""
    events = timeline(history.node.created_at, history.transitions, now)
    return [
        Removal(
            history.node.name,
            failure_label(t),
            t.at,
            removal_outcome(events[k + 1 :], t.at, history.repairs, history.rmas),
        )
        for k, t in enumerate(events)
        if is_automated_removal(t) and since <= t.at <= now
    ]


def rule_precision(histories: Iterable[NodeHistory], since: datetime, now: datetime) -> list[RulePrecision]:
    """Each rule's removals in the window by outcome, most removals first."""
    by_rule: dict[str, Counter[str]] = defaultdict(Counter)
    for h in histories:
        for r in removals(h, since, now):
            by_rule[r.rule][r.outcome] += 1
    rows = [RulePrecision(rule, sum(c.values()), c[CONFIRMED], c[UNCHANGED], c[OPEN]) for rule, c in by_rule.items()]
    return sorted(rows, key=lambda r: (-r.removals, r.rule))


# -- jobs ----------------------------------------------------------------------------------------

# Why a job is pending, as a bounded class (the exporter's `reason` label): waiting in its
# scheduler's queue with no restart of fleetctl's under way (`queued`), or restarted off bad
# nodes and waiting to run again where the restart asked (fleetctl.jobs.placement:
# `restart_in_island` on named nodes of its island, `restart_fleet_wide` on any healthy node,
# `restart_unplaced` wherever the scheduler puts it). The words are the restart's
# placement_detail (`fleetctl job show`).
PENDING_REASONS = ("queued", "restart_in_island", "restart_fleet_wide", "restart_unplaced")
_PENDING_BY_PLACEMENT = {
    IN_ISLAND: "restart_in_island",
    FLEET_WIDE: "restart_fleet_wide",
    NOT_PLACED: "restart_unplaced",
}


def pending_reason(restart_placement: str | None) -> str:
    """The class of why a pending job waits, from the placement of its restart in progress
    (None: none in progress); a placement this version does not know waits as unplaced."""
    if restart_placement is None:
        return "queued"
    return _PENDING_BY_PLACEMENT.get(restart_placement, "restart_unplaced")


def job_goodput(job: JobRecord, now: datetime) -> JobGoodput | None:
    """The job's wall, down and lost time up to `now`; None for a job that never ran."""
    if job.started_at is None:
        return None
    end = min(job.ended_at or now, now)
    start = min(job.started_at, end)
    wall = (end - start).total_seconds()
    if wall <= 0:
        return None
    downtime = lost = unknown_at_most = 0.0
    unmeasured = 0
    resumed: datetime | None = None  # when the job last came back from a restart
    checkpoints = job_checkpoints(job)
    for r in sorted(job.restarts, key=lambda r: r.fault_seen_at):
        fault = min(max(r.fault_seen_at, resumed or start), end)
        back = min(max(r.running_at or end, fault), end)
        downtime += (back - fault).total_seconds()
        checkpoint = last_checkpoint(checkpoints, fault)
        if checkpoint is not None:
            lost += (fault - max(checkpoint, resumed or checkpoint)).total_seconds()
        else:  # nothing says where the job went back to: at worst, its start
            unmeasured += 1
            unknown_at_most += (fault - (resumed or start)).total_seconds()
        resumed = back
    return JobGoodput(job.job_id, wall, downtime, lost, unmeasured, unknown_at_most)


def job_checkpoints(job: JobRecord) -> list[datetime]:
    """Every checkpoint of the job in time order (last_checkpoint_at among them)."""
    extra = [job.last_checkpoint_at] if job.last_checkpoint_at is not None else []
    return sorted(set(job.checkpoints) | set(extra))


def last_checkpoint(checkpoints: Sequence[datetime], at: datetime) -> datetime | None:
    """The latest of `checkpoints` (sorted) at or before `at`."""
    index = bisect_right(checkpoints, at)
    return checkpoints[index - 1] if index else None


def checkpoint_interval_seconds(jobs: Iterable[JobRecord]) -> float | None:
    """The median gap between consecutive checkpoints, pooled over the jobs' gaps."""
    gaps = [(b - a).total_seconds() for job in jobs for a, b in pairwise(job_checkpoints(job))]
    return percentile(gaps, 0.5) if gaps else None


_SCHEDULER_END_CAUSES = frozenset({"node_fail", "preempted", "boot_fail"})


def restart_label(restart: RestartRecord) -> str:
    """The cause label of a restart: the failure it records (`xid <code>`, `check <name>`,
    `straggler <check or metric>`, `health`, `operator`), else `other`."""
    return restart.failure or "other"


def interruptions(job: JobRecord) -> list[str]:
    """The cause label of each interruption of the job (see the definitions above)."""
    labels = [restart_label(r) for r in job.restarts]
    labels += ["scheduler requeue"] * max(0, job.scheduler_restarts - len(job.restarts))
    if job.state in _SCHEDULER_END_CAUSES:
        labels.append(job.state)
    return labels


def failure_rate_per_gpu_hour(production_gpu_hours: float, failure_count: int) -> float | None:
    return failure_count / production_gpu_hours if production_gpu_hours > 0 else None


def mttf_at_job_size_hours(rate_per_gpu_hour: float | None, job_gpus: int) -> float | None:
    if rate_per_gpu_hour is None or rate_per_gpu_hour <= 0 or job_gpus <= 0:
        return None
    return 1 / (job_gpus * rate_per_gpu_hour)


def predicted_ettr(
    job_gpus: int, rate_per_gpu_hour: float | None, checkpoint_interval_s: float | None, restart_s: float | None
) -> float | None:
    """Meta's first-order model; None when an input is unknown."""
    if rate_per_gpu_hour is None or checkpoint_interval_s is None or restart_s is None or job_gpus <= 0:
        return None
    failures_per_second = job_gpus * rate_per_gpu_hour / 3600
    return max(0.0, 1 - failures_per_second * (restart_s + checkpoint_interval_s / 2))


def ran_in_window(job: JobRecord, since: datetime, now: datetime) -> bool:
    return job.started_at is not None and job.started_at <= now and (job.ended_at is None or job.ended_at >= since)


def fleet_ettr(goodputs: Iterable[JobGoodput]) -> float | None:
    """The measured fleet ETTR; None when a job's is not measured (fleet_ettr_at_least)."""
    goodputs = list(goodputs)
    wall = sum(g.wall_seconds for g in goodputs)
    if wall <= 0 or not all(g.measured for g in goodputs):
        return None
    return sum(g.productive_seconds for g in goodputs) / wall


def fleet_ettr_at_least(goodputs: Iterable[JobGoodput]) -> float | None:
    """A lower bound of the fleet ETTR, each job's unknown losses at their most."""
    goodputs = list(goodputs)
    wall = sum(g.wall_seconds for g in goodputs)
    return sum(g.productive_at_least for g in goodputs) / wall if wall > 0 else None


def restart_latencies(jobs: Iterable[JobRecord], since: datetime, now: datetime) -> list[float]:
    return [
        max(0.0, (r.running_at - r.fault_seen_at).total_seconds())
        for job in jobs
        for r in job.restarts
        if r.running_at is not None and since <= r.fault_seen_at <= now
    ]


def percentile(values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks; `values` non-empty, q in [0, 1]."""
    ordered = sorted(values)
    rank = q * (len(ordered) - 1)
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def distribution(values: Sequence[float]) -> dict[str, float | int | None]:
    if not values:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    return {
        "count": len(values),
        "mean": sum(values) / len(values),
        "p50": percentile(values, 0.5),
        "p90": percentile(values, 0.9),
        "p99": percentile(values, 0.99),
        "max": max(values),
    }


# -- stragglers ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class StragglerGroup:
    check: str
    metric: str
    profile: str
    median: float | None
    verdicts: dict[str, Any] = field(default_factory=dict)  # node -> checks.stragglers.StragglerVerdict


def stragglers(samples: Iterable[CheckSample]) -> list[StragglerGroup]:
    """Each node's latest value of every straggler metric, judged within its profile."""
    latest: dict[tuple[str, str, str], dict[str, float]] = defaultdict(dict)
    for s in samples:
        for check, metric, _ in STRAGGLER_METRICS:
            value = s.metrics.get(metric)
            if s.check == check and isinstance(value, (int, float)) and not isinstance(value, bool):
                latest[(check, metric, s.profile)][s.node] = float(value)
    higher = {(check, metric): h for check, metric, h in STRAGGLER_METRICS}
    groups = []
    for (check, metric, profile), values in sorted(latest.items()):
        verdicts = find_stragglers(values, higher_is_better=higher[(check, metric)])
        median = next((v.median for v in verdicts.values()), None)
        groups.append(StragglerGroup(check, metric, profile, median, dict(sorted(verdicts.items()))))
    return groups
