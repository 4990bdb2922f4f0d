"""The interface every scheduler adapter implements (Slurm, Kubernetes, simulated)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

# Every drain reason fleetctl writes starts with this, so fleetctl can tell its own drains
# from an operator's and only resume what it drained (unless forced).
REASON_PREFIX = "fleetctl:"


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


class SchedulerError(Exception):
    """The scheduler refused or could not be reached; callers retry with backoff."""


class FleetctlDoesNotOwnDrain(SchedulerError):
    """A resume was refused: the node was drained (or downed) by someone other than fleetctl.

    Retrying does not help; an operator decides, and can resume with force.
    """


class Scheduler(Protocol):
    def drain(self, node: str, reason: str) -> None: ...

    def resume(self, node: str, force: bool = False) -> None: ...

    def node_state(self, node: str) -> SchedulerNodeState: ...

    def jobs_on_node(self, node: str) -> list[SchedulerJob]: ...

    # Every node running work now, in one call for the whole cluster (an active-check sweep
    # over 10,000 nodes must not ask node by node).
    def busy_nodes(self) -> set[str]: ...

    def job(self, job_id: str) -> SchedulerJob: ...

    def restart_job(self, job_id: str, exclude_nodes: Sequence[str]) -> None: ...
