"""JobHistorySync: started by a Temporal Schedule (`fleetctl schedule create job-sync`, every
minute by default), it reconciles the schedulers' jobs into the database, so the report's
ETTR and the production straggler judge read every job without a `fleetctl job sync` run from
outside, and a job Slurm forgets (MinJobAge, 300 s by default) was recorded before it did."""

from __future__ import annotations

from datetime import timedelta

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from fleetctl.workflows.activities.job_history import JobHistoryActivities
    from fleetctl.workflows.api import JobSyncInput, JobSyncResult
    from fleetctl.workflows.definitions.shared import MESSAGE, ActivityOptions, bulk

# One squeue per scheduler, each given up after the adapter's own timeout (30 s); a
# scheduler that cannot be asked is an error in the result, not a failed activity, so the
# retries are for the database only (a run that outlasts its interval skips the next). A scan
# of every scheduler's jobs: in the bulk lane.
SYNC: ActivityOptions = {**MESSAGE, "start_to_close_timeout": timedelta(minutes=2)}


@workflow.defn
class JobHistorySync:
    @workflow.run
    async def run(self, req: JobSyncInput) -> JobSyncResult:
        return await workflow.execute_activity_method(JobHistoryActivities.sync_job_history, req, **bulk(SYNC))
