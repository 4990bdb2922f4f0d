"""What crosses Temporal for jobs: the JobRestart workflow and the ProductionStragglers judge."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JobSyncInput:
    """One job history sync (`fleetctl schedule create job-sync`)."""

    actor: str = "job-sync"


@dataclass
class JobSyncResult:
    """What each scheduler listed (scheduler -> jobs), why one could not be asked, and those
    that cannot list their jobs (fleetctl.jobs.history_sync.SyncResult)."""

    jobs: dict[str, int] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)


@dataclass
class StragglerSweepInput:
    fleet: str = "default"
    actor: str = "production-stragglers"


@dataclass
class StragglerDrain:
    """A straggler whose drain is due (its job checkpointed, restarted or ended since)."""

    node: str
    rack: str
    job_id: str
    metric: str  # the first of its open findings: the drain's failure is `straggler <metric>`
    evidence: str
    why: str
    finding_ids: list[int] = field(default_factory=list)
    # The job still runs on the node: once the node is drained the job is restarted off it
    # at once, from the checkpoint just written, rather than left to slow on to its end.
    restart_job: bool = False
    scheduler: str = ""  # the job's


@dataclass
class StragglerTick:
    """What one judging of the running jobs found (the judge activity's answer)."""

    policy: str = "flag-only"
    jobs: int = 0
    flagged: list[str] = field(default_factory=list)  # "node (job): evidence", new this tick
    cleared: list[str] = field(default_factory=list)
    still_open: int = 0
    # What could not be judged (Prometheus down or answering nonsense, no URL set): never a pass.
    errors: list[str] = field(default_factory=list)
    due: list[StragglerDrain] = field(default_factory=list)
    # Per job and metric, nodes without a series or too few nodes to compare (bounded).
    no_evidence: list[str] = field(default_factory=list)


@dataclass
class StragglerDrainRecord:
    finding_ids: list[int]
    drained: bool
    detail: str


@dataclass
class StragglerSweepResult:
    policy: str = "flag-only"
    jobs: int = 0
    flagged: list[str] = field(default_factory=list)
    cleared: list[str] = field(default_factory=list)
    drained: list[str] = field(default_factory=list)
    held: list[str] = field(default_factory=list)  # the capacity guard refused (tried again next tick)
    errors: list[str] = field(default_factory=list)
    still_open: int = 0  # findings open after the judging (before this tick's drains)
    no_evidence: list[str] = field(default_factory=list)


DEFAULT_RUNNING_TIMEOUT_S = 1800.0


@dataclass
class JobRestartInput:
    job_id: str
    scheduler: str  # "slurm", "kubernetes" or "sim"
    bad_nodes: list[str]
    cause: str  # why the nodes are bad, e.g. "XID 79: GPU has fallen off the bus"
    actor: str
    fault_seen_at: str  # ISO 8601 with offset: when the caller saw the fault
    restart_id: str
    running_timeout_s: float = DEFAULT_RUNNING_TIMEOUT_S
    # The failure the restart is counted under (fleetctl.remediation.events.Event.failure);
    # "": the caller names none, and the restart's row classifies its cause once.
    failure: str = ""


@dataclass
class JobRestartResult:
    job_id: str
    restart_id: str
    new_nodes: list[str] = field(default_factory=list)
    fault_seen_at: str = ""
    drained_at: str = ""
    requeued_at: str = ""
    running_at: str = ""
    restart_seconds: float = 0.0


@dataclass
class RestartStarted:
    workflow_id: str
    job_id: str
    scheduler: str
    bad_nodes: list[str]
    cause: str
    actor: str
    restart_id: str
    fault_seen_at: str  # ISO 8601 with offset
    failure: str = ""  # JobRestartInput.failure


@dataclass
class DrainNodes:
    scheduler: str
    nodes: list[str]
    reason: str


@dataclass
class RestartJob:
    scheduler: str
    job_id: str
    exclude_nodes: list[str]


@dataclass
class WaitForJob:
    scheduler: str
    job_id: str
    exclude_nodes: list[str]
    timeout_s: float
    poll_interval_s: float = 0.25


@dataclass
class RestartStep:
    workflow_id: str
    step: str  # "drained_at" or "requeued_at"
    at: str  # ISO 8601, the workflow's time of the step


@dataclass
class RestartOutcome:
    workflow_id: str
    status: str  # "succeeded" or "failed"
    running_at: str | None = None
    new_nodes: list[str] = field(default_factory=list)
    error: str = ""


@dataclass
class HungJobsInput:
    """One judging of the running jobs for hangs (`fleetctl schedule create hung-jobs`)."""

    fleet: str = "default"
    actor: str = "hung-jobs"


@dataclass
class HungJobDrain:
    """A hung job's node to drain and restart the job off (policy restart-off-node)."""

    node: str
    rack: str
    job_id: str
    scheduler: str
    evidence: str


@dataclass
class HungJobsTick:
    """What one judging found (the judge activity's answer)."""

    policy: str = "flag-only"
    jobs: int = 0
    flagged: list[str] = field(default_factory=list)  # "job <id>: evidence", every tick it stays hung
    # What could not be judged: Prometheus down or answering nonsense, no URL set. Never a pass.
    errors: list[str] = field(default_factory=list)
    no_evidence: list[str] = field(default_factory=list)  # late jobs nothing was reported for
    due: list[HungJobDrain] = field(default_factory=list)


@dataclass
class HungJobsResult:
    policy: str = "flag-only"
    jobs: int = 0
    flagged: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    no_evidence: list[str] = field(default_factory=list)
    restarted: list[str] = field(default_factory=list)  # "<job> off <node>"
    held: list[str] = field(default_factory=list)  # the guard or the node's workflow refused
