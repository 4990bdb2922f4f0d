"""A burst of health events recorded by the real activity in one transaction: the verdicts
and escalation counts must be exactly those of recording the events one by one, a bad event
is refused alone, and an event without a code drains when its sender calls it critical."""

from __future__ import annotations

import pytest
from temporalio.testing import ActivityEnvironment

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.workflows.activities.node import NodeActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import HealthEventBatch, HealthEventInput
from tests.support.sim_fleet import make_fleet

T0 = 1_800_000_000.0
WARNING_XID = 94  # contained ECC: the third within 24 h drains the node


@pytest.fixture
def burst(make_settings, sqlite_url):
    """record(events) -> HealthEventBatchResult, through the real activity and database."""
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1)
    activities = NodeActivities(settings, SchedulerRegistry(settings))

    sent = 0

    def record(*events: tuple) -> object:
        nonlocal sent
        batch = []
        for code, event_id, message, severity in events:
            sent += 1  # a minute apart, in the order given
            batch.append(
                HealthEventInput(
                    node, "agent", code, message, "agent", event_id, T0 + 60 * sent, T0 + 60 * sent, severity=severity
                )
            )
        return ActivityEnvironment().run(activities.record_health_events, HealthEventBatch(node, batch))

    record.node, record.engine = node, get_engine(settings.db_url)
    return record


def ev(code, event_id, message="seen", severity=""):
    return (code, event_id, message, severity)


def test_a_burst_escalates_exactly_as_the_same_events_one_by_one(burst) -> None:
    result = burst(
        ev(WARNING_XID, "a"), ev(13, "b"), ev(WARNING_XID, "c"), ev(WARNING_XID, "d"), ev(WARNING_XID, "d")
    )  # "d" resent within the burst: one event, not a fourth
    assert [v.index for v in result.acted] == [3, 4]  # only what drains comes back to act on
    assert "seen 3 times" in result.acted[0].reason and result.refusals == [""] * 5
    assert len(queries.health_events(burst.engine, burst.node)) == 4
    # the next burst sees the first one's events
    (fifth,) = burst(ev(WARNING_XID, "e")).acted
    assert fifth.reason.startswith(f"XID {WARNING_XID} seen 4 times")


def test_a_bad_event_is_refused_alone_and_recorded_as_refused(burst) -> None:
    result = burst(ev(2**40, "too-large"), ev(None, "bad-word", severity="urgent"), ev(13, "fine"))
    assert "outside 0.." in result.refusals[0]
    assert "'urgent' is not one of info, warning, critical" in result.refusals[1]
    assert result.refusals[2] == "" and result.last_reason.startswith("XID 13")
    assert [h.code for h in queries.health_events(burst.engine, burst.node)] == [13]
    refused = [a for a in queries.automation_events(burst.engine) if a.kind == "rejected"]
    assert len(refused) == 2 and all(a.node_name == burst.node for a in refused)


@pytest.mark.parametrize(
    "severity, drains",
    [
        ("critical", True),  # an NVSwitch fatal SXid, a GPU count below the profile: no Xid to judge by
        ("warning", False),
        ("", False),  # not said: a warning, as an operator's report always was
    ],
)
def test_an_event_without_a_code_drains_when_sent_as_critical(burst, severity, drains) -> None:
    acted = burst(ev(None, "sxid", "NVSwitch fatal SXid 24007", severity)).acted
    assert [(v.drain_now, v.critical) for v in acted] == ([(True, True)] if drains else [])
    (stored,) = queries.health_events(burst.engine, burst.node)
    assert stored.severity == (severity or "warning")


def test_a_sender_cannot_make_a_minor_xid_drain_by_calling_it_critical(burst) -> None:
    assert burst(ev(13, "x", severity="critical")).acted == []
    (stored,) = queries.health_events(burst.engine, burst.node)
    assert stored.severity == "info"
