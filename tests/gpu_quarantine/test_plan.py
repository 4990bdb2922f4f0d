"""What a GPU-scoped fault takes out on each scheduler (GpuQuarantineActivities.plan_gpu_quarantine):
the GPU where the scheduler can take one GPU out (the simulated GRES), the node where it cannot
(Slurm refuses a GRES count change for file-bound GPUs), and the node when another GPU is out."""

from __future__ import annotations

import dataclasses

import pytest
from sqlalchemy import update
from sqlmodel import Session

from fleetctl.db import gpu_quarantines
from fleetctl.db.engine import get_engine
from fleetctl.db.models import Node
from fleetctl.workflows.activities.gpu_quarantine import GpuQuarantineActivities
from fleetctl.workflows.activities.schedulers import SchedulerRegistry
from fleetctl.workflows.api import GpuQuarantineRequest
from tests.support.sim_fleet import make_fleet

GPU = "0000:2b:00"


@pytest.fixture
def planner(make_settings, sqlite_url, tmp_path):
    policy = tmp_path / "xid-policy.yaml"
    policy.write_text("xid:\n  48: {scope: gpu}\n")
    settings = dataclasses.replace(make_settings(sqlite_url), xid_policy=str(policy))
    (node,) = make_fleet(settings, 1, racks=1)
    return GpuQuarantineActivities(settings, SchedulerRegistry(settings)), get_engine(settings.db_url), node


def test_the_simulated_scheduler_takes_the_gpu_out(planner) -> None:
    activities, _, node = planner
    plan = activities.plan_gpu_quarantine(GpuQuarantineRequest(node, GPU, 48))
    assert (plan.action, plan.gpu, plan.gpus_on_node) == ("quarantine_gpu", GPU, 8)


def test_a_slurm_node_drains_whole(planner) -> None:
    activities, engine, node = planner
    with Session(engine) as session:
        session.exec(update(Node).where(Node.name == node).values(scheduler="slurm"))
        session.commit()
    plan = activities.plan_gpu_quarantine(GpuQuarantineRequest(node, GPU, 48))
    assert (plan.action, plan.reason) == ("drain_node", "the node: its scheduler (slurm) cannot take one GPU out")


def test_a_second_gpu_drains_the_node(planner) -> None:
    activities, engine, node = planner
    gpu_quarantines.record_quarantine(engine, node, "0000:9a:00", 48, "XID 48", "agent", "first")
    plan = activities.plan_gpu_quarantine(GpuQuarantineRequest(node, GPU, 48))
    assert plan.action == "drain_node" and "while GPU 0000:9a:00 is out already" in plan.reason
