"""What a node's workflow shows of itself in Temporal: its search attributes, upserted with
every transition (operators find nodes with `temporal workflow list --query`), and its
current details (`temporal workflow metadata`, the Temporal UI). The names, types and
values are fleetctl.nodes.search_attributes'."""

from __future__ import annotations

from collections.abc import Callable

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from fleetctl.nodes.search_attributes import QUEUED_SINCE, node_details, queued_since_update, transition_updates
    from fleetctl.workflows.activities.node import NodeActivities
    from fleetctl.workflows.api import NodeLifecycleState, RecordedTransition, TransitionRecord
    from fleetctl.workflows.definitions.shared import quick_local


async def record_transition(record: TransitionRecord) -> int:
    """Write the transition (keyed by node and version, see NodeActivities.record_transition)
    and return the node's new version; the same activity returns the node's inventory facts
    and the workflow upserts its search attributes as of this transition."""
    workflow.deprecate_patch("node-search-attributes")
    recorded: RecordedTransition = await quick_local(NodeActivities.record_transition_with_facts, record)
    facts = recorded.facts
    workflow.upsert_search_attributes(
        transition_updates(
            record.to_state, record.cause, workflow.now(), facts.fleet, facts.rack, facts.profile, facts.scheduler
        )
    )
    return recorded.version


def show_details(state: NodeLifecycleState) -> None:
    """Set the workflow's current details from its state and its search attributes (which
    carry the time and cause of the last transition across continue-as-new). Not part of the
    history: any worker recomputes them on replay, so no patch guards them (nor the calls
    that refresh them)."""
    workflow.set_current_details(
        node_details(state.state, workflow.info().typed_search_attributes, state.last_outcome, state.activity)
    )


async def keep_details_current(current: Callable[[], NodeLifecycleState]) -> None:
    """Show the details again whenever what they say changes (the state, what the workflow is
    doing, its last outcome), as it changes: a drain waiting for its jobs says so while it
    waits, not once the item is done. Runs beside the workflow for its run; it waits on a
    condition and sets the details, neither of which is a command, so histories recorded
    before it replay unchanged and no patch guards it (docs/decisions/0012, 0025)."""

    def said() -> tuple[str, str, str]:
        state = current()
        return state.state, state.activity, state.last_outcome

    def changed_from(shown: tuple[str, str, str]) -> Callable[[], bool]:
        return lambda: said() != shown

    while True:
        await workflow.wait_condition(changed_from(said()))
        show_details(current())


def show_queue(state: NodeLifecycleState) -> None:
    """Upsert FleetctlQueuedSince when the queue's oldest item changed (it was empty, or the
    oldest was taken): one command per item worked, none for events queued behind it."""
    oldest = min((w.queued_at for w in state.work if w.queued_at), default=0.0)
    shown = workflow.info().typed_search_attributes.get(QUEUED_SINCE)
    if (shown.timestamp() if shown else 0.0) == oldest or not workflow.patched("queued-since-attribute"):
        return
    workflow.upsert_search_attributes([queued_since_update(oldest)])
