"""The names clients address workflows by: workflow types, updates, signals and queries, and
every workflow id (a function each, never spelled elsewhere).
"""

from __future__ import annotations

NODE_LIFECYCLE = "NodeLifecycle"
TRANSITION_UPDATE = "transition"
ADMIT_UPDATE = "admit"
RECHECK_UPDATE = "recheck"
RELEASE_GPU_UPDATE = "release_gpu"  # an operator's `node release-gpu`: a GPU back in its scheduler
HEALTH_EVENT_SIGNAL = "health_event"
NODE_STATE_QUERY = "current"

CAPACITY_GUARD = "CapacityGuard"
# The guard's question, its facts read in one activity. The name changed with that: a guard
# run that answered the old one, reading them one activity at a time, replays it under its
# own name (CapacityGuard.request_removal_stepwise, docs/decisions/0030).
REQUEST_REMOVAL_UPDATE = "request_removal_at_once"
STEPWISE_REQUEST_REMOVAL_UPDATE = "request_removal"
# The name a guard of the previous release knows an Update by, where it changed: during a
# rolling upgrade the guard may run on an old worker, and a drain asked by the new name would
# wait for the last worker to be upgraded (workflows.client.ask_capacity_guard).
GUARD_UPDATE_NAMES_BEFORE = {REQUEST_REMOVAL_UPDATE: STEPWISE_REQUEST_REMOVAL_UPDATE}
RESUME_AUTOMATION_UPDATE = "resume_automation"
REPORT_CHECK_ERRORS_UPDATE = "report_check_errors"
GUARD_STATUS_QUERY = "status"

ACTIVE_CHECK_SWEEP = "ActiveCheckSweep"
PRODUCTION_STRAGGLERS = "ProductionStragglers"
HUNG_JOBS = "HungJobs"
GPU_RETURNS = "GpuReturns"
JOB_HISTORY_SYNC = "JobHistorySync"
REMEDIATION = "Remediation"
REMEDIATION_INTERRUPT_SIGNAL = "interrupt"
# Node and guard workflows continue as new on it, so that the next run is on the workers' code.
ROLL_FORWARD_SIGNAL = "roll_forward"
RMA_DECISION_UPDATE = "decide_rma"  # an operator's `rma confirm` / `rma reject` of a held RMA
JOB_RESTART = "JobRestart"
CLUSTER_VALIDATION = "ClusterValidation"

FIRMWARE_ROLLOUT = "FirmwareRollout"
ROLLOUT_RESUME_UPDATE = "resume"
ROLLOUT_ABORT_UPDATE = "abort"
ROLLOUT_PROGRESS_QUERY = "progress"

BULK_SUFFIX = "-bulk"


def node_workflow_id(node: str) -> str:
    """The id of a node's NodeLifecycle workflow."""
    return f"node/{node}"


def node_of_workflow_id(workflow_id: str) -> str | None:
    """The node whose NodeLifecycle workflow has this id; None for any other id."""
    prefix, _, node = workflow_id.partition("/")
    return node if prefix == "node" and node else None


def guard_id(fleet: str = "default") -> str:
    return f"capacity-guard/{fleet}"


def remediation_id(node: str) -> str:
    """One live remediation per node at a time; dry runs get their own ids and never block."""
    return f"remediation/{node}"


def job_restart_id(job_id: str, restart_id: str) -> str:
    return f"job-restart/{job_id}/{restart_id}"


def fault_restart_id(node: str, drain_version: int) -> str:
    """The restart id of a node's fault: the node and the state version of the drain that took
    it out of service for it. The node's own workflow, a runbook's restart_jobs step and an
    operator's `job restart` name the fault alike, so for one fault a job restarts once."""
    return f"{node}-v{drain_version}"


def rollout_workflow_id(rollout_id: str) -> str:
    return f"firmware-rollout/{rollout_id}"


def sweep_id(schedule_id: str) -> str:
    """The id of the sweeps a schedule starts (one at a time: an overrunning sweep skips the next)."""
    return f"sweep/{schedule_id}"


def job_sync_id(schedule_id: str) -> str:
    """The id of the job history syncs a schedule starts (one at a time)."""
    return f"job-sync/{schedule_id}"


def straggler_sweep_id(schedule_id: str) -> str:
    """The id of the production straggler judges a schedule starts (one at a time)."""
    return f"stragglers/{schedule_id}"


def validation_id(request_id: str) -> str:
    """The id of one validation (`fleetctl validate`, or a schedule's: one at a time)."""
    return f"validate/{request_id}"


def bulk_queue(task_queue: str) -> str:
    """The bulk lane of a worker's task queue: checks, sweep batches and scans run there, on
    activity slots of their own (workflows.worker), never on the slots of the critical work
    (an XID 79's drain, job restart, guard grant) that keeps the task queue itself. The bulk
    lane of a bulk lane is itself: a sweep batch runs there, and its checks with it."""
    return task_queue if task_queue.endswith(BULK_SUFFIX) else task_queue + BULK_SUFFIX


def hung_jobs_id(schedule_id: str) -> str:
    """The id of the hung-job judges a schedule starts (one at a time)."""
    return f"hung-jobs/{schedule_id}"


def gpu_returns_id(schedule_id: str) -> str:
    """The id of the GPU returns a schedule (or `fleetctl gpu-returns`) starts (one at a time)."""
    return f"gpu-returns/{schedule_id}"
