"""What crosses Temporal for a node: its NodeLifecycle workflow and the node activities
(checks, admission, health events, the scheduler, facts), the CapacityGuard and the
ActiveCheckSweep.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from fleetctl.nodes.capacity import FleetSnapshot, GuardPolicy, RemovalRequest
from fleetctl.nodes.lifecycle import NodeState

# Defaults of a node workflow's timing (its state carries them, so tests can shorten them).
# After the cordon activity's own retries are spent (about 15 s), wait this long before the next round.
SCHEDULER_RETRY_S = 60.0
# How long a non-critical drain waits for running jobs to finish before it gives up waiting
# and lets remediation start anyway (the scheduler has cordoned the node: no new work lands).
DRAIN_JOB_WAIT_S = 2 * 3600.0
DRAIN_JOB_POLL_S = 30.0
# Temporal refuses a run's signals past 10,000 (the server's maximumSignalsPerExecution): a
# node's workflow continues as new after this many, so the next event, an XID 79 among them,
# lands in a run that takes it. The server counts a signal when it accepts it, the workflow when
# it runs: a worker behind a flood lags, so the run continues well before the cap (8,000 of slack).
SIGNALS_PER_RUN = 2_000


@dataclass(kw_only=True)
class TransitionRequest:
    """Move a node: NodeLifecycle.transition's input, from an operator's command or (through
    the command_node activity) from another workflow. Keyword-only, so that no caller gets
    an actor kind it did not say."""

    trigger: str
    actor: str
    actor_kind: str = "operator"
    cause: str = ""
    # Stable per request (e.g. "<workflow id>/<step>"): a resent request is answered once.
    request_id: str = ""
    # What the node did wrong (fleetctl.remediation.events.Event.to_dict()); with a drain, it picks
    # the runbook that remediates the node once drained. None: an operator's own reason.
    event: dict[str, Any] | None = None
    # The node whose workflow is asked; its own workflow knows who it is and ignores this.
    node: str = ""
    # An automated drain's capacity-guard grant (fleetctl.nodes.capacity.grant_for): without one
    # that names this node at its current version, the node's workflow refuses the drain.
    grant: str = ""


@dataclass
class TransitionResult:
    node: str
    from_state: str
    to_state: str
    state_version: int
    trigger: str
    actor: str
    # True when this answer came from the idempotency guard, not a new transition.
    repeated: bool = False


@dataclass
class NodeCommandOutcome:
    """How a node's workflow answered a TransitionRequest sent by another workflow."""

    node: str
    accepted: bool
    from_state: str = ""
    to_state: str = ""
    message: str = ""


@dataclass
class PhaseRequest:
    """`admit` (burn-in, admission, production) or `recheck` (run a suite, judge, maybe drain)."""

    actor: str
    suite: str = "burn-in"
    request_id: str = ""


@dataclass
class PhaseAccepted:
    node: str
    kind: str
    suite: str
    queued_behind: int


@dataclass
class HealthEventInput:
    node: str
    source: str  # "xid", "log", "operator"
    code: int | None = None
    message: str = ""
    actor: str = ""
    # Unique per event (the CLI makes one; a log line's hash for --from-log), so a resent
    # signal is recorded once.
    event_id: str = ""
    at: float = 0.0  # unix time the fault was seen, by the sender's clock
    # Unix time the node's workflow received it, by the server's clock (set there).
    received_at: float = 0.0
    # info | warning | critical, or "" (not said). The sender's word: a critical event is
    # recorded and acted on ahead of the others queued. An event with a code is judged by
    # the Xid catalog whatever it says; one without (a sampled finding, a signature without
    # an Xid) is judged by it, and a critical one drains the node as a critical Xid does.
    severity: str = ""
    # `at` is the logged record's own time (a kernel line, an alert's start), not the moment
    # the sender sent it: believed however long the event waited (fleetctl.nodes.health.plausible_time).
    at_from_record: bool = False
    # The catalog signature the sender read the fault as (checks/catalog/signatures.tsv), ""
    # for an Xid or none: a fault of an NVLink domain's fabric holds the domain (removals_for).
    signature: str = ""
    # How many times this fault was seen (a minor one repeated, sent or queued once), and when
    # the first and the last of them were (unix seconds; 0: `at`).
    repeat_count: int = 1
    first_seen: float = 0.0
    last_seen: float = 0.0
    # The GPU the fault names, its PCI address as the Xid line prints it (0000:2b:00), "" for
    # none: a code the site's policy scopes to one GPU takes that GPU out, not the node.
    gpu: str = ""


@dataclass
class HealthEventBatch:
    """Health events of one node, recorded (and judged) in order in one activity."""

    node: str
    events: list[HealthEventInput] = field(default_factory=list)


@dataclass
class HealthEventBatchResult:
    # The verdicts the workflow acts on (drain now), each with its event's index in the
    # batch; a burst of minor events answers with none. One verdict per event would be 200
    # dataclasses decoded in one workflow task: over 2 s on a loaded machine, which
    # Temporal's deadlock detector fails (measured in bench/agent.py's flood).
    acted: list[HealthEventVerdict] = field(default_factory=list)
    # Why each event could not be recorded (bad data: the refusal is recorded where fleet
    # status shows it, and the events after it go on), "" for one recorded; in order.
    refusals: list[str] = field(default_factory=list)
    last_reason: str = ""  # the last recorded event's verdict, for the node's last outcome


class WorkKind(str, Enum):
    """What a node's workflow has queued: each kind is one branch of NodeLifecycle._perform."""

    ADMIT = "admit"
    RECHECK = "recheck"
    HEALTH_EVENT = "health_event"
    DRAIN_FOLLOWUP = "drain_followup"
    OPEN_RMA = "open_rma"
    RESUME_IN_SCHEDULER = "resume_in_scheduler"
    REPORT_STATE = "report_state"
    RELEASE_HOLD = "release_hold"


@dataclass
class WorkItem:
    kind: WorkKind
    actor: str = ""
    suite: str = ""
    cause: str = ""
    critical: bool = False
    fault_seen_at: float = 0.0
    event: HealthEventInput | None = None
    remediation_event: dict[str, Any] | None = None
    # When it was queued (workflow time, epoch seconds): the oldest queued item's age is what
    # `Stalled` and the FleetctlQueuedSince search attribute show. 0: queued before this field.
    queued_at: float = 0.0
    # A drain's wait for the node's jobs carried across continue-as-new: how long it has waited.
    drain_waited_s: float = 0.0

    def __post_init__(self) -> None:
        # A kind no branch handles is refused where the item is made (or decoded), never
        # queued to vanish unworked.
        self.kind = WorkKind(self.kind)


@dataclass
class NodeLifecycleState:
    node: str
    state: str = NodeState.NEW.value
    state_version: int = 0
    recent_requests: dict[str, TransitionResult] = field(default_factory=dict)
    work: list[WorkItem] = field(default_factory=list)
    # What the node is doing now, and how the last phase ended (for `node show`/fleet status).
    activity: str = ""
    last_outcome: str = ""
    # Continue-as-new after this many transitions in one run (Temporal may suggest sooner).
    transitions_per_run: int = 500
    # Seconds between rounds of cordon attempts while the scheduler refuses a drain.
    scheduler_retry_s: float = SCHEDULER_RETRY_S
    # How long a non-critical drain waits for the node's jobs, polling this often.
    drain_job_wait_s: float = DRAIN_JOB_WAIT_S
    drain_job_poll_s: float = DRAIN_JOB_POLL_S
    # Continue-as-new after this many signals in one run, well before Temporal refuses them
    # (10,000 per run by default), whatever the node is doing.
    signals_per_run: int = SIGNALS_PER_RUN
    # Minor health events dropped on arrival: repeating none queued, with the queue's bound of
    # distinct ones reached (workflows.definitions.health_queue.QUEUED_MINOR_EVENTS).
    minor_events_dropped: int = 0
    # In a `current` answer only: how many items are queued (`work` holds the first few of them).
    work_total: int = 0


@dataclass
class TransitionRecord:
    node_name: str
    from_state: str
    to_state: str
    trigger: str
    cause: str
    actor: str
    actor_kind: str
    workflow_id: str
    run_id: str
    expected_version: int
    idempotency_key: str
    # The failure this transition records (Event.failure), "" for none: what the report
    # counts, kept as data rather than read back out of the cause's words.
    failure: str = ""


@dataclass
class CheckRequest:
    node: str
    check: str
    suite: str = ""
    # Stable per step of the caller, so a retried activity writes one row.
    run_key: str = ""
    # Executor errors and unjudgeable output are retried this many times in all; only then
    # is the result recorded, as `error` (never as a failed node).
    max_attempts: int = 3


@dataclass
class CheckOutcome:
    node: str
    check: str
    status: str
    reason: str
    metrics: dict[str, Any] = field(default_factory=dict)
    error_kind: str | None = None
    check_run_id: int | None = None


@dataclass
class AdmissionRequest:
    node: str
    check_run_ids: list[int]


@dataclass
class AdmissionVerdict:
    node: str
    passed: bool
    reason: str
    stragglers: list[str] = field(default_factory=list)
    # The check that failed the node ("" when it passed): what remediation matches on.
    failed_check: str = ""


@dataclass
class PeerVerdict:
    """A passed check of a node in service, against its peers of the same profile."""

    node: str
    check: str
    straggler: bool
    reason: str


@dataclass
class HealthEventVerdict:
    node: str
    severity: str
    action: str
    drain_now: bool
    critical: bool
    reason: str
    index: int = -1  # in a HealthEventBatchResult: the event's place in its batch
    # The GPU a drain-worthy fault may take out alone (the policy scopes its code to one GPU and
    # the event names it: fleetctl.nodes.gpu_quarantine.gpu_key), "" for the node.
    gpu: str = ""


@dataclass
class GpuQuarantineRequest:
    """One GPU of a node to take out of its scheduler, the node left in service."""

    node: str
    gpu: str  # gpu_key
    code: int | None = None
    reason: str = ""
    actor: str = ""
    request_id: str = ""  # the event's id: a retried quarantine is recorded once


@dataclass
class GpuQuarantinePlan:
    """What a GPU's fault takes out now (fleetctl.nodes.gpu_quarantine.QuarantineAction's value),
    with what the capacity guard needs to count the GPU."""

    action: str
    gpu: str = ""
    reason: str = ""
    rack: str = ""
    gpus_on_node: int = 0


@dataclass
class AutomationRecord:
    kind: str
    reason: str
    actor: str
    node: str | None = None
    fleet: str = "default"
    key: str = ""


@dataclass
class ReachabilityVerdict:
    node: str
    suspect: bool
    reason: str


@dataclass
class AgentSilence:
    """A sweep's judgement of its fleet's agents (fleetctl.nodes.reachability.judge_agent_silence)."""

    with_agent: int = 0  # production nodes whose agent was heard at least once: the ones judged
    silent: list[ReachabilityVerdict] = field(default_factory=list)  # the suspect among them, the longest silent first
    silent_total: int = 0  # how many are silent: `silent` names at most SILENT_ASKED_PER_SWEEP


@dataclass
class NodeFacts:
    name: str
    rack: str
    profile: str
    scheduler: str
    state: str
    fleet: str = ""  # its `fleet` label, else the worker's fleet (recorded histories predate the field)


@dataclass
class RecordedTransition:
    """A transition written, with the node's inventory facts as of that write (what the
    node's workflow shows in its search attributes)."""

    version: int
    facts: NodeFacts


@dataclass
class SweepScope:
    fleet: str = "default"
    suite: str = "quick"


@dataclass
class RemediationChoice:
    node: str
    event: dict[str, Any]  # fleetctl.remediation.events.Event.to_dict()


@dataclass
class RemediationPlan:
    runbook: dict[str, Any] | None  # Runbook.to_dict(), None when no runbook handles the event
    event: dict[str, Any] = field(default_factory=dict)  # the event in the runbooks' own form
    mode: str = "live"
    critical: bool = False


@dataclass
class SchedulerCordon:
    node: str
    reason: str
    # A critical fault: the scheduler moves work off at once where it can (Kubernetes: the
    # configured critical taint effect, NoExecute by default) rather than only stopping new work.
    critical: bool = False


@dataclass
class SchedulerHold:
    """A hold that fences fleetctl's checks: the node drained in its scheduler with `reason`
    (fleetctl.schedulers.base: BURN_IN_HOLD, check_hold_reason, recheck_hold_reason) for as
    long as they run."""

    node: str
    reason: str


@dataclass
class HeldNode:
    """The node once held: the jobs still running on it (on Kubernetes, its workload pods,
    job or not), read after the hold (what landed before it; nothing can land after). A
    check runs only when there are none."""

    node: str
    running_jobs: list[str] = field(default_factory=list)
    # Not held: another check holds the node already (its hold's reason); none runs beside it.
    held_by: str = ""


@dataclass
class PodDrainRequest:
    """One round of moving a cordoned node's pods off it (schedulers that place pods)."""

    node: str
    critical: bool = False
    # The drain's wait is over: pods whose policy deletes them after the deadline go now.
    deadline_passed: bool = False


@dataclass
class PodDrainOutcome:
    """What the round did (fleetctl.schedulers.base.PodDrainProgress, as lists). `holding`
    keeps the drain open: "namespace/name: why" (waiting by policy, refused by a disruption
    budget, terminating). Empty for a scheduler that places no pods."""

    node: str
    evicted: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    holding: list[str] = field(default_factory=list)
    left: list[str] = field(default_factory=list)


@dataclass
class SchedulerStateReport:
    """fleetctl's lifecycle state, said on the scheduler's own node object (Kubernetes: the
    state label and taint value, conditions, an Event)."""

    node: str
    state: str
    reason: str


@dataclass
class FaultRemoval:
    """A removal a fault asks the guard for, with what found the fault: a failed check's name
    or a health event's catalog signature (GuardActivities.removals_for_fault widens a fault of
    an NVLink domain's fabric to the whole domain)."""

    request: RemovalRequest
    check: str = ""
    signature: str = ""


@dataclass
class FaultRemovals:
    """The requests a fault makes, asked of the guard in order (fleetctl.nodes.capacity.removals_for_fault)."""

    requests: list[RemovalRequest] = field(default_factory=list)


@dataclass
class PendingGrant:
    rack: str
    at: float
    state_version: int  # the node's version when granted: any transition since ends the grant
    # What the grant costs in nodes: 1, or one GPU's share of its node (a GPU's grant, keyed
    # gpu_grant_key, pending until the snapshot counts the GPU out).
    share: float = 1.0
    gpu: str = ""  # the GPU of a GPU's grant


@dataclass
class RemovalFactsInput:
    """A removal the guard is asked for, and the nodes of its grants still pending."""

    fleet: str
    request: RemovalRequest
    pending: list[str] = field(default_factory=list)


@dataclass
class RemovalFacts:
    """What the guard decides a removal on (GuardActivities.removal_facts): the fleet's policy,
    the request as judged (critical only with a recorded critical event; a domain's nodes those
    still in service), the state versions of the request's and the pending grants' nodes, and
    the fleet's counts (empty when the decision does not read them)."""

    policy: GuardPolicy
    request: RemovalRequest
    versions: dict[str, int] = field(default_factory=dict)
    snapshot: FleetSnapshot = field(default_factory=FleetSnapshot)


@dataclass
class CapacityGuardState:
    fleet: str = "default"
    policy: GuardPolicy = field(default_factory=GuardPolicy)
    breaker_open: bool = False
    breaker_reason: str = ""
    breaker_since: float | None = None
    # node -> time of its latest failure report, within the storm window
    recent_failures: dict[str, float] = field(default_factory=dict)
    pending: dict[str, PendingGrant] = field(default_factory=dict)
    granted_total: int = 0
    denied_total: int = 0


@dataclass
class ResumeAutomation:
    actor: str


@dataclass
class SweepInput:
    suite: str = "quick"
    # At most this many nodes are checked at once: a count, or a fraction of the idle nodes.
    max_concurrent: int = 0
    max_concurrent_fraction: float = 0.05
    fleet: str = "default"
    actor: str = "active-checks"
    # Nodes per child workflow (each keeps its own history).
    batch_nodes: int = 100


@dataclass
class SweepResult:
    checked: int = 0
    passed: int = 0
    failed: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)
    # Of `errors`, the nodes no check could reach (fleetctl.nodes.reachability judges them).
    unreachable: list[str] = field(default_factory=list)
    # Production nodes whose agent fell silent (judged by the sweep, checked or not).
    silent: list[str] = field(default_factory=list)
    # Held for the check, then found running a job (or the hold refused): not checked, back
    # in service, neither failed nor in error (patch fence-checks).
    skipped: list[str] = field(default_factory=list)

    def merge(self, other: SweepResult) -> None:
        self.checked += other.checked
        self.passed += other.passed
        for name in ("failed", "errors", "drained", "held", "unreachable", "silent", "skipped"):
            getattr(self, name).extend(getattr(other, name))


@dataclass
class SweepBatch:
    nodes: list[str]
    checks: list[str]
    req: SweepInput
    sweep_id: str
    width: int


@dataclass
class GpuReturnsInput:
    """A run of GpuReturns: the quarantined GPUs out for `settle_s` or more are reset as their
    Xid's catalog action says, rechecked alone, and returned when clean."""

    fleet: str = "default"
    actor: str = "gpu-returns"
    # A GPU is left out this long before its first return: a burst of Xids from one fault is
    # judged (a second GPU's fault drains the node) before the GPU is reset under it.
    settle_s: float = 1800.0
    max_failed: int = 3  # failed returns after which the GPU's node is drained for its remediation


@dataclass
class GpuReturnCandidate:
    """A GPU out long enough to be returned, with what its return needs."""

    node: str
    gpu: str  # gpu_key
    code: int | None
    quarantine_id: int
    step: str  # fleetctl.nodes.gpu_return.ReturnStep's value
    step_reason: str
    failed_before: int  # its failed returns since it went out
    rack: str = ""


@dataclass
class GpuReturnAttempt:
    """One GPU's reset and recheck: `failure` "" when both passed; `evidence` what they said."""

    failure: str
    evidence: str


@dataclass
class GpuReturnsResult:
    returned: list[str] = field(default_factory=list)  # "node GPU"
    kept_out: list[str] = field(default_factory=list)  # "node GPU: why"
    drained: list[str] = field(default_factory=list)  # nodes
