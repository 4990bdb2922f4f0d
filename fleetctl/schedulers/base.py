"""The interface every scheduler adapter implements (Slurm, Kubernetes, simulated)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol, runtime_checkable

# Every drain reason fleetctl writes starts with this, so fleetctl can tell its own drains
# from an operator's and only resume what it drained (unless forced).
REASON_PREFIX = "fleetctl:"

# The holds that fence fleetctl's checks (a drain with these reasons): a node new to fleetctl
# is held from import until admitted; a production node for the length of a sweep check or
# a recheck. A job that lands before the hold is seen by the idleness read that follows it.
BURN_IN_HOLD = f"{REASON_PREFIX} burn-in: held until admitted"
# A sweep's hold and a recheck's differ, so that neither lifts the other's.
CHECK_HOLD_PREFIX = f"{REASON_PREFIX} active check"
RECHECK_HOLD_PREFIX = f"{REASON_PREFIX} recheck"


def check_hold_reason(suite: str) -> str:
    """The drain reason of a production node held for a sweep's check of `suite`."""
    return f"{CHECK_HOLD_PREFIX} {suite}"


def recheck_hold_reason(suite: str) -> str:
    """The drain reason of a production node held for a recheck of `suite`."""
    return f"{RECHECK_HOLD_PREFIX} {suite}"


def is_check_hold(reason: str | None) -> bool:
    """A production node held for a sweep's check or a recheck (not for burn-in)."""
    return bool(reason and reason.startswith((f"{CHECK_HOLD_PREFIX} ", f"{RECHECK_HOLD_PREFIX} ")))


@dataclass(frozen=True)
class SchedulerNodeState:
    node: str
    # "idle", "allocated", "mixed", "drain", "draining", "down", "cordoned", "unknown"
    state: str
    drained: bool
    reason: str | None = None
    owned_by_fleetctl: bool = False


@dataclass(frozen=True)
class SchedulerJob:
    job_id: str
    name: str
    state: str  # "running", "pending", "completed", "failed", ...
    nodes: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class JobHistory:
    """A job as its scheduler remembers it, for the reliability figures.

    Times are UTC; started_at is None while the job waits, ended_at until it has ended.
    restart_count: how many times the scheduler requeued it. gpus_per_node: None when the
    scheduler does not say (the job asked for no GPUs by name)."""

    job_id: str
    name: str
    state: str  # the scheduler's state, lower case: "running", "pending", "completed", "node_fail", ...
    nodes: tuple[str, ...]
    node_count: int
    submitted_at: datetime | None
    started_at: datetime | None
    ended_at: datetime | None
    restart_count: int = 0
    gpus_per_node: int | None = None


class SchedulerError(Exception):
    """The scheduler refused or could not be reached; callers retry with backoff."""


class FleetctlDoesNotOwnDrain(SchedulerError):
    """A resume was refused: the node was drained (or downed) by someone other than fleetctl.

    Retrying does not help; an operator decides, and can resume with force.
    """


class Scheduler(Protocol):
    # `critical`: a fault that ends the node's work anyway, so work may be moved off at once
    # where the scheduler can (Kubernetes' NoExecute taint). Slurm's drain lets running jobs
    # run either way; the node's workflow restarts a critical fault's jobs itself.
    def drain(self, node: str, reason: str, critical: bool = False) -> None: ...

    def resume(self, node: str, force: bool = False) -> None: ...

    def node_state(self, node: str) -> SchedulerNodeState: ...

    def jobs_on_node(self, node: str) -> list[SchedulerJob]: ...

    # Every node running work now, in one call for the whole cluster (an active-check sweep
    # over 10,000 nodes must not ask node by node).
    def busy_nodes(self) -> set[str]: ...

    def job(self, job_id: str) -> SchedulerJob: ...

    def restart_job(self, job_id: str, exclude_nodes: Sequence[str]) -> None: ...


@runtime_checkable
class PlacesRestarts(Protocol):
    """Optional: a scheduler that can restart a job onto nodes fleetctl names (Slurm's
    ReqNodeList), so a restart keeps the job in its island (fleetctl.jobs.placement). `nodes` is
    every node the job runs on next; none of them is in exclude_nodes."""

    def restart_job_on(self, job_id: str, exclude_nodes: Sequence[str], nodes: Sequence[str]) -> None: ...

    # The job, still pending, may run on any nodes again (its exclusions stay): the named
    # ones did not take it in time.
    def release_nodes(self, job_id: str) -> None: ...


@runtime_checkable
class RequeuesEarly(Protocol):
    """Optional: a scheduler whose restart must wait after the requeue before the job may
    start (Slurm: slurmds' credential-revoke second), so the requeue is done first and the
    placement decided during that wait; restart_job / restart_job_on then release the job."""

    def requeue(self, job_id: str) -> None: ...


@runtime_checkable
class ListsWorkloads(Protocol):
    """Optional: a scheduler whose nodes run work that no job names (Kubernetes: an inference
    pod with no job label), so its running jobs are not all of a node's work. A check's hold
    reads these after it is taken, as busy_nodes counts them."""

    # The node's live work, each "namespace/name" (a pod), labelled as a job or not.
    def workloads_on_node(self, node: str) -> list[str]: ...


def work_on_node(scheduler: Scheduler, node: str) -> list[str]:
    """All the work running on the node: its workloads where the scheduler lists them
    (ListsWorkloads), its running jobs otherwise."""
    if isinstance(scheduler, ListsWorkloads):
        return scheduler.workloads_on_node(node)
    return [j.job_id for j in scheduler.jobs_on_node(node) if j.state == "running"]


@runtime_checkable
class HoldsSpares(Protocol):
    """Optional: a scheduler that can keep an island's hot spares (fleetctl.jobs.spares) free of
    jobs until fleetctl hands one to a restart (Slurm: a reservation per island)."""

    # island -> the nodes it holds now, for every island fleetctl holds spares in.
    def spares(self) -> dict[str, tuple[str, ...]]: ...

    # The island holds exactly `nodes` from now on (none: it holds nothing); idempotent.
    def set_spares(self, island: str, nodes: Sequence[str]) -> None: ...


@runtime_checkable
class QuarantinesGpus(Protocol):
    """Optional: a scheduler that can take one GPU of a node out while the node's others keep
    working (fleetctl.nodes.gpu_quarantine): the simulated scheduler's GRES. `gpu` is the GPU's
    PCI address (gpu_key). A scheduler without it drains the node for such a fault, as before."""

    def quarantine_gpu(self, node: str, gpu: str, reason: str) -> None: ...

    def release_gpu(self, node: str, gpu: str) -> None: ...

    # The node's GPUs out now, as the scheduler holds them.
    def gpus_out(self, node: str) -> list[str]: ...


@runtime_checkable
class ListsJobHistory(Protocol):
    """Optional: a scheduler that can list every job it remembers, ended ones too, in one
    call (Slurm: squeue --states=all; the simulated scheduler: its queue)."""

    def job_history(self) -> list[JobHistory]: ...


@dataclass(frozen=True)
class PodDrainProgress:
    """One round of moving a node's pods off it (schedulers that place pods, not jobs).

    `holding` are the pods that keep the drain open, each "namespace/name: why" (waiting
    by policy, refused by a disruption budget, terminating); the drain is done when none
    is left. `left` are pods the drain leaves by rule and that do not hold it open.
    """

    node: str
    evicted: tuple[str, ...] = ()
    deleted: tuple[str, ...] = ()
    holding: tuple[str, ...] = ()
    left: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return not self.holding


@runtime_checkable
class DrainsPods(Protocol):
    """Optional: a scheduler that can move a cordoned node's pods off it (Kubernetes).

    Called once per poll of a drain: `critical` evicts every workload at once;
    `deadline_passed` lets pods whose policy waits for the deadline be deleted.
    """

    def drain_pods(self, node: str, critical: bool = False, deadline_passed: bool = False) -> PodDrainProgress: ...


@runtime_checkable
class ReadsNodeStates(Protocol):
    """Optional: the states of many nodes in one call (Slurm: one sinfo), so that a watch over
    a 10,000-node fleet asks its scheduler once a round, not once a node. Only the nodes the
    scheduler knows are in the answer; SchedulerError when it cannot be asked at all."""

    def node_states(self, nodes: Sequence[str]) -> dict[str, SchedulerNodeState]: ...


@runtime_checkable
class ReportsNodeState(Protocol):
    """Optional: a scheduler that shows fleetctl's lifecycle state on its own node object
    (Kubernetes: label, conditions, events). Called after every transition."""

    def set_state(self, node: str, state: str, reason: str) -> None: ...
