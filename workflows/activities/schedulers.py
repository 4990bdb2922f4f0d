"""One scheduler adapter per kind per worker process (the Kubernetes one holds an API client)."""

from __future__ import annotations

import threading

from temporalio.exceptions import ApplicationError

from fleetctl.config import Settings
from fleetctl.inventory.names import scheduler_members
from fleetctl.schedulers import scheduler_for
from fleetctl.schedulers.base import Scheduler
from fleetctl.schedulers.combined import CombinedScheduler


class SchedulerRegistry:
    def __init__(self, settings: Settings, executors=None):
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

    def _slurm_runner(self, kind: str):
        if kind != "slurm":
            return None
        from fleetctl.connections.slurm_client import slurm_runner

        return slurm_runner(self.settings, self.executors)
