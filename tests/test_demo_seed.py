"""`fleetctl demo --seed`: one seed puts each fault on the same node run after run, whatever
the order the fleet was read in or the moment a fault strikes; another seed, other nodes."""

from __future__ import annotations

from datetime import timedelta

from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import utcnow
from fleetctl.demo import Demo, DemoPlan, first_fitting, plan_scenario, seeded_order
from fleetctl.inventory.parse import NodeSpec
from fleetctl.sim.scheduler import SimScheduler
from tests.cli.test_cli_node_health import _to_production

NAMES = [f"gpu-{i:03d}" for i in range(1, 33)]


def test_one_seed_one_order_whatever_order_the_fleet_is_read_in() -> None:
    order = seeded_order(NAMES, 7)
    assert order == seeded_order(list(reversed(NAMES)), 7) and sorted(order) == NAMES
    assert len({tuple(seeded_order(NAMES, seed)) for seed in range(8)}) == 8  # each seed its own
    assert plan_scenario(order)[0].node == order[0]  # the NVLink fault, set before burn-in


def test_a_fault_takes_the_first_node_of_the_order_that_fits() -> None:
    order = ["gpu-009", "gpu-002", "gpu-017"]
    assert first_fitting(order, {"gpu-017", "gpu-002"}) == "gpu-002"
    assert first_fitting(order, set()) == ""


def test_the_idle_fault_lands_on_the_same_node_for_the_same_seed(sqlite_url, make_settings) -> None:
    engine = get_engine(sqlite_url)
    queries.upsert_nodes(engine, [NodeSpec(n, f"sim://{n}", "h100-sxm", rack="r1", scheduler="sim") for n in NAMES])
    for name in NAMES:
        _to_production(engine, name, utcnow() - timedelta(hours=1))
    job = SimScheduler(engine).submit("train", 8)
    settings = make_settings(sqlite_url)

    def idle_node(seed: int) -> str:
        demo = Demo(settings, DemoPlan(nodes=len(NAMES), seed=seed), lambda _line: None)
        demo.names = NAMES
        demo.plan.order = seeded_order(NAMES, seed)
        demo.plan.faults = plan_scenario(demo.plan.order)
        return demo._idle_node()

    chosen = idle_node(3)
    assert chosen == idle_node(3) and chosen not in job.nodes and chosen != seeded_order(NAMES, 3)[0]
    assert len({idle_node(seed) for seed in range(6)}) > 1
