"""What every activity class that reads or writes the database shares, and the errors that
say its data is bad."""

from __future__ import annotations

from temporalio.exceptions import ApplicationError

from fleetctl.nodes.capacity import in_fleet
from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node

# Raised for input no retry can fix (a number too large for its column, a value that fails
# validation): the presets in workflows.definitions.shared list it as non-retryable, so the
# activity fails once, the caller records why, and the node's work queue moves on.
BAD_DATA = "BadData"


def bad_data(message: str) -> ApplicationError:
    return ApplicationError(message, type=BAD_DATA, non_retryable=True)


class DatabaseActivities:
    def __init__(self, settings: Settings):
        self.settings = settings

    @property
    def engine(self):
        return get_engine(self.settings.db_url)

    def _fleet_nodes(self, fleet: str, state: str | None = None) -> list[Node]:
        """The fleet's nodes (in `state`, if given): labelled with it, or with no fleet label."""
        return [n for n in queries.list_nodes(self.engine, state=state)
                if in_fleet(n.labels, fleet)]

    def _node(self, name: str) -> Node:
        node = queries.get_node(self.engine, name)
        if node is None:
            raise ApplicationError(f"unknown node {name}", type="UnknownNode", non_retryable=True)
        return node
