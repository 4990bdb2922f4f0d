"""A simulated fleet on the real Temporal dev server, driven through the real workflows: its
nodes written into the database, their workflows started, and waits on what they record."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass

from temporalio.client import Client

from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.inventory.parse import parse_inventory
from fleetctl.sim.inventory import render_inventory
from fleetctl.sim.store import add_fault
from fleetctl.workflows.api import node_workflow_id
from fleetctl.workflows.client import connect, ensure_node_workflows, request_phase
from fleetctl.workflows.definitions.node_lifecycle import NodeLifecycle


@dataclass
class SimFleet:
    settings: Settings
    client: Client
    names: list[str]

    @property
    def engine(self):
        return get_engine(self.settings.db_url)

    def state(self, name: str) -> str:
        return queries.get_node(self.engine, name).state

    def inject(self, name: str, kind: str, seed: int = 0, gpu: int | None = None) -> None:
        add_fault(self.engine, name, kind, gpu=gpu, not_before=0.0, seed=seed)

    async def admit(self, names, suite: str = "quick") -> None:
        for n in names:
            _, accepted, message = await request_phase(self.client, n, "admit", "tester", suite)
            assert accepted, message

    async def wait_states(self, names, states: set[str], timeout_s: float = 60.0) -> dict[str, str]:
        deadline = time.monotonic() + timeout_s
        while True:
            now = {n: self.state(n) for n in names}
            idle = True
            for n in names:
                wf = await self.client.get_workflow_handle(node_workflow_id(n)).query(NodeLifecycle.current)
                idle = idle and not wf.work and not wf.activity
            if all(s in states for s in now.values()) and idle:
                return now
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {states}: {now}")
            await asyncio.sleep(0.2)

    async def wait_event(self, name: str, trigger: str, timeout_s: float = 60.0):
        """The node's first transition by `trigger`, once it is recorded."""
        return await self._first_recorded(
            lambda: [e for e in queries.node_events(self.engine, name) if e.trigger == trigger],
            timeout_s,
            f"{name}: no {trigger} within {timeout_s:.0f} s",
        )

    async def wait_health_event(self, name: str, event_id: str, timeout_s: float = 60.0):
        """The node's health event sent with `event_id`, once it is recorded."""
        return await self._first_recorded(
            lambda: [e for e in queries.health_events(self.engine, name) if e.idempotency_key == event_id],
            timeout_s,
            f"{name}: health event {event_id} not recorded within {timeout_s:.0f} s",
        )

    @staticmethod
    async def _first_recorded(rows, timeout_s: float, missing: str):
        """The first of `rows()` once there is one, read every 0.2 s for up to `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while not (found := rows()):
            if time.monotonic() > deadline:
                raise AssertionError(missing)
            await asyncio.sleep(0.2)
        return found[0]


def make_fleet(
    settings: Settings, count: int, profile: str = "h100-sxm", racks: int = 4, islands: int = 0
) -> list[str]:
    """With `islands`, each rack is a leaf switch (leaf-01 ...) of an island (the sim inventory's)."""
    prefix = f"s{uuid.uuid4().hex[:6]}"
    entries = render_inventory(count, min(racks, count), profile, seed=1, name_prefix=prefix, islands=islands)
    import yaml

    specs = parse_inventory(yaml.safe_dump({"nodes": entries}))
    queries.upsert_nodes(get_engine(settings.db_url), specs)
    return [s.name for s in specs]


async def fleet_in_production(
    settings: Settings, count: int, profile: str = "h100-sxm", racks: int = 4, islands: int = 0, **timing: float
) -> SimFleet:
    """`count` simulated nodes recorded in production, their workflows started there (no
    burn-in: for tests of what happens to a node already serving), with `timing`'s
    NodeLifecycleState fields (ensure_node_workflows). gb200 with racks=1: one NVL72 domain
    of `count` trays."""
    from sqlalchemy import update
    from sqlmodel import Session

    from fleetctl.db.models import Node

    names = make_fleet(settings, count, profile, racks, islands)
    fleet = SimFleet(settings, await connect(settings), names)
    with Session(fleet.engine) as session:
        session.exec(update(Node).values(state="production", state_version=1))
        session.commit()
    await ensure_node_workflows(fleet.client, settings, [(n, "production", 1) for n in names], **timing)
    return fleet


def finish_job(engine, job_id: str) -> None:
    """The simulated job ends (the simulated scheduler has no clock of its own)."""
    from sqlmodel import Session, select

    from fleetctl.db.models import Job

    with Session(engine) as session:
        job = session.exec(select(Job).where(Job.job_id == job_id)).one()
        job.state, job.nodes = "completed", []
        session.add(job)
        session.commit()
