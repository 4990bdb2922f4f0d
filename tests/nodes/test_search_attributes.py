"""The search attributes' names, types and values (fleetctl.nodes.search_attributes), table-driven.
The real server's side is tests/production/test_search_attributes.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from temporalio.common import SearchAttributeIndexedValueType as Type
from temporalio.common import SearchAttributePair, TypedSearchAttributes

from fleetctl.nodes.search_attributes import (
    CAUSE_LIMIT,
    GPU_PROFILE,
    LAST_CAUSE,
    NODE_ATTRIBUTES,
    NODE_STATE,
    RACK,
    STATE_SINCE,
    compare_registered,
    dev_server_flags,
    node_details,
    start_attributes,
    transition_updates,
)

ALL_RIGHT = {k.name: k.indexed_value_type for k in NODE_ATTRIBUTES}
SINCE = datetime(2026, 11, 30, 22, 5, 7, tzinfo=UTC)


@pytest.mark.parametrize(
    "registered, missing, conflicts",
    [
        ({}, [k.name for k in NODE_ATTRIBUTES], []),
        (ALL_RIGHT, [], []),
        ({**ALL_RIGHT, "CustomerTeam": Type.KEYWORD}, [], []),  # another application's: not ours to judge
        ({k: v for k, v in ALL_RIGHT.items() if k != "FleetctlRack"}, ["FleetctlRack"], []),
        ({**ALL_RIGHT, "FleetctlRack": Type.TEXT}, [], ["FleetctlRack is registered as Text, fleetctl needs Keyword"]),
        (
            {**ALL_RIGHT, "FleetctlStateSince": Type.INT},
            [],
            ["FleetctlStateSince is registered as Int, fleetctl needs Datetime"],
        ),
        (
            {**ALL_RIGHT, "FleetctlNodeState": 99},
            [],
            ["FleetctlNodeState is registered as type 99, fleetctl needs Keyword"],
        ),
    ],
)
def test_compare_registered(registered, missing, conflicts):
    found_missing, found_conflicts = compare_registered(registered)
    assert ([k.name for k in found_missing], found_conflicts) == (missing, conflicts)


def test_the_dev_server_registers_every_attribute_with_its_type():
    flags = dev_server_flags()
    attributes, server = flags[: 2 * len(NODE_ATTRIBUTES)], flags[2 * len(NODE_ATTRIBUTES) :]
    assert attributes[::2] == ["--search-attribute"] * len(NODE_ATTRIBUTES)
    assert attributes[1::2] == [
        "FleetctlNodeState=Keyword",
        "FleetctlFleet=Keyword",
        "FleetctlRack=Keyword",
        "FleetctlGpuProfile=Keyword",
        "FleetctlScheduler=Keyword",
        "FleetctlLastCause=Text",
        "FleetctlStateSince=Datetime",
        "FleetctlQueuedSince=Datetime",
    ]
    # The server flags workflows whose tasks keep failing (TemporalReportedProblems): Stalled.
    assert server == ["--dynamic-config-value", "system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute=2"]


def _applied(updates) -> dict:
    return {u.key.name: u.value for u in updates}


def test_a_transition_sets_every_attribute():
    updates = transition_updates("maintenance", "drained: XID 79", SINCE, "fleet-a", "r12", "h100-sxm", "slurm")
    assert _applied(updates) == {
        "FleetctlNodeState": "maintenance",
        "FleetctlLastCause": "drained: XID 79",
        "FleetctlStateSince": SINCE,
        "FleetctlFleet": "fleet-a",
        "FleetctlRack": "r12",
        "FleetctlGpuProfile": "h100-sxm",
        "FleetctlScheduler": "slurm",
    }


def test_an_empty_fact_unsets_its_attribute_rather_than_match_the_empty_string():
    applied = _applied(transition_updates("production", "admitted", SINCE, "fleet-a", "", "h100-sxm", ""))
    assert applied[RACK.name] is None and applied["FleetctlScheduler"] is None
    assert applied[GPU_PROFILE.name] == "h100-sxm"


@pytest.mark.parametrize(
    "cause, shown",
    [
        (
            "burn-in: nccl-allreduce: fail: bus bandwidth 310 GB/s",
            "burn-in: nccl-allreduce: fail: bus bandwidth 310 GB/s",
        ),
        ("health: XID 79\nGPU has fallen off the bus", "health: XID 79 GPU has fallen off the bus"),
        ("kernel: \x1b]0;owned\x07 title", "kernel: \\x1b]0;owned\\x07 title"),
        ("x" * 5000, "x" * (CAUSE_LIMIT - 1) + "…"),
    ],
)
def test_the_cause_is_one_bounded_line_without_control_characters(cause, shown):
    assert _applied(transition_updates("draining", cause, SINCE, "f", "r", "p", "s"))[LAST_CAUSE.name] == shown


def test_a_node_starts_findable_by_its_state():
    assert start_attributes("production") == TypedSearchAttributes([SearchAttributePair(NODE_STATE, "production")])


@pytest.mark.parametrize(
    "attributes, details",
    [
        ([], "**new**: waiting for events"),
        (
            [SearchAttributePair(STATE_SINCE, SINCE), SearchAttributePair(LAST_CAUSE, "drained: fan")],
            "**new** since 2026-11-30 22:05:07 UTC: waiting for events\n\nlast cause: drained: fan",
        ),
    ],
)
def test_details_say_the_state_since_when_and_the_last_cause(attributes, details):
    assert node_details("new", TypedSearchAttributes(attributes)) == details


@pytest.mark.parametrize(
    "activity, outcome, first",
    [
        ("draining: jobs", "", "**draining** since 2026-11-30 22:05:07 UTC: draining: jobs"),  # node show's words
        (
            "",
            "drained: xid 79; no runbook handles it: waiting for an operator",
            "**draining** since 2026-11-30 22:05:07 UTC: waiting for an operator",
        ),
        ("", "recheck quick: passed", "**draining** since 2026-11-30 22:05:07 UTC: waiting for events"),
        (
            "admit: waiting for job sim-1_[2] to end",
            "",
            "**draining** since 2026-11-30 22:05:07 UTC: admit: waiting for job sim-1\\_\\[2\\] to end",
        ),
    ],
)
def test_details_lead_with_what_the_node_does_or_waits_for(activity, outcome, first):
    attributes = TypedSearchAttributes([SearchAttributePair(STATE_SINCE, SINCE)])
    assert node_details("draining", attributes, outcome, activity).split("\n\n")[0] == first


# Text a kernel or a person wrote, as it reaches the details (a Slurm reason, an XID message).
@pytest.mark.parametrize(
    "cause, shown",
    [
        ("NHC: **check_hw_ib**: no port", "NHC: \\*\\*check\\_hw\\_ib\\*\\*: no port"),  # no bold
        ("see [runbook](http://evil.example)", "see \\[runbook\\](http://evil.example)"),  # no link
        ("<img src=x onerror=alert(1)>", "\\<img src=x onerror=alert(1)\\>"),  # no HTML
        ("line one\n# heading", "line one \\# heading"),  # one line, no heading
        ("`rm -rf` | ~~x~~", "\\`rm -rf\\` \\| \\~\\~x\\~\\~"),
    ],
)
def test_recorded_text_reaches_the_details_escaped(cause, shown):
    details = node_details("draining", TypedSearchAttributes([SearchAttributePair(LAST_CAUSE, cause)]))
    assert details.split("\n\n")[1] == f"last cause: {shown}"


@pytest.mark.parametrize(
    "outcome, last",
    [
        (
            "drained: xid 79; no runbook handles it: waiting for an operator",
            "last: drained: xid 79; no runbook handles it: waiting for an operator",
        ),  # as `node show` says it
        ("drained: xid 79; remediation: xid-79-fallen-off-bus", None),  # automation goes on: the cause says enough
        ("", None),
    ],
)
def test_details_say_when_the_node_waits_for_an_operator(outcome, last):
    details = node_details(
        "maintenance", TypedSearchAttributes([SearchAttributePair(LAST_CAUSE, "drained: xid 79")]), outcome
    ).split("\n\n")
    assert details[1] == "last cause: drained: xid 79"
    assert details[2:] == ([last] if last else [])
