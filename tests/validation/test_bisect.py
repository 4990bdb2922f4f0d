"""The bisection's decision alone: which runs come next given the runs done, and what it names.

A fabric is played by `slow_run`: a run is slow when it holds a bad node, or both sides of a
bad link; the loop is what the workflow does (run the step's runs, ask again)."""

from __future__ import annotations

import math

import pytest

from fleetctl.validation.bisect import (
    RunResult,
    RunVerdict,
    Step,
    Verdict,
    default_max_runs,
    launcher,
    next_step,
)

P, S, E = RunVerdict.PASS, RunVerdict.SLOW, RunVerdict.ERROR


def names(count: int) -> list[str]:
    return [f"n{i:02d}" for i in range(count)]


def slow_run(run: tuple[str, ...], bad: set[str], links: list[tuple[set[str], set[str]]]) -> bool:
    return bool(bad & set(run)) or any(a & set(run) and b & set(run) for a, b in links)


def bisect(
    nodes: list[str], bad: set[str], links: tuple[tuple[set[str], set[str]], ...] = (), max_runs: int | None = None
) -> tuple[Verdict, list[Step]]:
    results: list[RunResult] = []
    steps = []
    while True:
        step = next_step(nodes, results, max_runs)
        steps.append(step)
        if step.verdict is not None:
            return step.verdict, steps
        taken = [n for run in step.runs for n in run]
        assert len(taken) == len(set(taken)), f"a step's runs share a node: {step.runs}"
        results += [RunResult(run, S if slow_run(run, bad, list(links)) else P) for run in step.runs]


def runs_of(steps: list[Step]) -> int:
    return sum(len(s.runs) for s in steps)


@pytest.mark.parametrize("count", [4, 5, 8, 13, 16, 32, 64, 256])
def test_one_slow_node_is_named_in_at_most_2_log2_n_plus_1_runs(count: int) -> None:
    nodes = names(count)
    for bad in nodes:
        verdict, steps = bisect(nodes, {bad})
        assert verdict == Verdict(bad_nodes=(bad,)), bad
        assert runs_of(steps) <= 2 * math.ceil(math.log2(count)) + 1 + (count % 2), (bad, runs_of(steps))


def test_32_nodes_one_slow_take_11_runs_wherever_it_is() -> None:
    nodes = names(32)
    assert {runs_of(bisect(nodes, {bad})[1]) for bad in nodes} == {11}


def test_a_healthy_set_is_one_run() -> None:
    verdict, steps = bisect(names(32), set())
    assert verdict.passed and runs_of(steps) == 1


@pytest.mark.parametrize(
    ("bad", "expected"),
    [
        ({"n03", "n20"}, ("n03", "n20")),  # one in each half: both halves bisected
        ({"n04", "n05"}, ("n04", "n05")),  # a slow pair: each probed beside a cleared node
        ({"n00", "n01", "n02"}, ("n00", "n01", "n02")),
    ],
)
def test_several_slow_nodes_are_all_named(bad: set[str], expected: tuple[str, ...]) -> None:
    verdict, steps = bisect(names(32), bad)
    assert verdict.bad_nodes == expected and not verdict.slow_together
    assert runs_of(steps) <= default_max_runs(32)


def test_halves_that_pass_apart_and_are_slow_together_name_the_fabric_between() -> None:
    nodes = names(32)
    left, right = set(nodes[:16]), set(nodes[16:])
    verdict, steps = bisect(nodes, set(), ((left, right),))
    assert verdict == Verdict(slow_together=((tuple(nodes[:16]), tuple(nodes[16:])),))
    assert runs_of(steps) == 3


def test_a_link_between_two_nodes_is_named_as_the_pair() -> None:
    nodes = names(8)
    verdict, _ = bisect(nodes, set(), (({"n02"}, {"n03"}),))
    assert verdict == Verdict(slow_together=((("n02",), ("n03",)),))


def test_every_node_slow_leaves_it_unresolved_not_blamed() -> None:
    nodes = names(8)
    verdict, _ = bisect(nodes, set(nodes))
    assert verdict.bad_nodes == () and verdict.unresolved and not verdict.passed


def test_the_run_limit_stops_with_an_error() -> None:
    verdict, steps = bisect(names(32), {"n07"}, max_runs=5)
    assert verdict.error == "no verdict after 5 runs (the limit is 5)" and runs_of(steps) == 5


# The decision step by step: given these results, these runs next.
N8 = tuple(names(8))
STEPS = [
    ([], Step(runs=(N8,))),
    ([RunResult(N8, P)], Step(verdict=Verdict())),
    ([RunResult(N8, S)], Step(runs=(N8[:4], N8[4:]))),
    ([RunResult(N8, S), RunResult(N8[:4], P), RunResult(N8[4:], S)], Step(runs=(N8[4:6], N8[6:]))),
    (
        [RunResult(N8, S), RunResult(N8[:4], P), RunResult(N8[4:], S), RunResult(N8[4:6], S), RunResult(N8[6:], P)],
        # n04 and n05 each beside a node of their own the passing runs cleared
        Step(runs=(("n00", "n04"), ("n01", "n05"))),
    ),
    (
        [
            RunResult(N8, S),
            RunResult(N8[:4], P),
            RunResult(N8[4:], S),
            RunResult(N8[4:6], S),
            RunResult(N8[6:], P),
            RunResult(("n00", "n04"), P),
            RunResult(("n01", "n05"), S),
        ],
        Step(verdict=Verdict(bad_nodes=("n05",))),
    ),
    ([RunResult(N8, S), RunResult(N8[:4], E, reason="n01: unreachable")], None),
]


@pytest.mark.parametrize(("results", "expected"), STEPS)
def test_next_step(results: list[RunResult], expected: Step | None) -> None:
    step = next_step(list(reversed(N8)), results)
    if expected is None:
        assert step.verdict is not None and step.verdict.error.endswith("could not be judged: n01: unreachable")
    else:
        assert step == expected


@pytest.mark.parametrize(
    ("nodes", "results", "message"),
    [
        (["n00"], [], "needs 2 or more nodes, not 1"),
        (["n00", "n00"], [], "needs 2 or more nodes, not 1"),
        (["n00", "n01"], [RunResult(("n00", "n09"), P)], "a run over n09, outside the nodes validated"),
    ],
)
def test_bad_input_is_refused(nodes: list[str], results: list[RunResult], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        next_step(nodes, results)


@pytest.mark.parametrize(
    ("run", "results", "expected"),
    [
        (N8[:4], [RunResult(N8, S)], "n00"),
        (("n00", "n04"), [RunResult(N8[:4], P)], "n04"),  # the suspect, not the cleared node
        (("n00", "n01"), [RunResult(N8[:2], P)], "n00"),
    ],
)
def test_a_run_is_launched_and_recorded_on_its_first_node_not_cleared(
    run: tuple[str, ...], results: list[RunResult], expected: str
) -> None:
    assert launcher(run, results) == expected
