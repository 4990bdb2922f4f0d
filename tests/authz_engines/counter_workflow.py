"""A workflow with one signal and one query: what a viewer reads and an operator changes
through the gateway."""

from __future__ import annotations

from temporalio import workflow


@workflow.defn(name="GatewayCounter")
class GatewayCounter:
    def __init__(self) -> None:
        self.bumps = 0

    @workflow.run
    async def run(self) -> int:
        # Runs until the test terminates it: a signal or query is always answered by it.
        await workflow.wait_condition(lambda: False)
        return self.bumps

    @workflow.signal
    def bump(self) -> None:
        self.bumps += 1

    @workflow.query
    def count(self) -> int:
        return self.bumps
