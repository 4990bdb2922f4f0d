"""Jobs reconciled from their schedulers into the database, for the reliability figures.

Every scheduler the inventory uses that can list its jobs (`ListsJobHistory`: Slurm,
Kubernetes from its jobs' pods, the simulated scheduler) is asked once; what it says is written by `fleetctl.db.jobs.reconcile_jobs`,
the same path for every scheduler, so the report reads real and simulated jobs alike. The
restarts fleetctl ran are already in the database (JobRestart writes them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from fleetctl.checks.profiles import UnknownProfile, load_profile
from fleetctl.db import jobs as store
from fleetctl.db.queries import list_nodes
from fleetctl.schedulers import JOB_HISTORY_KINDS
from fleetctl.schedulers.base import ListsJobHistory, SchedulerError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine


@dataclass
class SyncResult:
    jobs: dict[str, int] = field(default_factory=dict)  # scheduler -> jobs it listed
    errors: dict[str, str] = field(default_factory=dict)  # scheduler -> why it could not be asked
    skipped: list[str] = field(default_factory=list)  # schedulers that cannot list their jobs


def sync_jobs(
    engine: Engine, kinds: Sequence[str], scheduler_for: Callable[[str], ListsJobHistory], now: datetime
) -> SyncResult:
    """Ask each scheduler of `kinds` that can list its jobs for them and write them; one
    scheduler's error (a setting, the scheduler unreachable) leaves the others'."""
    result = SyncResult()
    gpus = _gpus_per_node(engine)
    for kind in kinds:
        if kind not in JOB_HISTORY_KINDS:
            result.skipped.append(kind)
            continue
        try:
            observed = scheduler_for(kind).job_history()
        except (SchedulerError, ValueError) as exc:
            result.errors[kind] = str(exc)
            continue
        result.jobs[kind] = store.reconcile_jobs(engine, kind, observed, now, gpus)
    return result


def _gpus_per_node(engine: Engine) -> Callable[[Sequence[str]], int | None]:
    """A job's GPUs per node from the profile of its first node the inventory knows."""
    profiles = {n.name: n.profile for n in list_nodes(engine)}
    counts: dict[str, int | None] = {}

    def count(profile: str) -> int | None:
        if profile not in counts:
            try:
                counts[profile] = load_profile(profile).gpu_count
            except UnknownProfile:
                counts[profile] = None
        return counts[profile]

    def per_node(nodes: Sequence[str]) -> int | None:
        known = [profiles[n] for n in nodes if n in profiles]
        return count(known[0]) if known else None

    return per_node
