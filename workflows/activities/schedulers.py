"""One scheduler adapter per kind per worker process (the Kubernetes one holds an API client)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from temporalio.exceptions import ApplicationError

from fleetctl.config import Settings
from fleetctl.inventory.names import scheduler_members
from fleetctl.schedulers import scheduler_for
from fleetctl.schedulers.base import ListsJobHistory, Scheduler
from fleetctl.schedulers.combined import CombinedScheduler
from fleetctl.workflows.activities.executors import ExecutorRegistry

if TYPE_CHECKING:
    from fleetctl.schedulers.slurm import CommandRunner


class SchedulerRegistry:
    def __init__(self, settings: Settings, executors: ExecutorRegistry | None = None):
        self.settings = settings
        self.executors = executors  # the worker's ExecutorRegistry: Slurm over SSH shares its pool
        self._schedulers: dict[str, Scheduler] = {}
        self._lock = threading.RLock()  # a combined scheduler is built from its members' entries

    def get(self, kind: str) -> Scheduler:
        with self._lock:
            if kind not in self._schedulers and len(members := scheduler_members(kind)) > 1:
                self._schedulers[kind] = CombinedScheduler([(member, self.get(member)) for member in members])
            if kind not in self._schedulers:
                try:
                    runner = self._slurm_runner(kind)
                    self._schedulers[kind] = (
                        scheduler_for(kind, self.settings)
                        if runner is None
                        else scheduler_for(kind, self.settings, slurm_runner=runner)
                    )
                except ValueError as exc:
                    raise ApplicationError(str(exc), type="UnknownScheduler", non_retryable=True) from None
            return self._schedulers[kind]

    def job_lister(self, kind: str) -> ListsJobHistory:
        """The adapter of `kind` as one that lists its jobs (ValueError: it cannot)."""
        scheduler = self.get(kind)
        if not isinstance(scheduler, ListsJobHistory):
            raise ValueError(f"the {kind} scheduler cannot list its jobs")
        return scheduler

    def _slurm_runner(self, kind: str) -> CommandRunner | None:
        if kind != "slurm":
            return None
        from fleetctl.connections.slurm_client import slurm_runner

        return slurm_runner(self.settings, self.executors)
