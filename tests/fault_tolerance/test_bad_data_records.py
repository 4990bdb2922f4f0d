"""The record activities on data no row can hold, through the real activities and
database (SQLite and PostgreSQL): text is made storable before it is written (lone
surrogates and NULs replaced, every field bounded, long ids hashed), and what the database
still refuses is bad data: non-retryable for one event, refused alone in a burst, the
refusal recorded where fleet status shows it. Retried, each failed for ever and held up
every event queued behind it, XID 79 included."""

from __future__ import annotations

import pytest
from sqlalchemy import text
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from bench.postgres import fresh_database_url
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.text import MAX_TEXT
from fleetctl.workflows.activities.database import BAD_DATA
from fleetctl.workflows.activities.node import NodeActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import HealthEventBatch, HealthEventInput, TransitionRecord
from tests.support.sim_fleet import make_fleet

T0 = 1_800_000_000.0


class Records:
    def __init__(self, settings) -> None:
        (self.node,) = make_fleet(settings, 1)
        self.engine = get_engine(settings.db_url)
        self.activities = NodeActivities(settings, SchedulerRegistry(settings))

    def event(
        self, event_id: str, code: int | None = 13, message: str = "seen", source: str = "agent"
    ) -> HealthEventInput:
        return HealthEventInput(self.node, source, code, message, "agent", event_id, T0, T0, severity="warning")

    def one(self, ev: HealthEventInput):
        return ActivityEnvironment().run(self.activities.record_health_event, ev)

    def burst(self, *events: HealthEventInput):
        return ActivityEnvironment().run(
            self.activities.record_health_events, HealthEventBatch(self.node, list(events))
        )

    def messages(self) -> dict[int | None, list[str]]:
        out: dict[int | None, list[str]] = {}
        for h in queries.health_events(self.engine, self.node):
            out.setdefault(h.code, []).append(h.message)
        return {code: sorted(messages) for code, messages in out.items()}


@pytest.fixture
def records(make_settings, db_url) -> Records:
    return Records(make_settings(db_url))


@pytest.mark.parametrize(
    "message, stored",
    [
        ("GPU \ud800 garbled", "GPU \ufffd garbled"),  # JSON's "\ud800"
        ("fan \udcff stuck", "fan \ufffd stuck"),  # a byte argv could not decode
        ("nul \x00 byte", "nul \ufffd byte"),  # PostgreSQL's text refuses it
        ("y" * 1_000_000, "y" * (MAX_TEXT - 1) + "…"),
    ],
    ids=["json-surrogate", "argv-surrogate", "nul", "1-mb"],
)
def test_a_message_no_row_can_hold_is_stored_bounded_and_replaced(records, message, stored) -> None:
    records.one(records.event("e1", message=message))
    assert records.messages() == {13: [stored]}


def test_a_burst_with_unstorable_text_records_every_event_and_acts_on_the_xid_79(records) -> None:
    result = records.burst(
        records.event("a", message="\ud800"),
        records.event("b", message="\x00" * 10),
        records.event("c", 79, "GPU has fallen off the bus"),
    )
    assert result.refusals == ["", "", ""] and [v.index for v in result.acted] == [2]
    assert records.messages() == {13: ["\ufffd", "\ufffd" * 10], 79: ["GPU has fallen off the bus"]}


def test_an_event_id_too_long_for_the_unique_index_is_stored_as_its_hash_once(records) -> None:
    """PostgreSQL's btree refuses an index entry over about 2,700 bytes."""
    ev = records.event("\U0001f600" * 5000, message="long id")
    records.one(ev)
    records.one(ev)  # resent: the same hash, recorded once
    (stored,) = queries.health_events(records.engine, records.node)
    assert stored.message == "long id" and len(stored.idempotency_key.encode()) <= 200


def test_a_transition_cause_with_a_lone_surrogate_is_recorded_replaced(records) -> None:
    record = TransitionRecord(
        records.node,
        "new",
        "burn_in",
        "begin_burn_in",
        "operator: PSU \udcff smoke" + "z" * 5000,
        "alice@console",
        "operator",
        "node/x",
        "run",
        0,
        f"node/{records.node}@0",
    )
    ActivityEnvironment().run(records.activities.record_transition, record)
    (event,) = queries.node_events(records.engine, records.node)
    assert event.cause.startswith("operator: PSU \ufffd smoke") and len(event.cause) == MAX_TEXT


# ---- what the database itself refuses: bad data, never retried --------------------------------


@pytest.fixture
def narrow_postgres(make_settings, request) -> Records:
    """A PostgreSQL whose health_events.source takes 8 characters: the database, not our
    code, refuses a longer one (a DataError, "value too long")."""
    records = Records(make_settings(fresh_database_url(request.getfixturevalue("postgres_server"))))
    with records.engine.begin() as conn:
        conn.execute(text("ALTER TABLE health_events ALTER COLUMN source TYPE varchar(8)"))
    return records


@pytest.mark.postgres
def test_a_row_the_database_refuses_is_bad_data_and_not_retried(narrow_postgres) -> None:
    with pytest.raises(ApplicationError) as err:
        narrow_postgres.one(narrow_postgres.event("e1", source="alertmanager"))
    assert err.value.type == BAD_DATA and err.value.non_retryable
    assert "cannot be stored" in err.value.message and "value too long" in err.value.message


@pytest.mark.postgres
def test_a_row_the_database_refuses_in_a_burst_is_refused_alone(narrow_postgres) -> None:
    r = narrow_postgres
    result = r.burst(r.event("a"), r.event("b", source="alertmanager"), r.event("c", 79, "GPU has fallen off the bus"))
    assert result.refusals[0] == "" and result.refusals[2] == "" and "value too long" in result.refusals[1]
    assert [v.index for v in result.acted] == [2]
    assert r.messages() == {13: ["seen"], 79: ["GPU has fallen off the bus"]}
    (refused,) = [a for a in queries.automation_events(r.engine) if a.kind == "rejected"]
    assert refused.node_name == r.node and "cannot be stored" in refused.reason
