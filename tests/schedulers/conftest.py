"""Fixtures for the scheduler adapters' tests. The Slurm ones need a Slurm that can run (tests/support/services.py);
nothing here is needed by other schedulers' tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.slurm_cluster import SlurmCluster, slurm_unavailable_reason, start_slurm_cluster
from fleetctl.schedulers.slurm import SlurmScheduler
from tests.support.services import missing_service

# Short, so the plain-Slurm restart (held for this long after a requeue) fits the test run;
# Slurm's default is 120 s.
TEST_CRED_EXPIRE_S = 10


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A real 4-node Slurm cluster (munged, slurmctld, 4 slurmds) for the whole session."""
    reason = slurm_unavailable_reason()
    if reason:
        missing_service("a Slurm cluster", reason)
    cluster = start_slurm_cluster(tmp_path_factory.mktemp("slurm"), nodes=4, cred_expire_s=TEST_CRED_EXPIRE_S)
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_cluster: SlurmCluster) -> Iterator[SlurmScheduler]:
    """The adapter on the shared cluster; every job is cancelled and node resumed afterwards."""
    yield slurm_cluster.scheduler()
    slurm_cluster.reset()
