"""Activities: small, idempotent, the only place workflows reach the database or nodes."""

from __future__ import annotations

from dataclasses import dataclass

from temporalio import activity
from temporalio.exceptions import ApplicationError

from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine


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


class LifecycleActivities:
    def __init__(self, settings: Settings):
        self.settings = settings

    @property
    def engine(self):
        return get_engine(self.settings.db_url)

    @activity.defn
    def record_transition(self, record: TransitionRecord) -> int:
        try:
            return queries.record_transition(self.engine, **record.__dict__)
        except queries.StaleStateVersion as exc:
            raise ApplicationError(str(exc), type="StaleStateVersion", non_retryable=True) from None
        except LookupError as exc:
            raise ApplicationError(str(exc), type="UnknownNode", non_retryable=True) from None
