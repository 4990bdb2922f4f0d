"""The job tests reuse the scheduler tests' real Slurm cluster fixture."""

from tests.schedulers.conftest import slurm_cluster  # noqa: F401 - a fixture, used by name
