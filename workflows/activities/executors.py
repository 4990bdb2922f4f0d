"""Which executor reaches a node: `sim://` addresses go to the simulated node, everything
else over SSH. One SSH executor per process, so its connection pool and concurrency limit
cover every check the worker runs."""

from __future__ import annotations

import threading
from functools import partial
from typing import TYPE_CHECKING

from fleetctl.config import Settings
from fleetctl.executors.base import Executor, NodeTarget
from fleetctl.sim import SIM_SCHEME

if TYPE_CHECKING:
    from fleetctl.db.models import Node


def target_for(node: Node) -> NodeTarget:
    """The NodeTarget of a `nodes` row."""
    return NodeTarget(
        name=node.name, address=node.address, user=node.ssh_user, jump_host=node.jump_host, profile=node.profile
    )


class ExecutorRegistry:
    def __init__(self, settings: Settings):
        self.settings = settings
        self._lock = threading.Lock()
        self._ssh: Executor | None = None
        self._sim: Executor | None = None

    def for_target(self, target: NodeTarget) -> Executor:
        with self._lock:
            if target.address.startswith(SIM_SCHEME):
                if self._sim is None:
                    self._sim = self._make_sim()
                return self._sim
            if self._ssh is None:
                from fleetctl.executors.ssh import SshExecutor

                self._ssh = SshExecutor(
                    known_hosts=self.settings.known_hosts,
                    accept_new_host_keys=self.settings.accept_new_host_keys,
                    key_file=self.settings.ssh_key_file or None,
                    jump_host=self.settings.ssh_jump_host or None,
                )
            return self._ssh

    def _make_sim(self) -> Executor:
        from fleetctl.db.engine import get_engine
        from fleetctl.sim import store
        from fleetctl.sim.executor import SimExecutor

        engine = get_engine(self.settings.db_url)
        return SimExecutor(
            faults_for=partial(store.fault_specs, engine),
            seed=self.settings.sim_seed,
            time_scale=self.settings.sim_time_scale,
            booted_at=partial(store.booted_at, engine),
            cure=partial(store.cure, engine),
            domain_members=partial(store.domain_members, engine),
            leaf=partial(store.leaf_of, engine),
        )

    def close(self) -> None:
        for executor in (self._ssh, self._sim):
            if executor is not None:
                executor.close()
