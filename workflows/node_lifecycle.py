"""NodeLifecycle: one long-running workflow per node (id `node/<name>`), the sole writer of
that node's state.

Modelled on Temporal's safe_message_handlers sample: one state dataclass in and out, a lock
so handlers never interleave their activity calls, an idempotency guard keyed by request id,
and continue-as-new only after every handler has finished.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from datetime import timedelta

from temporalio import workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError

with workflow.unsafe.imports_passed_through():
    from fleetctl.lifecycle import IllegalTransition, NodeState, next_state
    from workflows.activities import LifecycleActivities, TransitionRecord

# Bounded memory of answered requests: a CLI that retries an update after a network blip
# gets the first answer back instead of a second transition.
RECENT_REQUESTS_KEPT = 64


def workflow_id_for(node: str) -> str:
    return f"node/{node}"


@dataclass
class TransitionRequest:
    trigger: str
    actor: str
    actor_kind: str = "operator"
    cause: str = ""
    request_id: str = ""


@dataclass
class TransitionResult:
    node: str
    from_state: str
    to_state: str
    state_version: int
    trigger: str
    actor: str
    # True when this answer came from the idempotency guard, not a new transition.
    repeated: bool = False


@dataclass
class NodeLifecycleState:
    node: str
    state: str = NodeState.NEW.value
    state_version: int = 0
    recent_requests: dict[str, TransitionResult] = field(default_factory=dict)
    # Continue-as-new after this many transitions in one run (Temporal may suggest sooner).
    transitions_per_run: int = 500


@workflow.defn
class NodeLifecycle:
    @workflow.init
    def __init__(self, state: NodeLifecycleState) -> None:
        self.s = state
        self.lock = asyncio.Lock()
        self.transitions_this_run = 0

    @workflow.run
    async def run(self, state: NodeLifecycleState) -> NodeLifecycleState:
        while True:
            await workflow.wait_condition(
                lambda: self.s.state == NodeState.RETIRED.value or self._should_continue_as_new()
            )
            await workflow.wait_condition(workflow.all_handlers_finished)
            if self.s.state == NodeState.RETIRED.value:
                return self.s
            workflow.continue_as_new(self.s)

    def _should_continue_as_new(self) -> bool:
        return (
            workflow.info().is_continue_as_new_suggested()
            or self.transitions_this_run >= self.s.transitions_per_run
        )

    @workflow.update
    async def transition(self, req: TransitionRequest) -> TransitionResult:
        async with self.lock:
            if req.request_id and req.request_id in self.s.recent_requests:
                previous = self.s.recent_requests[req.request_id]
                return TransitionResult(**{**previous.__dict__, "repeated": True})
            # The validator ran before we held the lock; another handler may have moved the
            # node since. Check again so two racing commands give exactly one transition.
            target = self._target_or_reject(req)
            return await self._apply(req, target)

    @transition.validator
    def validate_transition(self, req: TransitionRequest) -> None:
        if req.request_id and req.request_id in self.s.recent_requests:
            return
        self._target_or_reject(req)

    @workflow.query
    def current(self) -> NodeLifecycleState:
        return self.s

    def _target_or_reject(self, req: TransitionRequest) -> str:
        try:
            return next_state(self.s.state, req.trigger, req.actor_kind).value
        except (IllegalTransition, ValueError) as exc:
            raise ApplicationError(f"{self.s.node}: {exc}", type="IllegalTransition", non_retryable=True) from None

    async def _apply(self, req: TransitionRequest, target: str) -> TransitionResult:
        info = workflow.info()
        record = TransitionRecord(
            node_name=self.s.node,
            from_state=self.s.state,
            to_state=target,
            trigger=req.trigger,
            cause=req.cause,
            actor=req.actor,
            actor_kind=req.actor_kind,
            workflow_id=info.workflow_id,
            run_id=info.run_id,
            expected_version=self.s.state_version,
            # The workflow is the only writer, so (node, version) names this transition uniquely.
            idempotency_key=f"{info.workflow_id}@{self.s.state_version + 1}",
        )
        version = await workflow.execute_activity_method(
            LifecycleActivities.record_transition,
            record,
            start_to_close_timeout=timedelta(seconds=30),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(milliseconds=200),
                maximum_interval=timedelta(seconds=10),
                non_retryable_error_types=["StaleStateVersion", "UnknownNode"],
            ),
        )
        result = TransitionResult(
            node=self.s.node, from_state=self.s.state, to_state=target, state_version=version,
            trigger=req.trigger, actor=req.actor,
        )
        self.s.state, self.s.state_version = target, version
        self.transitions_this_run += 1
        if req.request_id:
            self.s.recent_requests[req.request_id] = result
            while len(self.s.recent_requests) > RECENT_REQUESTS_KEPT:
                self.s.recent_requests.pop(next(iter(self.s.recent_requests)))
        return result
