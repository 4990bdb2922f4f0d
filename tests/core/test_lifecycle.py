"""Every (state, trigger, actor) triple of the state machine, allowed and refused."""

from __future__ import annotations

import itertools

import pytest

from fleetctl.lifecycle import Actor, IllegalTransition, NodeState as S, Trigger as T, allowed_triggers, next_state

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
    **{(s, T.RETIRE): S.RETIRED for s in S if s is not S.RETIRED},
}
OPERATOR_ONLY = {T.UNDRAIN, T.RETIRE}

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
