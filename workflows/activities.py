"""Activities: small, idempotent, the only place workflows reach the database or nodes."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.capacity import CheckErrorReport, RemovalDecision, RemovalRequest
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node


@dataclass
class TransitionRecord:
    node_name: str
    from_state: str
    to_state: str
    trigger: str
    cause: str
    actor: str
    actor_kind: str
    workflow_id: str
    run_id: str
    expected_version: int
    idempotency_key: str


class DatabaseActivities:
    """What every activity class that reads or writes the database shares."""

    def __init__(self, settings: Settings):
        self.settings = settings

    @property
    def engine(self):
        return get_engine(self.settings.db_url)

    def _node(self, name: str) -> Node:
        node = queries.get_node(self.engine, name)
        if node is None:
            raise ApplicationError(f"unknown node {name}", type="UnknownNode", non_retryable=True)
        return node


class LifecycleActivities(DatabaseActivities):

    @activity.defn
    def record_transition(self, record: TransitionRecord) -> int:
        try:
            return queries.record_transition(self.engine, **record.__dict__)
        except queries.StaleStateVersion as exc:
            raise ApplicationError(str(exc), type="StaleStateVersion", non_retryable=True) from None
        except LookupError as exc:
            raise ApplicationError(str(exc), type="UnknownNode", non_retryable=True) from None


@dataclass
class NodeCommand:
    """Another workflow (remediation, job restart, a sweep) asks a node's workflow to move."""

    node: str
    trigger: str
    actor: str
    cause: str = ""
    actor_kind: str = "automation"
    # Stable per step (e.g. "<workflow id>/<step>"), so a retried activity is not a second request.
    request_id: str = ""
    # What the node did wrong (fleetctl.runbooks.Event.to_dict()): picks its remediation.
    event: dict | None = None


@dataclass
class NodeCommandOutcome:
    node: str
    accepted: bool
    from_state: str = ""
    to_state: str = ""
    message: str = ""


class NodeCommandActivities:
    """Workflows cannot send Updates to other workflows; these activities do it for them."""

    def __init__(self, client, settings: Settings):
        self.client = client
        self.settings = settings

    @activity.defn
    async def ask_capacity_guard(self, req: RemovalRequest) -> RemovalDecision:
        from workflows.starter import ask_capacity_guard

        return await ask_capacity_guard(self.client, self.settings, req)

    @activity.defn
    async def report_check_errors(self, report: CheckErrorReport) -> None:
        from workflows.starter import report_check_errors

        await report_check_errors(self.client, self.settings, report)

    @activity.defn
    async def command_node(self, cmd: NodeCommand) -> NodeCommandOutcome:
        from workflows.starter import CommandRejected, request_transition

        try:
            r = await request_transition(self.client, cmd.node, cmd.trigger, cmd.actor, cmd.cause, cmd.actor_kind,
                                         request_id=cmd.request_id or None, event=cmd.event)
        except CommandRejected as exc:
            # A refusal is an answer (the node moved on), not a failure to retry.
            return NodeCommandOutcome(cmd.node, False, message=str(exc))
        return NodeCommandOutcome(cmd.node, True, r.from_state, r.to_state)
