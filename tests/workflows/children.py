"""The child workflows NodeLifecycle starts, replaced by name: a fake JobRestart ends at once
(a test reads what it was asked from its started event)."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from fleetctl.workflows.api import JobRestartInput, JobRestartResult


@workflow.defn(name="JobRestart")
class FakeJobRestart:
    @workflow.run
    async def run(self, inp: JobRestartInput) -> JobRestartResult:
        return JobRestartResult(job_id=inp.job_id, restart_id=inp.restart_id)
