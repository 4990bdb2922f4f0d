"""The reservation that holds an island's hot spares, on the real Slurm cluster: no job lands
on a held node, the pool is set whole (created, changed, deleted when empty: an update to no
nodes would let Slurm pick one), and Slurm refuses to hold a node that runs a job."""

from __future__ import annotations

import pytest

from fleetctl.schedulers.base import HoldsSpares, SchedulerError

pytestmark = pytest.mark.slurm


def test_the_spare_reservation_keeps_jobs_off_and_is_set_whole(slurm_cluster) -> None:
    scheduler = slurm_cluster.scheduler()
    assert isinstance(scheduler, HoldsSpares)
    try:
        assert scheduler.spares() == {}
        scheduler.set_spares("ib-a", ["node3", "node4"])
        scheduler.set_spares("ib-a", ["node4", "node3"])  # the same pool again: nothing to change
        assert scheduler.spares() == {"ib-a": ("node3", "node4")}
        # A 3-node job cannot start: only two nodes are free of the reservation.
        held_off = slurm_cluster.submit_sleep_job("-N3")
        two = slurm_cluster.submit_sleep_job("-N2")
        assert set(slurm_cluster.wait_for_run(two, 0).nodes) == {"node1", "node2"}
        assert scheduler.job(held_off).state == "pending"
        slurm_cluster.run("scancel", held_off)
        # Taking node3 out of the pool frees it at once.
        scheduler.set_spares("ib-a", ["node4"])
        assert scheduler.spares() == {"ib-a": ("node4",)}
        one = slurm_cluster.submit_sleep_job("-N1")
        assert slurm_cluster.wait_for_run(one, 0).nodes == ("node3",)
        # A node running a job is not held.
        with pytest.raises(SchedulerError, match="busy"):
            scheduler.set_spares("ib-b", ["node1"])
        assert "ib-b" not in scheduler.spares()
        scheduler.set_spares("ib-a", [])
        assert scheduler.spares() == {}
        with pytest.raises(SchedulerError, match="invalid"):
            scheduler.set_spares("ib a", ["node4"])
    finally:
        for island in scheduler.spares():
            scheduler.set_spares(island, [])
        slurm_cluster.reset()


def test_a_job_restarted_onto_nodes_that_never_ran_it_starts_in_the_revoke_second(slurm_cluster) -> None:
    """Only the nodes a job ran on are told its credential is revoked, so one named onto others
    (a 1-node job onto a spare) is released without waiting for the next second, and starts:
    three restarts in a row, each released in the second of its requeue (most of the time)."""
    scheduler = slurm_cluster.scheduler()
    try:
        job_id = slurm_cluster.submit_sleep_job("-N1", "-w", "node1")
        on = slurm_cluster.wait_for_run(job_id, 0).nodes
        for run, target in enumerate(["node2", "node3", "node4"], start=1):
            scheduler.restart_job_on(job_id, exclude_nodes=list(on), nodes=[target])
            on = slurm_cluster.wait_for_run(job_id, run).nodes  # raises if the launch failed
            assert on == (target,)
    finally:
        slurm_cluster.reset()
