"""The simulated scheduler's GRES: with one GPU of an 8-GPU node taken out it places a 7-GPU job
there and refuses an 8-GPU one, as Slurm does with Gres=gpu:7; the GPU put back takes work again."""

from __future__ import annotations

import pytest

from fleetctl.db.engine import get_engine
from fleetctl.schedulers.base import QuarantinesGpus, SchedulerError
from fleetctl.sim.scheduler import SimScheduler
from tests.support.sim_fleet import finish_job, make_fleet

GPU = "0000:2b:00"


@pytest.fixture
def one_node(make_settings, sqlite_url) -> tuple[SimScheduler, str]:
    settings = make_settings(sqlite_url)
    (node,) = make_fleet(settings, 1, racks=1)  # h100-sxm: 8 GPUs
    return SimScheduler(get_engine(settings.db_url)), node


def test_a_node_with_a_gpu_out_runs_a_7_gpu_job_and_not_an_8_gpu_one(one_node) -> None:
    scheduler, node = one_node
    assert isinstance(scheduler, QuarantinesGpus)
    scheduler.quarantine_gpu(node, GPU, "XID 48")
    assert scheduler.gpus_out(node) == [GPU]
    eight = scheduler.submit("eight", 1, gpus_per_node=8)
    seven = scheduler.submit("seven", 1, gpus_per_node=7)
    assert scheduler.job(eight.job_id).state == "pending"
    assert scheduler.job(seven.job_id).state == "running" and scheduler.job(seven.job_id).nodes == (node,)
    assert scheduler.node_state(node).drained is False  # the node itself stays schedulable

    finish_job(scheduler.engine, seven.job_id)
    assert scheduler.job(eight.job_id).state == "pending"  # still 7 GPUs in its GRES
    scheduler.release_gpu(node, GPU)
    assert scheduler.gpus_out(node) == []
    assert scheduler.job(eight.job_id).state == "running"


def test_taking_the_same_gpu_out_twice_leaves_one_out(one_node) -> None:
    scheduler, node = one_node
    scheduler.quarantine_gpu(node, GPU, "XID 48")
    scheduler.quarantine_gpu(node, GPU, "XID 64")
    assert scheduler.gpus_out(node) == [GPU]


def test_a_node_cannot_lose_more_gpus_than_it_has(one_node) -> None:
    scheduler, node = one_node
    for bus in range(8):
        scheduler.quarantine_gpu(node, f"0000:{bus:02x}:00", "test")
    with pytest.raises(SchedulerError, match="has 8 GPUs: cannot take 9 out of its GRES"):
        scheduler.quarantine_gpu(node, "0000:99:00", "test")
    assert len(scheduler.gpus_out(node)) == 8
    assert scheduler.job(scheduler.submit("one", 1, gpus_per_node=1).job_id).state == "pending"
