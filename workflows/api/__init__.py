"""What crosses Temporal: every dataclass a workflow, update, signal, query or activity takes
or returns, every workflow id, and the names clients address workflows by.

One import surface (`from workflows.api import X`) over one module per domain, as fleetctl's
packages are cut: `names` (workflow types, messages, ids), `nodes` (NodeLifecycle and its
activities, CapacityGuard, ActiveCheckSweep), `jobs` (JobRestart, ProductionStragglers),
`remediation` (Remediation, FirmwareRollout). A new payload goes in its domain's module and
is named here.

Light on purpose: the standard library and the pure dataclasses of fleetctl.nodes.capacity and
fleetctl.nodes.lifecycle only (a contract in pyproject.toml keeps it so). `fleetctl node event`
imports this and workflows.client and nothing of the activity stack, so a critical event
reaches its node's workflow without first importing checks, SQLModel and the executors.

Temporal's data converter serialises a dataclass by its fields (by name; fields it does not
know are ignored, missing ones take their defaults), so where a class lives does not change
the payloads it becomes: the recorded histories in tests/histories replay on these classes.
tests/core/test_messages.py checks every name here against the workflow definitions.
"""

from __future__ import annotations

from workflows.api.names import (
    ACTIVE_CHECK_SWEEP, ADMIT_UPDATE, CAPACITY_GUARD, FIRMWARE_ROLLOUT, guard_id, GUARD_STATUS_QUERY,
    HEALTH_EVENT_SIGNAL, JOB_HISTORY_SYNC, JOB_RESTART, job_restart_id, job_sync_id, NODE_LIFECYCLE, NODE_STATE_QUERY, node_workflow_id, node_of_workflow_id,
    PRODUCTION_STRAGGLERS, RECHECK_UPDATE, REMEDIATION, REMEDIATION_INTERRUPT_SIGNAL, remediation_id,
    REPORT_CHECK_ERRORS_UPDATE, REQUEST_REMOVAL_UPDATE, RESUME_AUTOMATION_UPDATE, RMA_DECISION_UPDATE, ROLLOUT_ABORT_UPDATE,
    ROLLOUT_PROGRESS_QUERY, ROLLOUT_RESUME_UPDATE, rollout_workflow_id, straggler_sweep_id, sweep_id,
    TRANSITION_UPDATE,
)
from workflows.api.nodes import (
    AdmissionRequest, AdmissionVerdict, AgentSilence, AutomationRecord, CapacityGuardState, CheckOutcome,
    CheckRequest, DRAIN_JOB_POLL_S, DRAIN_JOB_WAIT_S, FaultRemoval, FaultRemovals, HealthEventBatch, HealthEventBatchResult,
    HealthEventInput, HealthEventVerdict, HeldNode, NodeCommandOutcome, NodeFacts, NodeLifecycleState, PeerVerdict,
    PendingGrant, PhaseAccepted, PhaseRequest, PodDrainOutcome, PodDrainRequest, ReachabilityVerdict,
    RecordedTransition, RemediationChoice, RemediationPlan, ResumeAutomation, SCHEDULER_RETRY_S,
    SchedulerCordon, SchedulerHold, SchedulerStateReport, SweepBatch, SweepInput, SweepResult, SweepScope, TransitionRecord,
    TransitionRequest, TransitionResult, WorkItem,
)
from workflows.api.jobs import (
    DEFAULT_RUNNING_TIMEOUT_S, DrainNodes, JobRestartInput, JobRestartResult, JobSyncInput, JobSyncResult,
    RestartJob, RestartOutcome,
    RestartStarted, RestartStep, StragglerDrain, StragglerDrainRecord, StragglerSweepInput,
    StragglerSweepResult, StragglerTick, WaitForJob,
)
from workflows.api.remediation import (
    ActionOutcome, AdmitRequest, BurstAnswer, BurstQuery, remediation_mode, DriftReport, DriftRequest, HardwareRequest, NodeResult, NotifyRequest,
    PreparedStep, RemediationInput, RemediationInterrupt, RemediationResult, RmaDecided, RmaDecision, RmaOpened, RmaRequest, RolloutCommand, RolloutInput,
    RolloutProgress, RolloutStatus, RunContext, RunEnd, RunStart, StepInput, StepRecord, StepResult,
    UpdateOutcome,
)

__all__ = [
    "ActionOutcome", "ACTIVE_CHECK_SWEEP", "AdmissionRequest", "AdmissionVerdict", "ADMIT_UPDATE",
    "AdmitRequest", "AgentSilence", "BurstAnswer", "BurstQuery", "AutomationRecord", "CAPACITY_GUARD", "CapacityGuardState",
    "CheckOutcome", "CheckRequest", "DEFAULT_RUNNING_TIMEOUT_S", "JOB_HISTORY_SYNC", "job_sync_id", "JobSyncInput",
    "JobSyncResult", "DRAIN_JOB_POLL_S", "DRAIN_JOB_WAIT_S",
    "DrainNodes", "DriftReport", "DriftRequest", "FaultRemoval", "FaultRemovals", "FIRMWARE_ROLLOUT", "guard_id", "GUARD_STATUS_QUERY",
    "HardwareRequest", "HEALTH_EVENT_SIGNAL", "HealthEventBatch", "HealthEventBatchResult",
    "HealthEventInput", "HealthEventVerdict", "HeldNode", "JOB_RESTART", "job_restart_id", "JobRestartInput",
    "JobRestartResult", "NODE_LIFECYCLE", "NODE_STATE_QUERY", "node_workflow_id", "node_of_workflow_id", "NodeCommandOutcome",
    "NodeFacts", "NodeLifecycleState", "NodeResult", "NotifyRequest", "PeerVerdict", "PendingGrant",
    "PhaseAccepted", "PhaseRequest", "PodDrainOutcome", "PodDrainRequest", "PreparedStep",
    "PRODUCTION_STRAGGLERS", "ReachabilityVerdict", "RECHECK_UPDATE", "RecordedTransition", "REMEDIATION", "REMEDIATION_INTERRUPT_SIGNAL",
    "remediation_id", "remediation_mode", "RemediationChoice", "RemediationInput", "RemediationInterrupt", "RemediationPlan",
    "RemediationResult", "REPORT_CHECK_ERRORS_UPDATE", "REQUEST_REMOVAL_UPDATE", "RestartJob",
    "RestartOutcome", "RestartStarted", "RestartStep", "RESUME_AUTOMATION_UPDATE", "ResumeAutomation",
    "RMA_DECISION_UPDATE", "RmaDecided", "RmaDecision", "RmaOpened", "RmaRequest", "ROLLOUT_ABORT_UPDATE", "ROLLOUT_PROGRESS_QUERY", "ROLLOUT_RESUME_UPDATE",
    "rollout_workflow_id", "RolloutCommand", "RolloutInput", "RolloutProgress", "RolloutStatus",
    "RunContext", "RunEnd", "RunStart", "SCHEDULER_RETRY_S", "SchedulerCordon", "SchedulerHold", "SchedulerStateReport",
    "StepInput", "StepRecord", "StepResult", "straggler_sweep_id", "StragglerDrain", "StragglerDrainRecord",
    "StragglerSweepInput", "StragglerSweepResult", "StragglerTick", "sweep_id", "SweepBatch", "SweepInput",
    "SweepResult", "SweepScope", "TRANSITION_UPDATE", "TransitionRecord", "TransitionRequest",
    "TransitionResult", "UpdateOutcome", "WaitForJob", "WorkItem",
]
