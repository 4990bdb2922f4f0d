"""The tables. The schema itself is owned by Alembic (migrations/); these mirror it."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, Column, Table, Text, UniqueConstraint
from sqlmodel import Field, SQLModel


def utcnow() -> datetime:
    return datetime.now(UTC)


class Node(SQLModel, table=True):
    __tablename__ = "nodes"

    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(index=True, unique=True)
    address: str
    bmc_address: str | None = None
    ssh_user: str | None = None
    # The bastion (`[user@]host[:port]`) the node is reached through over SSH, from the
    # inventory's `jump` (migration 0015); None: directly, or through settings.ssh_jump_host.
    jump_host: str | None = None
    rack: str = Field(default="", index=True)
    # Topology from the inventory (migration 0010): the leaf switch, the InfiniBand island or
    # NVLink domain a restart keeps a job in, the rack unit; "" / None when not given.
    switch: str = ""
    island: str = ""
    position: int | None = None
    # The multi-node NVLink domain (a GB200 NVL72 rack) from the inventory's `nvlink_domain`
    # (migration 0016); "": none (an HGX node, whose NVLink ends at its chassis).
    nvlink_domain: str = ""
    profile: str
    scheduler: str = "none"
    labels: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    state: str = Field(default="new", index=True)
    # Incremented by every transition; the workflow writes with the version it expects,
    # so a stale or replayed write can never move a node backwards.
    state_version: int = 0
    state_since: datetime = Field(default_factory=utcnow)
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    # When the intake last heard the node's agent (its clock, not the node's); None: the node
    # has no agent, and agent silence is not judged for it (fleetctl.nodes.reachability).
    agent_seen_at: datetime | None = None


class NodeEvent(SQLModel, table=True):
    """Append-only: one row per transition."""

    __tablename__ = "node_events"
    __table_args__ = (UniqueConstraint("idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    node_name: str = Field(index=True)
    from_state: str
    to_state: str
    trigger: str
    cause: str = Field(default="", sa_column=Column(Text, nullable=False))
    actor: str
    actor_kind: str = "operator"
    at: datetime = Field(default_factory=utcnow, index=True)
    workflow_id: str = ""
    run_id: str = ""
    state_version: int = 0
    idempotency_key: str
    # fleetctl.remediation.events.Event.failure of the fault that caused it, "maintenance"
    # (drains.PLANNED) for an operator's planned drain, "" for none.
    failure: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))


class CheckRun(SQLModel, table=True):
    """One check executed on one node, with its judged result and the raw output."""

    __tablename__ = "check_runs"
    __table_args__ = (UniqueConstraint("idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    node_name: str = Field(index=True)
    check_name: str
    kind: str
    suite: str = ""
    status: str = Field(index=True)
    metrics: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    findings: list[Any] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    raw_output: str = Field(default="", sa_column=Column(Text, nullable=False))
    output_truncated: bool = False
    error_kind: str | None = None
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime = Field(default_factory=utcnow, index=True)
    workflow_id: str = ""
    idempotency_key: str


class HealthEvent(SQLModel, table=True):
    """A passive health signal (XID, operator report) received for a node."""

    __tablename__ = "health_events"
    __table_args__ = (UniqueConstraint("idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    node_name: str = Field(index=True)
    source: str  # "xid", "operator", "check"
    code: int | None = None
    severity: str = "info"
    action: str = ""
    message: str = Field(default="", sa_column=Column(Text, nullable=False))
    at: datetime = Field(default_factory=utcnow, index=True)
    idempotency_key: str
    # Occurrences this row stands for: a folded storm of one Xid is one row (migration 0020).
    repeat_count: int = 1


class Job(SQLModel, table=True):
    __tablename__ = "jobs"

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(index=True, unique=True)
    name: str = ""
    scheduler: str  # the inventory's scheduler kind that runs it; no default (migration 0005)
    state: str = "pending"
    nodes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # How many nodes the job needs; `nodes` is where it runs (empty while pending).
    node_count: int = 1
    gpus_per_node: int = 8
    submitted_at: datetime = Field(default_factory=utcnow)
    started_at: datetime | None = None
    ended_at: datetime | None = None
    last_checkpoint_at: datetime | None = None
    # What the scheduler says: how many times it requeued the job (Slurm's RestartCnt), and
    # when fleetctl last saw the job there (a job the scheduler forgot ended by then).
    restart_count: int = 0
    seen_at: datetime | None = None
    # When the job's latest run started, as the scheduler says while it runs (migration 0025):
    # Slurm moves it at every requeue of its own, and the hang judge counts that as progress.
    run_started_at: datetime | None = None
    # The simulated scheduler's lists (migration 0018), as Slurm keeps them on a job: the
    # nodes it never runs on (ExcNodeList, kept through every pass) and the nodes it runs on
    # or waits for (ReqNodeList, until released). Empty for the jobs of other schedulers.
    excluded_nodes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    required_nodes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))


class JobCheckpoint(SQLModel, table=True):
    """A checkpoint a job reported (`fleetctl job checkpoint`); one row per job and time."""

    __tablename__ = "job_checkpoints"
    __table_args__ = (UniqueConstraint("job_id", "at", name="uq_job_checkpoints_job_at"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(index=True)
    at: datetime
    recorded_at: datetime = Field(default_factory=utcnow)


class StragglerFinding(SQLModel, table=True):
    """A node of a running job beyond the job's other nodes on one metric (migration 0011):
    open, then cleared (back in line), drained (through the capacity guard, at the job's
    checkpoint) or closed (the node left production otherwise)."""

    __tablename__ = "straggler_findings"

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(index=True)
    node_name: str = Field(index=True)
    metric: str
    status: str = Field(default="open", index=True)
    evidence: str = Field(sa_column=Column(Text, nullable=False))
    value: float | None = None
    median: float | None = None
    robust_z: float | None = None
    # The job's restart count when found: a higher one later means it was restarted since.
    job_restart_count: int = 0
    found_at: datetime = Field(default_factory=utcnow)
    resolved_at: datetime | None = None
    detail: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))


class HangFinding(SQLModel, table=True):
    """A late job's verdict from the HungJobs judge (migration 0025): hung, slow or no
    evidence, the nodes blamed and how, first and last seen at. One row per job, verdict and
    progress lost (the judge's ticks over the same hang update it); `resolved_at` is set once
    a tick no longer finds it (the job progressed, ended or is being restarted)."""

    __tablename__ = "hang_findings"

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(index=True)
    state: str  # fleetctl.jobs.hang.HangState: hung, slow or no_evidence
    suspects: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    localised: str  # fleetctl.jobs.hang.Localised: how the suspects were found
    evidence: str = Field(sa_column=Column(Text, nullable=False))
    progress_at: datetime  # the job's last progress: a new checkpoint or (re)start is a new hang
    found_at: datetime = Field(default_factory=utcnow)
    last_seen_at: datetime = Field(default_factory=utcnow)
    resolved_at: datetime | None = Field(default=None, index=True)


class SimBoot(SQLModel, table=True):
    """When a simulated node's BMC last rebooted it (a node without a row boots at its own phase)."""

    __tablename__ = "sim_boots"

    node_name: str = Field(primary_key=True)
    booted_at: float  # unix time


class SimFault(SQLModel, table=True):
    """A fault injected into a simulated node; read by the worker's simulated executor."""

    __tablename__ = "sim_faults"

    id: int | None = Field(default=None, primary_key=True)
    node_name: str = Field(index=True)
    kind: str
    gpu: int | None = None
    not_before: float = 0.0
    rate_per_hour: float | None = None
    seed: int = 0
    created_at: datetime = Field(default_factory=utcnow)


class AutomationEvent(SQLModel, table=True):
    """What the capacity guard decided, and when its breaker opened or closed, and why."""

    __tablename__ = "automation_events"
    __table_args__ = (UniqueConstraint("idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    fleet: str = "default"
    kind: str
    node_name: str | None = None
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    actor: str
    at: datetime = Field(default_factory=utcnow, index=True)
    idempotency_key: str


class RemediationRun(SQLModel, table=True):
    """One runbook executed (or dry-run) for one node by a Remediation workflow."""

    __tablename__ = "remediation_runs"
    __table_args__ = (UniqueConstraint("run_key"),)

    id: int | None = Field(default=None, primary_key=True)
    run_key: str  # the workflow id
    node_name: str = Field(index=True)
    runbook: str
    event: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    mode: str = "live"  # live, dry_run, shadow
    status: str = "running"  # running, succeeded, failed, escalated
    outcome: str = Field(default="", sa_column=Column(Text, nullable=False))
    actor: str
    started_at: datetime = Field(default_factory=utcnow, index=True)
    finished_at: datetime | None = None


class RemediationStep(SQLModel, table=True):
    __tablename__ = "remediation_steps"
    __table_args__ = (UniqueConstraint("run_key", "step_index"),)

    id: int | None = Field(default=None, primary_key=True)
    run_key: str = Field(index=True)
    node_name: str = Field(index=True)
    step_index: int
    name: str
    action: str
    status: str  # passed, failed, skipped, would_run
    params: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    detail: str = Field(default="", sa_column=Column(Text, nullable=False))
    started_at: datetime = Field(default_factory=utcnow)
    finished_at: datetime = Field(default_factory=utcnow)


class RmaRecord(SQLModel, table=True):
    """Hardware sent back to the vendor, with the evidence bundle that goes with it."""

    __tablename__ = "rma_records"
    __table_args__ = (UniqueConstraint("idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    node_name: str = Field(index=True)
    status: str = Field(default="open", index=True)
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    remediation_run: str | None = None
    evidence: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    evidence_markdown: str = Field(default="", sa_column=Column(Text, nullable=False))
    webhook_status: str | None = None
    opened_by: str
    opened_at: datetime = Field(default_factory=utcnow)
    replaced: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    closed_by: str | None = None
    closed_at: datetime | None = None
    idempotency_key: str
    # Why automation held it for an operator (status awaiting_confirmation: a correlated burst,
    # fleetctl.remediation.rma.burst_verdict), and who confirmed or rejected it, when.
    held_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    decided_by: str | None = None
    decided_at: datetime | None = None
    # What the operator said with the answer (`rma reject --reason "driver 550.90 bug"`).
    decided_reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))


class FirmwareBaseline(SQLModel, table=True):
    """Every baseline ever set; the newest row is the fleet's baseline."""

    __tablename__ = "firmware_baselines"

    id: int | None = Field(default=None, primary_key=True)
    name: str
    document: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    source: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_by: str
    created_at: datetime = Field(default_factory=utcnow)


class FirmwareRollout(SQLModel, table=True):
    __tablename__ = "firmware_rollouts"
    __table_args__ = (UniqueConstraint("rollout_id"),)

    id: int | None = Field(default=None, primary_key=True)
    rollout_id: str
    baseline_id: int
    status: str = Field(default="running", index=True)  # running, halted, completed, aborted
    canary: int
    batch: str
    max_failures: int
    dry_run: bool = False
    total: int = 0
    done: int = 0
    failed: int = 0
    detail: str = Field(default="", sa_column=Column(Text, nullable=False))
    created_by: str
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)


class FirmwareRolloutNode(SQLModel, table=True):
    __tablename__ = "firmware_rollout_nodes"
    __table_args__ = (UniqueConstraint("rollout_id", "node_name"),)

    id: int | None = Field(default=None, primary_key=True)
    rollout_id: str = Field(index=True)
    node_name: str
    batch_index: int
    status: str  # pending, updated, failed, skipped, would_update
    detail: str = Field(default="", sa_column=Column(Text, nullable=False))
    components: dict[str, Any] = Field(default_factory=dict, sa_column=Column(JSON, nullable=False))
    updated_at: datetime = Field(default_factory=utcnow)


class SimSchedulerNode(SQLModel, table=True):
    """The simulated scheduler's own drain of a node (a node without a row is schedulable)."""

    __tablename__ = "sim_scheduler_nodes"

    id: int | None = Field(default=None, primary_key=True)
    node_name: str = Field(index=True, unique=True)
    drained: bool = False
    reason: str | None = Field(default=None, sa_column=Column(Text, nullable=True))
    updated_at: datetime = Field(default_factory=utcnow)
    # The GPUs (fleetctl.nodes.gpu_quarantine.gpu_key) taken out of the node's GRES: work is placed
    # on the others (migration 0022).
    gpus_out: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))


class GpuQuarantine(SQLModel, table=True):
    """One GPU taken out of its node's scheduler while the node stays in service
    (fleetctl.nodes.gpu_quarantine; migration 0022): open until `released_at`."""

    __tablename__ = "gpu_quarantines"
    __table_args__ = (UniqueConstraint("idempotency_key"),)

    id: int | None = Field(default=None, primary_key=True)
    node_name: str = Field(index=True)
    gpu: str  # the GPU's PCI address, as gpu_key spells it
    code: int | None = None  # the Xid that took it out
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    actor: str = ""
    quarantined_at: datetime = Field(default_factory=utcnow)
    released_at: datetime | None = Field(default=None, index=True)
    release_reason: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    idempotency_key: str


class Spare(SQLModel, table=True):
    """A node held as a hot spare of its island (fleetctl.jobs.spares): the scheduler keeps jobs off
    it (Slurm: the reservation fleetctl-spares-<island>) until a restart takes it."""

    __tablename__ = "spares"

    node_name: str = Field(primary_key=True)
    island: str = Field(index=True)
    held_at: datetime = Field(default_factory=utcnow)


class SweepInterval(SQLModel, table=True):
    """An active-check sweep schedule as `fleetctl schedule` made it (migration 0014): how often
    it sweeps its fleet, and whether it is paused. Temporal holds the schedule; this copy lets
    `node list` judge the age of evidence (conditions.stale_evidence) without asking it."""

    __tablename__ = "sweep_intervals"

    schedule_id: str = Field(primary_key=True)
    fleet: str = Field(index=True)
    every_s: float
    paused: bool = False
    recorded_at: datetime = Field(default_factory=utcnow)


class JobRestart(SQLModel, table=True):
    """One restart of a training job off bad nodes, with the time of each step.

    One row per JobRestart workflow: its id (`job-restart/<job>/<restart>`) is the
    idempotency key, so the same fault never records (or restarts) a job twice.
    """

    __tablename__ = "job_restarts"
    __table_args__ = (UniqueConstraint("workflow_id"),)

    id: int | None = Field(default=None, primary_key=True)
    job_id: str = Field(index=True)
    scheduler: str
    bad_nodes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    cause: str = Field(default="", sa_column=Column(Text, nullable=False))
    # The failure the restart is counted under (migration 0018): the label of the fault behind
    # it (`xid 79`, `check nccl-allreduce`, `straggler nvlink_tx`, `health`, `operator`), "" for
    # none; the report reads it, never the cause's words.
    failure: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    actor: str
    restart_id: str
    fault_seen_at: datetime
    drained_at: datetime | None = None
    requeued_at: datetime | None = None
    running_at: datetime | None = None
    new_nodes: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    # The job's nodes when it was requeued (migration 0017), so that its replacements are
    # new_nodes less these (fleetctl.jobs.placement.replacements); [] when not known.
    nodes_before: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    status: str = Field(default="in_progress", index=True)  # in_progress, succeeded, failed
    error: str = Field(default="", sa_column=Column(Text, nullable=False))
    # Where the restart asked the scheduler to place the job (fleetctl.jobs.placement, migration
    # 0010): "island" (healthy nodes of the job's island, named), "fleet" (fell back to any
    # healthy node), "" (not decided: no topology, or a scheduler that cannot be told);
    # placement_detail says why in words. landed: where the job ran again, "island" (every
    # node in the job's island) or "outside"; "" until it runs or when the job has no island.
    island: str = ""
    placement: str = ""
    placement_detail: str = Field(default="", sa_column=Column(Text, nullable=False, server_default=""))
    # The nodes an `island` placement named (a retried requeue names them again).
    placed_on: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    landed: str = ""
    # The hot spares the placement took (fleetctl.jobs.spares, migration 0012); [] when none.
    spares_taken: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False, server_default="[]"))
    workflow_id: str


class AuditRequest(SQLModel, table=True):
    """One write asked of the front door (migration 0021): who asked (the authenticated
    subject), what, on which nodes, in which fleet, allowed or denied and why, and how the
    command ended. `nodes` is the node names space-separated with a space at each end, so one
    node is found with LIKE '% name %' on SQLite and PostgreSQL alike."""

    __tablename__ = "audit_requests"

    id: int | None = Field(default=None, primary_key=True)
    at: datetime = Field(default_factory=utcnow, index=True)
    subject: str = Field(index=True)
    actor: str = ""
    fleet: str
    command: str
    args: list[str] = Field(default_factory=list, sa_column=Column(JSON, nullable=False))
    nodes: str = Field(default=" ", sa_column=Column(Text, nullable=False))
    decision: str  # allowed, denied
    role_needed: str = ""
    role_held: str = ""
    reason: str = Field(default="", sa_column=Column(Text, nullable=False))
    exit_code: int | None = None  # None: denied, or still running


def table_of(model: type[SQLModel]) -> Table:
    """The Core table a table model maps to, for Core statements (bulk updates, retention's
    batched deletes). SQLModel sets `__table__` on a table model at class creation but does
    not declare it, so it is looked up by name in the metadata every table model joins."""
    name = model.__tablename__
    table = SQLModel.metadata.tables.get(name) if isinstance(name, str) else None
    if table is None:
        raise TypeError(f"{model.__name__} is not a table model")
    return table
