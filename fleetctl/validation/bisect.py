"""Bisection of a slow all-reduce: which runs to do next, given the runs done. Pure.

An all-reduce over a set of nodes runs at the pace of its slowest node or link (NCCL's ring
and tree move every byte through every rank), so a run that falls short of the floor says
only that something in it is slow. Splitting the set in halves and running each says which
half holds it: a half that passes clears all its nodes. Halves, then quarters, down to sets
of two or three; each node of those runs once more beside a node already cleared, and the
runs that stay slow name their node. One slow node of 32 costs 1 + 2 + 2 + 2 + 2 + 2 = 11
runs (2 log2 N + 1), however many nodes are good.

Two halves that pass apart but are slow together name the fabric between them (a leaf's
uplinks, a spine), not a node; two or three nodes that each pass beside a cleared node but are
slow together name the links among them. A set that stays slow with no node cleared anywhere
(the whole fabric slow, or every half slow) is left unresolved: bisection has nothing to
compare with.

The decision is recomputed from every run done so far (`next_step`), so a workflow that
replays, or a run retried, asks the same question and gets the same answer.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import Enum

Nodes = tuple[str, ...]  # sorted, each once


class RunVerdict(str, Enum):
    """What one all-reduce run said of its nodes together."""

    PASS = "pass"  # at or above the multi-node floor: every node of it is cleared
    SLOW = "slow"  # below the floor, or died: something in it is slow
    ERROR = "error"  # could not be judged (a node unreachable, output cut): bisection stops


@dataclass(frozen=True)
class RunResult:
    nodes: Nodes
    verdict: RunVerdict
    busbw_gbps: float | None = None
    reason: str = ""


@dataclass(frozen=True)
class Verdict:
    """What the runs found. `slow_together`: groups of nodes each of which passes apart (or
    beside a cleared node) but which are slow together: the fabric between them."""

    bad_nodes: Nodes = ()
    slow_together: tuple[tuple[Nodes, ...], ...] = ()
    unresolved: tuple[Nodes, ...] = ()
    error: str = ""

    @property
    def passed(self) -> bool:
        return not (self.bad_nodes or self.slow_together or self.unresolved or self.error)


@dataclass(frozen=True)
class Step:
    """The runs to do next (disjoint: they may run at once), or the verdict when none is left."""

    runs: tuple[Nodes, ...] = ()
    verdict: Verdict | None = None


@dataclass
class _Walk:
    done: dict[Nodes, RunResult]
    cleared: list[str]
    pending: list[Nodes] = field(default_factory=list)
    bad: set[str] = field(default_factory=set)
    slow_together: list[tuple[Nodes, ...]] = field(default_factory=list)
    unresolved: list[Nodes] = field(default_factory=list)


def default_max_runs(count: int) -> int:
    """Room for two slow nodes in different halves: twice the one-node cost, and the first run."""
    return 2 * (2 * math.ceil(math.log2(max(count, 2))) + 1) + 1


def halves(nodes: Nodes) -> tuple[Nodes, Nodes]:
    middle = len(nodes) // 2
    return nodes[:middle], nodes[middle:]


def as_nodes(names: Sequence[str]) -> Nodes:
    return tuple(sorted(set(names)))


def launcher(run: Nodes, results: Sequence[RunResult]) -> str:
    """The node MPI launches `run` on, where its check run is recorded: the first not yet
    cleared. A probe (a suspect beside a cleared node) is then recorded on the suspect, so each
    node's latest run says what bisection found of it, not of the set it was launched for."""
    cleared = {n for r in results if r.verdict is RunVerdict.PASS for n in r.nodes}
    return next((n for n in run if n not in cleared), run[0])


def next_step(nodes: Sequence[str], results: Sequence[RunResult], max_runs: int | None = None) -> Step:
    """The next runs of a bisection over `nodes` after `results`, or its verdict.

    Raises ValueError for fewer than two nodes (an all-reduce of one node is no test of the
    fabric) or a result over nodes outside the set."""
    everyone = as_nodes(nodes)
    if len(everyone) < 2:
        raise ValueError(f"an all-reduce across nodes needs 2 or more nodes, not {len(everyone)}")
    stray = sorted({n for r in results for n in r.nodes} - set(everyone))
    if stray:
        raise ValueError(f"a run over {', '.join(stray[:3])}, outside the nodes validated")
    errors = [r for r in results if r.verdict is RunVerdict.ERROR]
    if errors:
        first = errors[0]
        return Step(verdict=Verdict(error=f"a run of {len(first.nodes)} nodes could not be judged: {first.reason}"))
    done = {r.nodes: r for r in results}
    cleared = sorted({n for r in results if r.verdict is RunVerdict.PASS for n in r.nodes})
    walk = _Walk(done, cleared)
    _visit(everyone, walk)
    if walk.pending:
        limit = default_max_runs(len(everyone)) if max_runs is None else max_runs
        if len(results) >= limit:
            return Step(verdict=Verdict(error=f"no verdict after {len(results)} runs (the limit is {limit})"))
        return Step(runs=_disjoint(walk.pending))
    return Step(verdict=Verdict(tuple(sorted(walk.bad)), tuple(walk.slow_together), tuple(walk.unresolved)))


def _visit(nodes: Nodes, walk: _Walk) -> None:
    result = walk.done.get(nodes)
    if result is None:
        walk.pending.append(nodes)
        return
    if result.verdict is RunVerdict.PASS:
        return
    if len(nodes) >= 4:
        parts = halves(nodes)
        missing = [p for p in parts if p not in walk.done]
        if missing:
            walk.pending.extend(missing)
        elif all(walk.done[p].verdict is RunVerdict.PASS for p in parts):
            walk.slow_together.append(parts)
        else:
            for part in parts:
                _visit(part, walk)
        return
    _probe(nodes, walk)


def _probe(nodes: Nodes, walk: _Walk) -> None:
    """Two or three slow nodes: each beside a cleared node of its own (so the probes may run
    at once); those still slow are bad."""
    references = [n for n in walk.cleared if n not in nodes]
    if not references:
        walk.unresolved.append(nodes)
        return
    probes = [as_nodes((node, references[i % len(references)])) for i, node in enumerate(nodes)]
    missing = [p for p in probes if p not in walk.done]
    if missing:
        walk.pending.extend(missing)
        return
    slow = [node for node, probe in zip(nodes, probes, strict=True) if walk.done[probe].verdict is RunVerdict.SLOW]
    if slow:
        walk.bad.update(slow)
    else:
        walk.slow_together.append(tuple((node,) for node in nodes))


def _disjoint(pending: list[Nodes]) -> tuple[Nodes, ...]:
    """The pending runs that share no node, in order: a node's GPUs run one all-reduce at a time."""
    taken: set[str] = set()
    chosen = []
    for run in dict.fromkeys(pending):
        if taken.isdisjoint(run):
            chosen.append(run)
            taken.update(run)
    return tuple(chosen)
