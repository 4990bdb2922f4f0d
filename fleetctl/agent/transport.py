"""The agent's one door to Temporal: every workflows import of the agent is here."""

from __future__ import annotations

import asyncio

from fleetctl.config import Settings
from workflows.api import HealthEventInput
from workflows.client import CommandRejected, TemporalUnavailable, connect, send_health_events

# A send that takes longer is a Temporal that is not answering: the events stay spooled.
SEND_TIMEOUT_S = 10.0


class SendFailed(RuntimeError):
    """Temporal did not take the events: unreachable, or too slow. Retry later."""


class NodeRefused(SendFailed):
    """Temporal answered, and the node has no workflow to take them (not in the inventory)."""


class TemporalTransport:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._client = None

    async def send(self, node: str, events: list[dict]) -> None:
        try:
            if self._client is None:
                self._client = await connect(self.settings)
            await asyncio.wait_for(send_health_events(self._client, node, [HealthEventInput(**e) for e in events]),
                                   SEND_TIMEOUT_S)
        except CommandRejected as exc:
            if "not found" in str(exc).lower():  # the server's answer for a workflow id it does not know
                raise NodeRefused(str(exc)) from None
            raise SendFailed(str(exc)) from None
        except (TemporalUnavailable, asyncio.TimeoutError, RuntimeError, OSError) as exc:
            raise SendFailed(str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__) from None
