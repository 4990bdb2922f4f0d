"""A per-fleet capacity guard counts its own fleet's nodes, and a fleet's sweep checks only
its own: several fleets can share a database, each node in one by its `fleet` label (a node
without one is counted by every fleet, as before fleets were told apart)."""

from __future__ import annotations

import os

from sqlmodel import Session
from temporalio.testing import ActivityEnvironment

from fleetctl.config import load_settings
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node
from fleetctl.workflows.activities.guard import GuardActivities
from fleetctl.workflows.activities.node import NodeActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import SweepScope


def _nodes(engine, rack: str, state: str, fleet: str | None, names: list[str]) -> None:
    with Session(engine) as session:
        for name in names:
            session.add(
                Node(
                    name=name,
                    address=f"sim://{name}",
                    profile="h100-sxm",
                    scheduler="none",
                    rack=rack,
                    state=state,
                    labels={"fleet": fleet} if fleet else {},
                )
            )
        session.commit()


def test_the_guard_and_the_sweep_see_only_their_fleet(sqlite_url) -> None:
    settings = load_settings(flags={"db_url": sqlite_url}, env={}, config_file=os.devnull)
    engine = get_engine(sqlite_url)
    _nodes(engine, "r1", "production", "blue", ["b1", "b2", "b3"])
    _nodes(engine, "r1", "maintenance", "blue", ["b4"])
    _nodes(engine, "r2", "production", "green", ["g1", "g2"])
    _nodes(engine, "r3", "production", None, ["u1"])
    env = ActivityEnvironment()

    blue = env.run(GuardActivities(settings, ask=None).fleet_snapshot, "blue")
    assert {rack: (c.production, c.unavailable) for rack, c in blue.racks.items()} == {"r1": (3, 1), "r3": (1, 0)}
    green = env.run(GuardActivities(settings, ask=None).fleet_snapshot, "green")
    assert {rack: (c.production, c.unavailable) for rack, c in green.racks.items()} == {"r2": (2, 0), "r3": (1, 0)}

    idle = NodeActivities(settings, SchedulerRegistry(settings)).idle_production_nodes
    assert sorted(env.run(idle, SweepScope(fleet="green"))) == ["g1", "g2", "u1"]
    assert sorted(env.run(idle, SweepScope(fleet="blue"))) == ["b1", "b2", "b3", "u1"]
