"""Which nodes each island holds as hot spares: idle production nodes of the island, up to
the policy; a spare that left production, lost or changed its island leaves its pool; a
lowered policy gives the last ones back."""

from __future__ import annotations

import pytest

from fleetctl.jobs.placement import IN_ISLAND, Where, place_restart
from fleetctl.jobs.spares import MAX_SPARES_PER_ISLAND, SpareCandidate, plan_pools, spare_counts


def node(
    name: str, island: str = "ib-a", state: str = "production", idle: bool = True, healthy: bool = True
) -> SpareCandidate:
    return SpareCandidate(name, island, state, idle, healthy)


FLEET = [
    node("n1"),
    node("n2", idle=False),
    node("n3"),
    node("n4", state="maintenance"),
    node("n5"),
    node("m1", "ib-b"),
    node("m2", "ib-b", idle=False),
    node("x1", ""),
]


@pytest.mark.parametrize(
    "per_island,held,nodes,pools,added,removed",
    [
        # Empty pools fill with idle production nodes by name; a busy one, one out of
        # production and one without an island are never taken.
        (1, {}, FLEET, {"ib-a": ("n1",), "ib-b": ("m1",)}, ("m1", "n1"), ()),
        (2, {}, FLEET, {"ib-a": ("n1", "n3"), "ib-b": ("m1",)}, ("m1", "n1", "n3"), ()),
        # A full pool is left as it is, even when its spare is no longer idle (a restart is
        # starting there, or the scheduler says so before the hold is gone).
        (1, {"n2": "ib-a", "m1": "ib-b"}, FLEET, {}, (), ()),
        # A spare that left production leaves the pool and another idle node takes its place.
        (1, {"n4": "ib-a"}, FLEET, {"ib-a": ("n1",), "ib-b": ("m1",)}, ("m1", "n1"), ("n4",)),
        # A spare taken by a restart (no longer held) is replaced.
        (2, {"n3": "ib-a"}, FLEET, {"ib-a": ("n1", "n3"), "ib-b": ("m1",)}, ("m1", "n1"), ()),
        # The policy lowered: the pool gives back its last spares by name; 0 gives back all.
        (
            1,
            {"n1": "ib-a", "n3": "ib-a", "n5": "ib-a"},
            FLEET,
            {"ib-a": ("n1",), "ib-b": ("m1",)},
            ("m1",),
            ("n3", "n5"),
        ),
        (0, {"n1": "ib-a", "m1": "ib-b"}, FLEET, {"ib-a": (), "ib-b": ()}, (), ("m1", "n1")),
        # A spare recorded for another island than the inventory now says, or one the
        # inventory no longer knows, leaves its pool (and is not taken in the same refill: its
        # old island's hold is let go first).
        (1, {"n1": "ib-b"}, FLEET, {"ib-a": ("n3",), "ib-b": ("m1",)}, ("m1", "n3"), ("n1",)),
        (1, {"gone": "ib-c"}, FLEET, {"ib-a": ("n1",), "ib-b": ("m1",), "ib-c": ()}, ("m1", "n1"), ("gone",)),
        # A node with evidence against it (a held drain after a failed check) is never
        # taken, and a spare that gains such evidence leaves its pool for a healthy one.
        (1, {}, [node("n1", healthy=False), node("n3")], {"ib-a": ("n3",)}, ("n3",), ()),
        (1, {"n1": "ib-a"}, [node("n1", healthy=False), node("n3")], {"ib-a": ("n3",)}, ("n3",), ("n1",)),
        (1, {}, [node("n1", healthy=False)], {}, (), ()),
        # An island with no idle production node holds nothing.
        (1, {}, [node("n2", idle=False), node("n4", state="draining")], {}, (), ()),
    ],
)
def test_plan_pools(per_island, held, nodes, pools, added, removed) -> None:
    change = plan_pools(per_island, held, nodes)
    assert (change.pools, change.added, change.removed) == (pools, added, removed)


@pytest.mark.parametrize("per_island", [-1, MAX_SPARES_PER_ISLAND + 1])
def test_the_policy_is_bounded(per_island) -> None:
    with pytest.raises(ValueError, match="outside"):
        plan_pools(per_island, {}, FLEET)


def test_spare_counts() -> None:
    assert spare_counts({"n1": "ib-a", "n3": "ib-a", "m1": "ib-b"}, 2) == {
        "ib-a": {"spares": 2, "wanted": 2},
        "ib-b": {"spares": 1, "wanted": 2},
    }


FABRIC = {
    "n1": Where("leaf-1", "ib-a"),
    "n2": Where("leaf-1", "ib-a"),
    "n3": Where("leaf-2", "ib-a"),
    "n4": Where("leaf-2", "ib-a"),
    "m1": Where("leaf-3", "ib-b"),
}


@pytest.mark.parametrize(
    "free,spares,nodes,taken",
    [
        # A spare of the island comes before a free node on the job's own leaf.
        (["n2", "n4"], ["n4"], ("n1", "n4"), ("n4",)),
        # No spare in the island (only another island's): the nearest free node, as before.
        (["n2", "n4", "m1"], ["m1"], ("n1", "n2"), ()),
        # A spare that is not free (busy, or out of production) is not taken.
        (["n2"], ["n4"], ("n1", "n2"), ()),
    ],
)
def test_restarts_take_the_islands_spares_first(free, spares, nodes, taken) -> None:
    placed = place_restart(["n1", "n3"], ["n3"], FABRIC, free, spares)
    assert (placed.placement, placed.nodes, placed.spares) == (IN_ISLAND, nodes, taken)
    assert ("spare" in placed.detail) == bool(taken)


def test_fleet_status_counts_spares_in_service(sqlite_url) -> None:
    """A spare is a production node for the guard's budget, and fleet status says how many
    each island holds."""
    from sqlalchemy import update
    from sqlmodel import Session

    from fleetctl.db import queries
    from fleetctl.db import spares as store
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import Node
    from fleetctl.inventory.parse import parse_inventory
    from fleetctl.nodes.capacity import GuardPolicy
    from fleetctl.nodes.fleet_status_store import fleet_status

    engine = get_engine(sqlite_url)
    queries.upsert_nodes(
        engine,
        parse_inventory(
            "nodes:\n"
            + "".join(
                f"  - {{name: g{i}, address: sim://g{i}, profile: h100-sxm, rack: r1, island: ib-a}}\n"
                for i in range(4)
            )
        ),
    )
    with Session(engine) as session:
        session.exec(update(Node).values(state="production"))
        session.commit()
    store.record_pool(engine, "ib-a", ["g1", "g2"])
    store.record_pool(engine, "ib-a", ["g2", "g3"])  # g1 taken, g3 held: a whole pool each time
    assert store.held(engine) == {"g2": "ib-a", "g3": "ib-a"}
    status = fleet_status(engine, {}, GuardPolicy(), "default", spares_per_island=2)
    assert status["spares"] == {"count": 2, "per_island": {"ib-a": {"spares": 2, "wanted": 2}}}
    fleet_budget = next(b for b in status["budget"] if b["scope"] == "fleet")
    assert (fleet_budget["serving"], fleet_budget["unavailable"]) == (4, 0)  # the spares serve
    store.record_pool(engine, "ib-a", [])
    assert fleet_status(engine, {}, GuardPolicy(), "default")["spares"] == {"count": 0, "per_island": {}}


@pytest.mark.parametrize(
    "raw,ok",
    [
        ("0", True),
        ("2", True),
        (str(MAX_SPARES_PER_ISLAND), True),
        ("-1", False),
        (str(MAX_SPARES_PER_ISLAND + 1), False),
        ("1.5", False),
        ("many", False),
    ],
)
def test_the_setting_is_bounded_at_the_edge(raw, ok) -> None:
    import os

    from fleetctl.config import ConfigError, load_settings

    def load():
        return load_settings(flags={}, env={"FLEETCTL_SPARES_PER_ISLAND": raw}, config_file=os.devnull)

    if ok:
        assert load().spares_per_island == int(raw)
    else:
        with pytest.raises(ConfigError, match="spares_per_island"):
            load()


def test_spares_list_shows_each_islands_pool(sqlite_url) -> None:
    import json

    from typer.testing import CliRunner

    from fleetctl.cli.main import app
    from fleetctl.db import spares as store
    from fleetctl.db.engine import get_engine

    store.record_pool(get_engine(sqlite_url), "ib-a", ["g2", "g1"])
    shown = CliRunner().invoke(
        app, ["--db-url", sqlite_url, "spares", "list", "-o", "json"], env={"FLEETCTL_SPARES_PER_ISLAND": "3"}
    )
    assert shown.exit_code == 0, shown.output
    assert json.loads(shown.stdout) == [{"island": "ib-a", "spares": ["g1", "g2"], "wanted": 3}]


def test_a_refill_holds_no_node_with_evidence_against_it(sqlite_url) -> None:
    """Through the database: a node whose check failed is not taken into the pool,
    and a spare whose check fails afterwards leaves it for a healthy node."""
    from sqlmodel import Session, select

    from fleetctl.db import queries
    from fleetctl.db import spares as store
    from fleetctl.db.engine import get_engine
    from fleetctl.db.models import CheckRun, Node
    from fleetctl.jobs import spares_sync
    from fleetctl.sim.scheduler import SimScheduler
    from tests.support.jobs import sim_fleet

    engine = get_engine(sqlite_url)
    sim = SimScheduler(engine)
    sim_fleet(engine, ["n1", "n2", "n3"])
    with Session(engine) as session:
        for node in session.exec(select(Node)):
            node.island = "ib-a"
            session.add(node)
        session.commit()

    def fail(node: str) -> None:
        key = f"test/{node}/nvidia-smi-query"
        queries.insert_once(
            engine,
            CheckRun(
                node_name=node,
                check_name="nvidia-smi-query",
                kind="nvidia-smi-query",
                status="fail",
                reason="uncorrectable ECC 2",
                idempotency_key=key,
            ),
            CheckRun.idempotency_key,
            key,
        )

    fail("n1")
    assert spares_sync.fill(engine, 1, lambda kind: sim).pools == {"ib-a": ("n2",)}
    fail("n2")
    result = spares_sync.fill(engine, 1, lambda kind: sim)
    assert (result.pools, result.removed) == ({"ib-a": ("n3",)}, ["n2"])
    assert store.held(engine) == {"n3": "ib-a"}
