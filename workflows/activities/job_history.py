"""The job history sync's activity: every scheduler the inventory's nodes use that can list
its jobs, reconciled into the database (fleetctl.jobs.history_sync), as `fleetctl job sync`
does by hand."""

from __future__ import annotations

from temporalio import activity

from fleetctl.config import Settings
from fleetctl.db.models import utcnow
from fleetctl.db.queries import list_nodes
from fleetctl.inventory.names import scheduler_members
from fleetctl.jobs.history_sync import sync_jobs
from fleetctl.schedulers import SCHEDULER_KINDS
from fleetctl.workflows.activities.database import DatabaseActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import JobSyncInput, JobSyncResult


class JobHistoryActivities(DatabaseActivities):
    def __init__(self, settings: Settings, schedulers: SchedulerRegistry):
        super().__init__(settings)
        self.schedulers = schedulers

    @activity.defn
    def sync_job_history(self, req: JobSyncInput) -> JobSyncResult:
        used = {kind for n in list_nodes(self.engine) for kind in scheduler_members(n.scheduler)}
        result = sync_jobs(
            self.engine, [kind for kind in SCHEDULER_KINDS if kind in used], self.schedulers.job_lister, utcnow()
        )
        return JobSyncResult(jobs=result.jobs, errors=result.errors, skipped=result.skipped)
