"""Where the agent's events go: to the node's workflow in Temporal (TemporalTransport:
every workflows import of the agent is here), or through the intake with the node's own
credential (IntakeTransport), so that the agent holds nothing that speaks for another node."""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from typing import TYPE_CHECKING

from fleetctl.agent.spool import Event
from fleetctl.config import Settings, xid_policy
from fleetctl.workflows.client import CommandRejected, TemporalUnavailable, connect, send_health_events
from fleetctl.workflows.health_events import health_event

if TYPE_CHECKING:
    from temporalio.client import Client

# A send that takes longer is a Temporal that is not answering: the events stay spooled.
SEND_TIMEOUT_S = 10.0


class SendFailed(RuntimeError):
    """Temporal did not take the events: unreachable, or too slow. Retry later."""


class NodeRefused(SendFailed):
    """Temporal answered, and the node has no workflow to take them (not in the inventory)."""


class TemporalTransport:
    """Signals each event to its node's workflow, built by the one constructor of a health
    event (its severity the site's Xid policy's, or the sender's when graver): the agent's
    events and the intake's alike."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.policy = xid_policy(settings)  # read once: a broken file refuses the process's start
        self._client: Client | None = None

    async def send(self, node: str, events: list[Event]) -> None:
        try:
            if self._client is None:
                self._client = await connect(self.settings)
            await asyncio.wait_for(
                send_health_events(self._client, node, [health_event(**e, policy=self.policy) for e in events]),
                SEND_TIMEOUT_S,
            )
        except CommandRejected as exc:
            if "not found" in str(exc).lower():  # the server's answer for a workflow id it does not know
                raise NodeRefused(str(exc)) from None
            raise SendFailed(str(exc)) from None
        except (TimeoutError, TemporalUnavailable, RuntimeError, OSError) as exc:
            raise SendFailed(str(exc).splitlines()[0] if str(exc) else exc.__class__.__name__) from None


class IntakeTransport:
    """POST /events to the intake (`fleetctl events serve`) with this node's credential: over
    https, or http to this machine only, the certificate verified, no redirect followed
    (fleetctl.agent.heartbeat.intake_url). The intake names the node's events `agent` and
    takes them for this node only; one it does not know is refused (NodeRefused)."""

    def __init__(self, base_url: str, token: str, ca_path: str | None = None, timeout_s: float = SEND_TIMEOUT_S):
        from fleetctl.agent.heartbeat import intake_opener, intake_url

        self.url, self.timeout_s = intake_url(base_url, "/events"), timeout_s
        self._token = token
        self._opener = intake_opener(ca_path)

    async def send(self, node: str, events: list[Event]) -> None:
        body = json.dumps(
            {
                "events": [
                    {
                        "node": e["node"],
                        "code": e["code"],
                        "message": e["message"],
                        "id": e["event_id"],
                        "at": e["at"],
                        "severity": e["severity"],
                        # absent from events spooled by an older agent
                        **({"signature": e["signature"]} if e.get("signature") else {}),
                        **({"gpu": e["gpu"]} if e.get("gpu") else {}),
                        **(
                            {
                                "repeat_count": e["repeat_count"],
                                "first_seen": e["first_seen"],
                                "last_seen": e["last_seen"],
                            }
                            if e.get("repeat_count", 1) > 1
                            else {}
                        ),
                    }
                    for e in events
                ]
            }
        ).encode()
        await asyncio.to_thread(self._post, body)

    def _post(self, body: bytes) -> None:
        request = urllib.request.Request(
            self.url,
            data=body,
            method="POST",
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {self._token}"},
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as answer:
                answer.read()
        except urllib.error.HTTPError as exc:
            said = exc.read(300).decode(errors="replace").strip().splitlines()
            why = f"the intake answered {exc.code}" + (f": {said[0]}" if said else "")
            raise (NodeRefused if exc.code == 422 else SendFailed)(why) from None
        except (urllib.error.URLError, OSError) as exc:
            raise SendFailed(str(getattr(exc, "reason", exc))[:200]) from None
