"""The simulated leaf-uplink fault: a leaf switch with half its uplinks slows every all-reduce
that crosses it to half, whichever of its nodes it was injected on, and no run inside one leaf;
nccl-tests' output as the real parser reads it. `fleetctl sim inject` refuses it on a node with
no leaf switch."""

from __future__ import annotations

import os

import pytest
from typer.testing import CliRunner

from fleetctl.checks.catalog import CHECKS
from fleetctl.checks.nccl import hosts_argv, parse_nccl
from fleetctl.cli.main import app as fleetctl_app
from fleetctl.db.engine import get_engine
from fleetctl.executors.base import NodeTarget
from fleetctl.sim.executor import SimExecutor
from fleetctl.sim.faults import SimFaultSpec
from fleetctl.sim.node import LEAF_UPLINK_SLOW_FACTOR, SimLeaf
from fleetctl.sim.store import faults_for
from tests.support.sim_fleet import make_fleet

NOW = 1_750_000_000.0
LEAVES = {"a1": "leaf-a", "a2": "leaf-a", "b1": "leaf-b", "b2": "leaf-b", "c1": "leaf-c", "x1": ""}
SLOW = SimFaultSpec("leaf-uplink-slow")


def executor(faults: dict[str, list[SimFaultSpec]]) -> SimExecutor:
    """Nodes on the leaves of LEAVES (x1 on none), the leaf faults read from every node of a leaf."""

    def leaf(name: str) -> SimLeaf | None:
        if not LEAVES[name]:
            return None
        members = [n for n, switch in LEAVES.items() if switch == LEAVES[name]]
        return SimLeaf(LEAVES[name], tuple(f for m in members for f in faults.get(m, [])))

    return SimExecutor(lambda name: list(faults.get(name, [])), seed=3, now=lambda: NOW, leaf=leaf)


def largest_busbw(ex: SimExecutor, hosts: tuple[str, ...]) -> float:
    argv = hosts_argv(hosts, 8, CHECKS["nccl-allreduce"].argv)
    result = ex.run(NodeTarget(hosts[0], f"sim://{hosts[0]}", profile="h100-sxm"), argv, timeout_s=3600)
    parsed = parse_nccl(result.stdout)
    assert result.exit_status == 0 and parsed.hosts == set(hosts), result.stdout
    busbw = parsed.rows[-1].out_of_place["busbw_gbps"]
    assert busbw is not None
    return busbw


@pytest.mark.parametrize(
    ("faults", "hosts", "slowed"),
    [
        ({"a1": [SLOW]}, ("a1", "a2"), False),  # inside the slow leaf: its uplinks are not crossed
        ({"a1": [SLOW]}, ("b1", "b2"), False),
        ({"a1": [SLOW]}, ("b1", "c1"), False),  # across two healthy leaves
        ({"a1": [SLOW]}, ("a1", "b1"), True),
        ({"a1": [SLOW]}, ("b1", "a2"), True),  # injected on a1, a2's leaf all the same; launched elsewhere
        ({"a1": [SLOW]}, ("a1", "a2", "b1", "b2"), True),
        ({"a1": [SLOW]}, ("a2", "x1"), True),  # a node on no known leaf is outside it
        ({"a1": [SimFaultSpec("leaf-uplink-slow", not_before=NOW + 60)]}, ("a1", "b1"), False),  # not yet
        ({}, ("a1", "b1"), False),
    ],
)
def test_a_slow_leaf_halves_every_all_reduce_across_it_and_none_within(
    faults: dict[str, list[SimFaultSpec]], hosts: tuple[str, ...], slowed: bool
) -> None:
    healthy = largest_busbw(executor({}), hosts)
    ratio = largest_busbw(executor(faults), hosts) / healthy
    expected = LEAF_UPLINK_SLOW_FACTOR if slowed else 1.0
    assert ratio == pytest.approx(expected, rel=0.03), (hosts, ratio)


def test_a_slow_leaf_changes_nothing_a_node_sees_by_itself() -> None:
    argv = list(CHECKS["nccl-allreduce"].argv)
    target = NodeTarget("a1", "sim://a1", profile="h100-sxm")
    assert executor({"a1": [SLOW]}).run(target, argv, 600) == executor({}).run(target, argv, 600)


@pytest.mark.parametrize(("islands", "accepted"), [(0, False), (1, True)])
def test_sim_inject_refuses_a_leaf_fault_on_a_node_on_no_leaf_in_one_line(
    make_settings, sqlite_url, islands: int, accepted: bool
) -> None:
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1, racks=1, islands=islands)
    argv = ["--db-url", settings.db_url, "sim", "inject", node, "leaf-uplink-slow"]
    result = CliRunner().invoke(fleetctl_app, argv, env={"FLEETCTL_CONFIG": os.devnull})
    stored = [f.kind for f in faults_for(get_engine(settings.db_url), node)]
    if accepted:
        assert result.exit_code == 0 and stored == ["leaf-uplink-slow"], result.output
    else:
        assert result.exit_code == 2 and stored == [], result.output
        assert (
            result.output.strip()
            == f"error: {node}: leaf-uplink-slow has nothing to act on: {node} is on no leaf switch (the inventory's `switch`)"
        ), result.output
