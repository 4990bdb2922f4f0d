"""A workflow that only receives a health event and answers what it decoded: it shows
which converter the worker's workflow sandbox decodes signals with."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from fleetctl.workflows.api import HealthEventInput


@workflow.defn(name="ConverterProbe")
class ConverterProbe:
    def __init__(self) -> None:
        self.event: HealthEventInput | None = None

    @workflow.run
    async def run(self) -> list:
        await workflow.wait_condition(lambda: self.event is not None)
        assert self.event is not None
        return [type(self.event).__name__, self.event.node, self.event.code, self.event.at_from_record]

    @workflow.signal
    def health_event(self, ev: HealthEventInput) -> None:
        self.event = ev
