"""The messages a client sends to a node's lifecycle workflow, and the names it sends them by.

Light on purpose: the standard library only. `fleetctl node event` imports this (and the
Temporal client) and nothing of the activity stack, so a critical event reaches its node's
workflow without first importing checks, SQLModel and the executors. Temporal's data
converter serialises a dataclass by its fields, so where a class lives does not change the
payloads it becomes; `workflows.node_activities` re-exports what moved here.
"""

from __future__ import annotations

from dataclasses import dataclass

# NodeLifecycle.health_event, addressed by name (tests/core/test_messages.py checks it
# against the workflow's own definition).
HEALTH_EVENT_SIGNAL = "health_event"


def node_workflow_id(node: str) -> str:
    """The id of a node's NodeLifecycle workflow; the same as workflows.node_lifecycle.workflow_id_for."""
    return f"node/{node}"


@dataclass
class HealthEventInput:
    node: str
    source: str  # "xid", "log", "operator"
    code: int | None = None
    message: str = ""
    actor: str = ""
    # Unique per event (the CLI makes one; a log line's hash for --from-log), so a resent
    # signal is recorded once.
    event_id: str = ""
    at: float = 0.0  # unix time the fault was seen, by the sender's clock
    # Unix time the node's workflow received it, by the server's clock (set there).
    received_at: float = 0.0
