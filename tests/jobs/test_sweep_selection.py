"""Which nodes an active-check sweep may touch: production nodes running no work, found with
one question per scheduler (not one per node: a 10,000-node Slurm fleet would otherwise run
10,000 `squeue`s before every sweep). A scheduler that cannot answer makes all of its nodes
busy: a check never lands on a node that may be training."""

from __future__ import annotations

import os

from temporalio.testing import ActivityEnvironment

from fleetctl.config import load_settings
from fleetctl.db.engine import get_engine
from fleetctl.schedulers import scheduler_for
from fleetctl.schedulers.base import SchedulerError
from fleetctl.sim.scheduler import SimScheduler
from fleetctl.workflows.activities import schedulers as scheduler_registry
from fleetctl.workflows.activities.node import NodeActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import SweepScope
from tests.support.jobs import sim_fleet


class CountingScheduler:
    """The real scheduler of that kind, counting the questions; the Slurm one is down (the
    edge that cannot run without a controller, mocked)."""

    def __init__(self, kind: str, real, asked: list[str]):
        self.kind, self.real, self.asked = kind, real, asked

    def busy_nodes(self) -> set[str]:
        self.asked.append(self.kind)
        if self.kind == "slurm":
            raise SchedulerError("squeue: error: Unable to contact slurm controller (connect failure)")
        return self.real.busy_nodes()

    def jobs_on_node(self, node: str):
        self.asked.append(f"{self.kind}:{node}")
        return self.real.jobs_on_node(node)


def test_the_sweep_takes_idle_production_nodes_asking_each_scheduler_once(sqlite_url, monkeypatch) -> None:
    settings = load_settings(flags={"db_url": sqlite_url}, env={}, config_file=os.devnull)
    engine = get_engine(sqlite_url)
    sim_fleet(engine, ["n1", "n2", "n3", "n4"])
    sim_fleet(engine, ["n5"], state="burn_in")
    sim_fleet(engine, ["bare-1"], scheduler="none")
    sim_fleet(engine, ["s1", "s2"], scheduler="slurm")
    job = SimScheduler(engine).submit("train", 2)
    asked: list[str] = []
    monkeypatch.setattr(
        scheduler_registry,
        "scheduler_for",
        lambda kind, s: CountingScheduler(kind, scheduler_for(kind, s) if kind == "sim" else None, asked),
    )
    activities = NodeActivities(settings, SchedulerRegistry(settings))

    idle = ActivityEnvironment().run(activities.idle_production_nodes, SweepScope())

    assert job.nodes == ("n1", "n2")
    # n1, n2 train; n5 is not in production; s1, s2: Slurm cannot say, so they count as busy.
    assert sorted(idle) == ["bare-1", "n3", "n4"]
    assert sorted(asked) == ["sim", "slurm"]
