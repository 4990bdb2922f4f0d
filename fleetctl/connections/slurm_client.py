"""Slurm's commands on a login or controller host over fleetctl's SSH executor. Wires the
executors layer to the schedulers layer, which do not import each other."""

from __future__ import annotations

from typing import Any

from fleetctl.config import Settings
from fleetctl.executors.base import NodeTarget
from fleetctl.schedulers.slurm import CommandRunner, SshCommandRunner

# The name the Slurm host goes by in the executor's messages and pool.
SLURM_HOST_NAME = "slurm-host"


def slurm_runner(settings: Settings, executors: Any = None) -> CommandRunner | None:
    """The runner for settings.slurm_host (None: Slurm's commands run on this host).
    executors is the worker's ExecutorRegistry, so Slurm's commands share the SSH pool and
    in-flight limit of the node checks; a CLI command without one gets an executor of its own,
    on the same known_hosts and key."""
    if not settings.slurm_host:
        return None
    target = NodeTarget(name=SLURM_HOST_NAME, address=settings.slurm_host, key_file=settings.ssh_key_file or None)
    if executors is not None:
        executor = executors.for_target(target)
    else:
        from fleetctl.executors.ssh import SshExecutor

        executor = SshExecutor(
            known_hosts=settings.known_hosts,
            accept_new_host_keys=settings.accept_new_host_keys,
            key_file=settings.ssh_key_file or None,
            jump_host=settings.ssh_jump_host or None,
        )
    return SshCommandRunner(executor, target, slurm_conf=settings.slurm_conf)
