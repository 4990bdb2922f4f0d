"""Fixtures of the fault and abuse suite: nodes behind a real sshd, driven through a worker."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest
from temporalio.client import Client

from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import NodeSpec
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect, ensure_node_workflows, request_phase, request_transition
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle
from tests.executors.conftest import ssh_node, ssh_server  # noqa: F401 - fixtures used by this suite
from tests.executors.sshd import SshNode
from tests.lifecycle.conftest import sim_fleet  # noqa: F401 - fixture used by this suite
from tests.support.fleet import wait_for
from tests.support.worker import WorkerThread

ONE_CHECK_SUITE = "one-check"


@dataclass
class SshFleet:
    """Nodes whose address is the test sshd: every check runs the fake tools over real SSH."""

    settings: Settings
    client: Client
    node: SshNode
    names: list[str]

    @property
    def engine(self):
        return get_engine(self.settings.db_url)

    async def to_production(self, name: str) -> None:
        for trigger in ("begin_burn_in", "begin_admission", "enter_production"):
            await request_transition(self.client, name, trigger, "setup", actor_kind="automation")

    async def recheck(self, name: str) -> None:
        _, accepted, message = await request_phase(self.client, name, "recheck", "tester", ONE_CHECK_SUITE)
        assert accepted, message
        await wait_for(lambda: self._idle_with_result(name), 60, f"{name}'s recheck")

    async def _idle_with_result(self, name: str) -> bool:
        s = await self.client.get_workflow_handle(node_workflow_id(name)).query(NodeLifecycle.current)
        return not s.work and not s.activity and bool(queries.latest_checks(self.engine, name))


@pytest.fixture
async def ssh_fleet(make_settings, sqlite_url, ssh_node, tmp_path):
    """factory(count) -> SshFleet; the suite `one-check` runs nvidia-smi-query only."""
    suites = tmp_path / "suites"
    suites.mkdir()
    (suites / "one.yaml").write_text(f"name: {ONE_CHECK_SUITE}\nchecks: [nvidia-smi-query]\n")
    workers: list[WorkerThread] = []

    async def factory(count: int = 1, known_hosts: str | None = None) -> SshFleet:
        settings = make_settings(sqlite_url)
        settings.known_hosts = known_hosts or str(ssh_node.known_hosts)
        settings.ssh_key_file = str(ssh_node.key_file)
        settings.suites_dir = str(suites)
        workers.append(WorkerThread(settings).start())
        prefix = f"ssh{uuid.uuid4().hex[:5]}"
        specs = [
            NodeSpec(
                name=f"{prefix}-{i}",
                address=f"{ssh_node.user}@{ssh_node.address_of(i)}",
                profile="h100-sxm",
                rack=f"rack-{i % 4}",
            )
            for i in range(count)
        ]
        queries.upsert_nodes(get_engine(settings.db_url), specs)
        client = await connect(settings)
        await ensure_node_workflows(client, settings, [(s.name, "new", 0) for s in specs])
        return SshFleet(settings, client, ssh_node, [s.name for s in specs])

    yield factory
    for w in workers:
        w.stop()
