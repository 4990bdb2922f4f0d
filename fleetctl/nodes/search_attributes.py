"""What a node's workflow shows of itself in Temporal: typed search attributes, so operators
find nodes by what they ask (`temporal workflow list --query 'FleetctlNodeState="draining"'`,
the Temporal UI's filters), and the current details `temporal workflow metadata` and the UI
show. Data and plain functions only: the workflow, the client, the dev server and
`fleetctl temporal setup` all take the names and types from here.

A namespace must know an attribute before any workflow sets it, or that workflow's task
fails until it does: `fleetctl dev server` (and every test and benchmark server) registers
them at start, `fleetctl temporal setup` on a cluster, and a worker refuses to start on a
namespace that lacks one. The names carry the `Fleetctl` prefix so they cannot collide with
another application's in a shared namespace.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from temporalio.common import (
    SearchAttributeIndexedValueType,
    SearchAttributeKey,
    SearchAttributePair,
    SearchAttributeUpdate,
    TypedSearchAttributes,
)

from fleetctl.text import one_line

NODE_STATE = SearchAttributeKey.for_keyword("FleetctlNodeState")
FLEET = SearchAttributeKey.for_keyword("FleetctlFleet")
RACK = SearchAttributeKey.for_keyword("FleetctlRack")
GPU_PROFILE = SearchAttributeKey.for_keyword("FleetctlGpuProfile")
SCHEDULER = SearchAttributeKey.for_keyword("FleetctlScheduler")
# Text, not Keyword: `FleetctlLastCause = 'xid'` matches a cause that mentions the word.
LAST_CAUSE = SearchAttributeKey.for_text("FleetctlLastCause")
STATE_SINCE = SearchAttributeKey.for_datetime("FleetctlStateSince")
# When the oldest work still queued on the node's workflow was queued; unset when nothing
# waits. A workflow that stops working its queue leaves it standing, so its age is how a
# stalled node is found (fleetctl.nodes.stalls).
QUEUED_SINCE = SearchAttributeKey.for_datetime("FleetctlQueuedSince")
NODE_ATTRIBUTES = (NODE_STATE, FLEET, RACK, GPU_PROFILE, SCHEDULER, LAST_CAUSE, STATE_SINCE, QUEUED_SINCE)
# Temporal's own (server 1.28 and later): set on a workflow whose workflow tasks failed or
# timed out this many times in a row, cleared by the next that completes.
REPORTED_PROBLEMS = "TemporalReportedProblems"
PROBLEMS_AFTER_FAILED_TASKS = 2

# Temporal refuses a value over 2 KB by default (limit.searchAttributesSizeOfValue); a cause
# carries a check's reason or a kernel message, which can be longer.
CAUSE_LIMIT = 500

# The names `temporal operator search-attribute create --type` and the dev server's
# `--search-attribute NAME=TYPE` take.
TYPE_NAMES: dict[int, str] = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


def type_name(value_type: int) -> str:
    return TYPE_NAMES.get(value_type, f"type {value_type}")


def dev_server_flags() -> list[str]:
    """The `temporal server start-dev` arguments that register every attribute at start, and
    turn on the server's flag of workflows whose tasks keep failing (off by default)."""
    flags: list[str] = []
    for key in NODE_ATTRIBUTES:
        flags += ["--search-attribute", f"{key.name}={type_name(key.indexed_value_type)}"]
    flags += [
        "--dynamic-config-value",
        f"system.numConsecutiveWorkflowTaskProblemsToTriggerSearchAttribute={PROBLEMS_AFTER_FAILED_TASKS}",
    ]
    return flags


def compare_registered(registered: Mapping[str, int]) -> tuple[list[SearchAttributeKey[Any]], list[str]]:
    """What a namespace's custom attributes ({name: indexed value type}) lack of fleetctl's,
    and why any of fleetctl's names is unusable (registered with another type)."""
    missing: list[SearchAttributeKey[Any]] = []
    conflicts: list[str] = []
    for key in NODE_ATTRIBUTES:
        if key.name not in registered:
            missing.append(key)
        elif registered[key.name] != key.indexed_value_type:
            conflicts.append(
                f"{key.name} is registered as {type_name(registered[key.name])}, "
                f"fleetctl needs {type_name(key.indexed_value_type)}"
            )
    return missing, conflicts


def short_cause(cause: str) -> str:
    """A cause as one bounded line: what a search attribute and the details may carry."""
    return one_line(cause, CAUSE_LIMIT)


def start_attributes(state: str) -> TypedSearchAttributes:
    """What a node's workflow carries from its start, so a node is found by its state before
    its first transition; the others come with that transition (the fleet is the node's
    inventory label, which the starter does not read)."""
    return TypedSearchAttributes([SearchAttributePair(NODE_STATE, state)])


def transition_updates(
    state: str, cause: str, since: datetime, fleet: str, rack: str, gpu_profile: str, scheduler: str
) -> list[SearchAttributeUpdate[Any]]:
    """Every attribute as of a transition into `state`. The inventory's facts come with each
    transition, so a node re-racked by a re-import shows its new rack from its next one; an
    empty fact (a node in no rack) unsets its attribute rather than match `FleetctlRack = ''`."""
    updates: list[SearchAttributeUpdate[Any]] = [
        NODE_STATE.value_set(state),
        LAST_CAUSE.value_set(short_cause(cause)),
        STATE_SINCE.value_set(since),
    ]
    for key, value in ((FLEET, fleet), (RACK, rack), (GPU_PROFILE, gpu_profile), (SCHEDULER, scheduler)):
        updates.append(key.value_set(value) if value else key.value_unset())
    return updates


def queued_since_update(oldest_queued_at: float | None) -> SearchAttributeUpdate[datetime]:
    """FleetctlQueuedSince as of the queue's oldest item (epoch seconds), unset when none waits."""
    if not oldest_queued_at:
        return QUEUED_SINCE.value_unset()
    return QUEUED_SINCE.value_set(datetime.fromtimestamp(oldest_queued_at, UTC))


# How a node's workflow ends an outcome that nothing more will follow without an operator.
WAITING_FOR_OPERATOR = "waiting for an operator"


# The longest a recorded text (an outcome, an activity naming jobs) is shown in the details.
DETAILS_TEXT_LIMIT = 500
# What the node waits for when its workflow is working nothing and no operator is needed.
WAITING_FOR_EVENTS = "waiting for events"
# What Markdown reads as markup in running text: emphasis, code, links and images, HTML,
# tables, strikethrough, headings. Escaped with a backslash, each shows as itself.
_MARKDOWN = re.compile(r"([\\`*_\[\]<>|~#!])")


def markdown_text(text: str) -> str:
    """`text` (a cause, a kernel message) as Markdown that renders it as it is written, on one
    line: `**` stays two asterisks, `[x](url)` no link, `<img>` no HTML."""
    return _MARKDOWN.sub(r"\\\1", one_line(text, DETAILS_TEXT_LIMIT))


def node_details(state: str, attributes: TypedSearchAttributes, outcome: str = "", activity: str = "") -> str:
    """The current details of a node's workflow (Markdown, as the Temporal UI renders it),
    leading with its state, since when, and what it is doing or waits for now (the workflow's
    activity, as `node show` gives it; else an operator, when its last outcome says so; else
    events); then the cause of its last transition, from its search attributes; and the
    workflow's last outcome, as `node show` gives it ("last: ..."), when that outcome waits for
    an operator (a drain no runbook handles). Recorded text is escaped (markdown_text)."""
    lines = [f"**{state}**"]
    since = attributes.get(STATE_SINCE)
    if since is not None:
        lines[0] += f" since {since:%Y-%m-%d %H:%M:%S} UTC"
    waiting = WAITING_FOR_OPERATOR in outcome
    lines[0] += f": {markdown_text(activity) if activity else WAITING_FOR_OPERATOR if waiting else WAITING_FOR_EVENTS}"
    cause = attributes.get(LAST_CAUSE)
    if cause:
        lines.append(f"last cause: {markdown_text(cause)}")
    if waiting:
        lines.append(f"last: {markdown_text(outcome)}")
    return "\n\n".join(lines)
