"""The intake's road to the node workflows: one signal an event, and Temporal's answer told
apart, since what waits on it differs (fleetctl.intake.delivery):

    NodeRefused  the node has no workflow (not found, or ended)        that node's events wait
    NodeFailed   the node's workflow refused the signal (its signal    that node's events wait
                 limit, a payload too large, ...)
    SendFailed   Temporal did not answer (unreachable, too slow,       every node's events wait
                 unavailable)
"""

from __future__ import annotations

import asyncio

from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from fleetctl.agent.spool import Event
from fleetctl.agent.transport import NodeRefused, SendFailed
from fleetctl.config import Settings
from fleetctl.text import one_line
from fleetctl.workflows.api import HEALTH_EVENT_SIGNAL, HealthEventInput, node_workflow_id
from fleetctl.workflows.client import TemporalUnavailable, connect

# A signal Temporal has not taken in this long is a Temporal that is not answering.
SIGNAL_TIMEOUT_S = 5.0
# Answers about the one workflow a signal was for; any other error is Temporal's own.
NODE_ANSWERS = frozenset(
    {
        RPCStatusCode.INVALID_ARGUMENT,  # the workflow's signal limit, a payload past the blob limit
        RPCStatusCode.FAILED_PRECONDITION,
        RPCStatusCode.RESOURCE_EXHAUSTED,
        RPCStatusCode.OUT_OF_RANGE,
        RPCStatusCode.ALREADY_EXISTS,
        RPCStatusCode.ABORTED,
    }
)


class NodeFailed(SendFailed):
    """Temporal answered that this node's workflow does not take the signal."""


class WorkflowSignals:
    def __init__(self, settings: Settings, timeout_s: float = SIGNAL_TIMEOUT_S):
        self.settings, self.timeout_s = settings, timeout_s
        self._client: Client | None = None

    async def send(self, node: str, events: list[Event]) -> None:
        """Signal each event in order; the first that is not taken raises (those before it went)."""
        try:
            client = self._client or await connect(self.settings)
        except (TemporalUnavailable, OSError, RuntimeError) as exc:
            raise SendFailed(one_line(exc, 200)) from None
        self._client = client
        handle = client.get_workflow_handle(node_workflow_id(node))
        for event in events:
            try:
                await asyncio.wait_for(handle.signal(HEALTH_EVENT_SIGNAL, HealthEventInput(**event)), self.timeout_s)
            except RPCError as exc:
                why = f"{node}: {one_line(exc, 200)}"
                if exc.status == RPCStatusCode.NOT_FOUND:
                    raise NodeRefused(why) from None
                raise (NodeFailed if exc.status in NODE_ANSWERS else SendFailed)(why) from None
            except (TimeoutError, OSError, RuntimeError) as exc:
                raise SendFailed(one_line(exc, 200)) from None
