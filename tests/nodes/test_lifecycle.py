"""Every (state, trigger, actor) triple of the state machine, allowed and refused."""

from __future__ import annotations

import itertools

import pytest

from fleetctl.nodes.lifecycle import (
    Actor,
    IllegalTransition,
    allowed_triggers,
    next_state,
)
from fleetctl.nodes.lifecycle import (
    NodeState as S,
)
from fleetctl.nodes.lifecycle import (
    Trigger as T,
)

# The map of ARCHITECTURE.md, written out independently of lifecycle.RULES so that a change
# to either shows up here.
EXPECTED: dict[tuple[S, T], S] = {
    (S.NEW, T.BEGIN_FIRMWARE): S.FIRMWARE,
    (S.MAINTENANCE, T.BEGIN_FIRMWARE): S.FIRMWARE,
    (S.NEW, T.BEGIN_BURN_IN): S.BURN_IN,
    (S.FIRMWARE, T.BEGIN_BURN_IN): S.BURN_IN,
    (S.MAINTENANCE, T.BEGIN_BURN_IN): S.BURN_IN,
    (S.RMA, T.BEGIN_BURN_IN): S.BURN_IN,
    (S.BURN_IN, T.BEGIN_ADMISSION): S.ADMISSION,
    (S.ADMISSION, T.ENTER_PRODUCTION): S.PRODUCTION,
    (S.FIRMWARE, T.PHASE_FAILED): S.MAINTENANCE,
    (S.BURN_IN, T.PHASE_FAILED): S.MAINTENANCE,
    (S.ADMISSION, T.PHASE_FAILED): S.MAINTENANCE,
    (S.PRODUCTION, T.DRAIN): S.DRAINING,
    (S.DRAINING, T.DRAIN_COMPLETE): S.MAINTENANCE,
    (S.DRAINING, T.UNDRAIN): S.PRODUCTION,
    (S.MAINTENANCE, T.UNDRAIN): S.PRODUCTION,
    (S.DRAINING, T.SEND_TO_RMA): S.RMA,
    (S.MAINTENANCE, T.SEND_TO_RMA): S.RMA,
    (S.NEW, T.ADOPT): S.PRODUCTION,
    **{(s, T.RETIRE): S.RETIRED for s in S if s is not S.RETIRED},
}
OPERATOR_ONLY = {T.UNDRAIN, T.RETIRE, T.ADOPT}

CASES = list(itertools.product(S, T, Actor))


@pytest.mark.parametrize("state,trigger,actor", CASES, ids=[f"{s.value}-{t.value}-{a.value}" for s, t, a in CASES])
def test_every_state_trigger_actor(state: S, trigger: T, actor: Actor) -> None:
    expected = EXPECTED.get((state, trigger))
    if expected is not None and (actor is Actor.OPERATOR or trigger not in OPERATOR_ONLY):
        assert next_state(state, trigger, actor) is expected
    else:
        with pytest.raises(IllegalTransition) as err:
            next_state(state, trigger, actor)
        assert "\n" not in str(err.value) and str(err.value)


def test_refusal_names_the_state_and_the_allowed_sources() -> None:
    with pytest.raises(IllegalTransition, match=r"cannot drain a node in new \(allowed from: production\)"):
        next_state("new", "drain")


def test_unknown_trigger_is_refused() -> None:
    with pytest.raises(IllegalTransition, match="unknown trigger"):
        next_state("production", "explode")


def test_retired_is_terminal() -> None:
    assert allowed_triggers(S.RETIRED) == []


@pytest.mark.parametrize("state", list(S), ids=[s.value for s in S])
def test_allowed_triggers_agree_with_next_state(state: S) -> None:
    """What the CLI and the validators offer from a state is exactly what next_state accepts
    from it for an operator: nothing missing, nothing extra, nothing twice."""
    accepted = set()
    for trigger in T:
        try:
            next_state(state, trigger, Actor.OPERATOR)
        except IllegalTransition:
            continue
        accepted.add(trigger)
    offered = allowed_triggers(state)
    assert len(offered) == len(set(offered))
    assert set(offered) == accepted == {t for s, t in EXPECTED if s is state}


# The named state sets, written out as a table: a state moved between sets shows up here.
STATE_SETS = {
    "in_service": {S.PRODUCTION},
    "out_of_service": {S.DRAINING, S.MAINTENANCE},
    "in_serving_fleet": {S.PRODUCTION, S.DRAINING, S.MAINTENANCE},
    "is_capacity": {S.PRODUCTION, S.DRAINING, S.MAINTENANCE, S.RMA},
    "in_flight": {S.FIRMWARE, S.BURN_IN, S.ADMISSION, S.DRAINING},
    "returns_to_service": {S.BURN_IN, S.ADMISSION, S.PRODUCTION},
    "admittable": {S.NEW, S.MAINTENANCE, S.RMA},
}


@pytest.mark.parametrize("name, members", STATE_SETS.items())
def test_state_sets(name: str, members: set[S]) -> None:
    assert {s for s in S if getattr(s, name)} == members
    assert S.values_where(lambda s: getattr(s, name)) == {s.value for s in members}


def test_admittable_states_can_begin_burn_in() -> None:
    """An admit is a begin_burn_in: every state it starts from must be a source of that rule."""
    for state in S:
        if state.admittable:
            assert next_state(state, T.BEGIN_BURN_IN) is S.BURN_IN


def test_rma_is_lost_capacity_but_not_rationed_by_the_guard() -> None:
    from fleetctl.nodes.capacity import snapshot_from_states
    from fleetctl.reliability.metrics import availability

    snap = snapshot_from_states([("r1", "production"), ("r1", "rma"), ("r1", "maintenance")])
    assert (snap.serving, snap.unavailable, snap.production) == (2, 1, 1)
    assert availability({"production": 1.0, "rma": 1.0, "new": 5.0}) == 0.5
