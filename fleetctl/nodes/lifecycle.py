"""The node state machine: states, triggers and the transition table. Pure: no I/O.

Every state change of a node goes through `next_state`, which is called by the node's own
workflow (the sole writer) and by the update validators that reject a bad command before
it is accepted. The table is data so that the tests, the CLI help and ARCHITECTURE.md can
all be checked against one definition.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass


class NodeState(str, enum.Enum):
    NEW = "new"
    FIRMWARE = "firmware"
    BURN_IN = "burn_in"
    ADMISSION = "admission"
    PRODUCTION = "production"
    DRAINING = "draining"
    MAINTENANCE = "maintenance"
    RMA = "rma"
    RETIRED = "retired"

    @property
    def colour(self) -> str:
        return _COLOURS[self]

    # The sets of states that decisions ask about, named once. Callers holding a state string
    # ask `NodeState(text).out_of_service`: a str-valued enum member does not hash like its
    # value, so `"draining" in {NodeState.DRAINING}` is False and tuples of literals drift.

    @property
    def in_service(self) -> bool:
        """Schedulable: serving capacity (what the capacity guard protects)."""
        return self is NodeState.PRODUCTION

    @property
    def out_of_service(self) -> bool:
        """Taken out of production for repair; remediation brings it back or sends it to RMA."""
        return self in (NodeState.DRAINING, NodeState.MAINTENANCE)

    @property
    def in_serving_fleet(self) -> bool:
        """Counted by the capacity guard: in production or out of it for repair. Not RMA: its
        hardware is with the vendor for weeks, and counting it (as unavailable, or in the
        total the limits are fractions of) would freeze automation, or let more of the nodes
        that are here go out, for as long."""
        return self.in_service or self.out_of_service

    @property
    def is_capacity(self) -> bool:
        """Capacity the fleet has, serving or lost to a fault (the denominator of availability).
        RMA counts: a node sent back to its vendor is capacity lost, and leaving it out would
        make a fleet with half its nodes in RMA look fully available. Time before admission
        and after retirement is not capacity that was lost."""
        return self.in_serving_fleet or self is NodeState.RMA

    @property
    def in_flight(self) -> bool:
        """A phase is running on the node (shown as 'in flight' by fleet status)."""
        return self in (NodeState.FIRMWARE, NodeState.BURN_IN, NodeState.ADMISSION, NodeState.DRAINING)

    @property
    def not_yet_admitted(self) -> bool:
        """On its way in (firmware, burn-in, admission): serving no work yet, however well its
        first checks went."""
        return self in (NodeState.NEW, NodeState.FIRMWARE, NodeState.BURN_IN, NodeState.ADMISSION)

    @property
    def returns_to_service(self) -> bool:
        """On the way back into production (a remediation that sets it has repaired the node)."""
        return self in (NodeState.BURN_IN, NodeState.ADMISSION, NodeState.PRODUCTION)

    @property
    def admittable(self) -> bool:
        """An operator's admit may start burn-in from here: begin_burn_in's sources but firmware,
        whose own phase goes on into burn-in."""
        return self in (NodeState.NEW, NodeState.MAINTENANCE, NodeState.RMA)

    @classmethod
    def values_where(cls, holds: Callable[[NodeState], bool]) -> frozenset[str]:
        """The state strings for which `holds` is true, e.g. `values_where(lambda s: s.out_of_service)`."""
        return frozenset(s.value for s in cls if holds(s))


_COLOURS = {
    NodeState.NEW: "white",
    NodeState.FIRMWARE: "cyan",
    NodeState.BURN_IN: "blue",
    NodeState.ADMISSION: "magenta",
    NodeState.PRODUCTION: "green",
    NodeState.DRAINING: "yellow",
    NodeState.MAINTENANCE: "dark_orange",
    NodeState.RMA: "red",
    NodeState.RETIRED: "grey50",
}


class Actor(str, enum.Enum):
    OPERATOR = "operator"
    AUTOMATION = "automation"


class Trigger(str, enum.Enum):
    BEGIN_FIRMWARE = "begin_firmware"
    BEGIN_BURN_IN = "begin_burn_in"
    BEGIN_ADMISSION = "begin_admission"
    ENTER_PRODUCTION = "enter_production"
    PHASE_FAILED = "phase_failed"
    DRAIN = "drain"
    DRAIN_COMPLETE = "drain_complete"
    UNDRAIN = "undrain"
    SEND_TO_RMA = "send_to_rma"
    RETIRE = "retire"
    ADOPT = "adopt"


S = NodeState
_ALL_BUT_RETIRED = frozenset(s for s in NodeState if s is not NodeState.RETIRED)


@dataclass(frozen=True)
class TransitionRule:
    trigger: Trigger
    sources: frozenset[NodeState]
    target: NodeState
    operator_only: bool = False
    summary: str = ""


RULES: dict[Trigger, TransitionRule] = {
    r.trigger: r
    for r in (
        TransitionRule(
            Trigger.BEGIN_FIRMWARE,
            frozenset({S.NEW, S.MAINTENANCE}),
            S.FIRMWARE,
            summary="bring firmware to the fleet baseline",
        ),
        TransitionRule(
            Trigger.BEGIN_BURN_IN,
            frozenset({S.NEW, S.FIRMWARE, S.MAINTENANCE, S.RMA}),
            S.BURN_IN,
            summary="stress and check the node before it takes work",
        ),
        TransitionRule(
            Trigger.BEGIN_ADMISSION,
            frozenset({S.BURN_IN}),
            S.ADMISSION,
            summary="judge burn-in against the profile and the fleet",
        ),
        TransitionRule(
            Trigger.ENTER_PRODUCTION, frozenset({S.ADMISSION}), S.PRODUCTION, summary="admitted: schedulable"
        ),
        TransitionRule(
            Trigger.PHASE_FAILED,
            frozenset({S.FIRMWARE, S.BURN_IN, S.ADMISSION}),
            S.MAINTENANCE,
            summary="a phase failed; remediation takes over",
        ),
        TransitionRule(
            Trigger.DRAIN,
            frozenset({S.PRODUCTION}),
            S.DRAINING,
            summary="cordon in the scheduler; jobs finish or restart elsewhere",
        ),
        TransitionRule(
            Trigger.DRAIN_COMPLETE, frozenset({S.DRAINING}), S.MAINTENANCE, summary="no more jobs on the node"
        ),
        # An operator's drain is often for a reason that needs no repair (a cable, a test):
        # undrain puts the node straight back, and that is recorded with the operator's name.
        TransitionRule(
            Trigger.UNDRAIN,
            frozenset({S.DRAINING, S.MAINTENANCE}),
            S.PRODUCTION,
            operator_only=True,
            summary="return a drained node to service",
        ),
        TransitionRule(
            Trigger.SEND_TO_RMA,
            frozenset({S.DRAINING, S.MAINTENANCE}),
            S.RMA,
            summary="hardware goes back to the vendor",
        ),
        TransitionRule(
            Trigger.RETIRE, _ALL_BUT_RETIRED, S.RETIRED, operator_only=True, summary="remove the node for good"
        ),
        # `node import --adopt`: a fleet already in production is brought in as it runs, with
        # no burn-in and no drain; the node is unchecked until a sweep finds it idle.
        TransitionRule(
            Trigger.ADOPT,
            frozenset({S.NEW}),
            S.PRODUCTION,
            operator_only=True,
            summary="adopt a node already in production: unchecked, no burn-in",
        ),
    )
}


class IllegalTransition(ValueError):
    """The trigger is not allowed from the node's state (or not for this actor)."""


def next_state(state: NodeState | str, trigger: Trigger | str, actor: Actor | str = Actor.OPERATOR) -> NodeState:
    """The state `trigger` leads to from `state`, or IllegalTransition with a readable reason."""
    state = NodeState(state)
    try:
        trigger = Trigger(trigger)
    except ValueError:
        raise IllegalTransition(f"unknown trigger {trigger!r}") from None
    actor = Actor(actor)
    rule = RULES[trigger]
    if rule.operator_only and actor is not Actor.OPERATOR:
        raise IllegalTransition(f"{trigger.value} is for operators only")
    if state not in rule.sources:
        allowed = ", ".join(sorted(s.value for s in rule.sources))
        raise IllegalTransition(
            f"cannot {trigger.value.replace('_', ' ')} a node in {state.value} (allowed from: {allowed})"
        )
    return rule.target


def allowed_triggers(state: NodeState | str) -> list[Trigger]:
    state = NodeState(state)
    return [t for t, r in RULES.items() if state in r.sources]
