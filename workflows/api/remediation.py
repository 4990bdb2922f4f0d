"""What crosses Temporal for remediation: the Remediation workflow (runbook steps, RMA) and
the FirmwareRollout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


def remediation_mode(dry_run: bool, shadow: bool) -> str:
    """live acts; dry_run (an operator's --dry-run) and shadow (the fleet-wide setting) only record."""
    return "dry_run" if dry_run else "shadow" if shadow else "live"


@dataclass
class RemediationInput:
    node: str
    runbook: dict[str, Any]  # runbooks.Runbook.to_dict(): the runbook as it was when the run began
    event: dict[str, Any]  # fleetctl.remediation.events.Event.to_dict()
    mode: str = "live"  # live, dry_run, shadow
    actor: str = "fleetctl"
    # A critical fault (the GPU is already gone) is drained without the capacity guard's limits.
    critical: bool = False


@dataclass
class StepResult:
    index: int
    name: str
    action: str
    status: str  # passed, failed, skipped, would_run
    detail: str


@dataclass
class RemediationInterrupt:
    """Remediation's `interrupt` signal: a critical event the node's workflow took while the
    run works on the node; the step in flight is cut short (a hardware one finishes first)."""

    reason: str


@dataclass
class RemediationResult:
    run_key: str
    node: str
    runbook: str
    mode: str
    status: str  # succeeded, failed, escalated, dry_run, interrupted
    outcome: str
    steps: list[StepResult] = field(default_factory=list)


@dataclass
class RunStart:
    run_key: str
    node: str
    runbook: str
    event: dict[str, Any]
    mode: str
    actor: str
    started_at: datetime


@dataclass
class RunContext:
    """The node as the run found it (the template variable `node`), and whether it is a lemon."""

    node: dict[str, Any]
    state: str
    # Set when the node was remediated too often recently: it goes to RMA, not back to service.
    lemon: str = ""


@dataclass
class StepInput:
    step: dict[str, Any]  # runbooks.Step.to_dict()
    context: dict[str, Any]  # node, event, steps, runbook


@dataclass
class PreparedStep:
    run: bool
    params: dict[str, Any] = field(default_factory=dict)
    error: str = ""


@dataclass
class StepRecord:
    run_key: str
    node: str
    index: int
    name: str
    action: str
    status: str
    params: dict[str, Any]
    detail: str
    started_at: datetime
    finished_at: datetime


@dataclass
class RunEnd:
    run_key: str
    status: str
    outcome: str
    finished_at: datetime


@dataclass
class HardwareRequest:
    node: str
    action: str  # gpu_reset, reboot
    params: dict[str, Any] = field(default_factory=dict)


@dataclass
class ActionOutcome:
    ok: bool
    detail: str


@dataclass
class AdmitRequest:
    node: str
    actor: str
    suite: str = "burn-in"
    request_id: str = ""


@dataclass
class NotifyRequest:
    node: str
    message: str
    severity: str = "info"
    run_key: str = ""


@dataclass
class RmaRequest:
    node: str
    reason: str
    actor: str
    remediation_run: str = ""
    # Stable per caller step, so a retried activity opens one record.
    idempotency_key: str = ""
    # Set: the record is held for an operator (awaiting_confirmation) and nothing is sent.
    held_reason: str = ""


@dataclass
class RmaOpened:
    rma_id: int
    created: bool
    webhook_status: str = ""


@dataclass
class BurstQuery:
    """Is the node's RMA held for a correlated burst? (fleetctl.remediation.rma.burst_verdict)"""

    node: str
    now: float  # the workflow's clock, seconds since the epoch
    # The node's critical event, as the first answer found it (0: find it).
    event_at: float = 0.0


@dataclass
class BurstAnswer:
    hold: str  # why the RMA waits for an operator; empty: open it
    event_at: float  # the node's critical event (0: it had none; such an answer never waits)
    wait_until: float = 0.0  # ask again then (0: decided now)


@dataclass
class RmaDecision:
    """An operator's answer to a held RMA: `rma confirm` (confirm) opens it, `rma reject`
    ends it and sends the node back through burn-in."""

    rma_id: int
    confirm: bool
    actor: str
    reason: str = ""  # the operator's why (--reason), recorded with the answer


@dataclass
class RmaDecided:
    rma_id: int
    status: str  # the record's status after the answer: open or rejected
    detail: str


@dataclass
class RolloutInput:
    rollout_id: str
    baseline_id: int
    batches: list[list[str]]  # canary first
    max_failures: int
    dry_run: bool = False
    actor: str = "fleetctl"


@dataclass
class RolloutStatus:
    rollout_id: str
    status: str  # running, halted, completed, aborted
    total: int
    done: int
    failed: int
    next_batch: int
    batches: int
    failed_nodes: list[str] = field(default_factory=list)
    detail: str = ""


@dataclass
class RolloutCommand:
    actor: str


@dataclass
class DriftRequest:
    node: str
    baseline_id: int


@dataclass
class DriftReport:
    node: str
    status: str  # ok, drift, unknown, no_baseline
    drifts: list[str] = field(default_factory=list)  # "component: actual -> expected"
    components: dict[str, list[str | None]] = field(default_factory=dict)  # component -> [actual, expected]


@dataclass
class UpdateOutcome:
    ok: bool
    detail: str


@dataclass
class NodeResult:
    rollout_id: str
    node: str
    batch_index: int
    status: str  # updated, failed, skipped, would_update
    detail: str
    components: dict[str, list[str | None]] = field(default_factory=dict)


@dataclass
class RolloutProgress:
    rollout_id: str
    status: str  # running, halted, completed, aborted
    total: int
    done: int
    failed: int
    detail: str = ""
