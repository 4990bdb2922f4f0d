"""What every activity class that reads or writes the database shares, and the errors that
say its data is bad."""

from __future__ import annotations

import hashlib

from sqlalchemy.engine import Engine
from sqlalchemy.exc import DataError
from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node
from fleetctl.nodes.capacity import in_fleet
from fleetctl.text import bounded, one_line

# Raised for input no retry can fix (a number too large for its column, a value that fails
# validation): the presets in workflows.definitions.shared list it as non-retryable, so the
# activity fails once, the caller records why, and the node's work queue moves on.
BAD_DATA = "BadData"


# What a row that cannot be stored raises, whatever the retry: text that cannot be encoded,
# a value the column refuses (too long, out of range, a NUL in PostgreSQL's text), a number
# that is no date. An activity turns them into bad_data; retried, they failed for ever and
# held up every event queued behind them.
BAD_DATA_ERRORS = (UnicodeError, DataError, OverflowError)
# An idempotency key longer than this (UTF-8 bytes) is stored as its hash: PostgreSQL's
# unique index refuses entries over about 2,700 bytes.
MAX_KEY_BYTES = 200


def bad_data(message: str) -> ApplicationError:
    return ApplicationError(message, type=BAD_DATA, non_retryable=True)


def not_storable(what: str, exc: BaseException) -> ApplicationError:
    """bad_data for a row the database refused: what it was, and the database's one line."""
    return bad_data(bounded(f"{what} cannot be stored: {one_line(exc)}"))


def storable_key(key: str) -> str:
    """An idempotency key as its unique index holds it: as it is when short and storable,
    else its hash (the same on every attempt, so a retry still finds the row)."""
    raw = key.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_KEY_BYTES and bounded(key) == key:
        return key
    return "sha256:" + hashlib.sha256(raw).hexdigest()


def stored_id(row_id: int | None) -> int:
    """The id of a row read from the database, or written to it (an id is None only before
    the row is stored)."""
    if row_id is None:
        raise ValueError("a row not yet stored has no id")
    return row_id


def calling_workflow_id() -> str:
    """The id of the workflow this activity runs for: every activity here is one of a
    workflow's (an activity started without one, by a client, has none to record)."""
    workflow_id = activity.info().workflow_id
    if workflow_id is None:
        raise ApplicationError("this activity runs only for a workflow", non_retryable=True)
    return workflow_id


class DatabaseActivities:
    def __init__(self, settings: Settings):
        self.settings = settings

    @property
    def engine(self) -> Engine:
        return get_engine(self.settings.db_url)

    def _fleet_nodes(self, fleet: str, state: str | None = None) -> list[Node]:
        """The fleet's nodes (in `state`, if given): labelled with it, or with no fleet label."""
        return [n for n in queries.list_nodes(self.engine, state=state) if in_fleet(n.labels, fleet)]

    def _node(self, name: str) -> Node:
        node = queries.get_node(self.engine, name)
        if node is None:
            raise ApplicationError(f"unknown node {name}", type="UnknownNode", non_retryable=True)
        return node
