"""A simulated fleet on the real Temporal dev server, with the fleetctl worker running on the
test's own event loop."""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

from temporalio.client import Client

from fleetctl.config import Settings
from fleetctl.db import queries
from fleetctl.db.engine import get_engine
from fleetctl.db.models import CheckRun, HealthEvent
from fleetctl.inventory.parse import parse_inventory
from fleetctl.workflows.client import ensure_node_workflows, request_transition
from fleetctl.workflows.worker import build_worker
from tests.support.checks import record_check


@dataclass
class RunningFleet:
    settings: Settings
    client: Client
    engine: object

    async def add(self, count: int = 1, state: str = "production", **timing: float) -> list[str]:
        """`count` new nodes, taken to `state`; `timing`: NodeLifecycleState's (ensure_node_workflows)."""
        names = [f"rb-{uuid.uuid4().hex[:8]}" for _ in range(count)]
        text = "nodes:\n" + "".join(
            f"  - {{name: {n}, address: sim://{n}, bmc: sim://{n}-bmc, rack: r1, profile: h100-sxm, scheduler: sim}}\n"
            for n in names
        )
        queries.upsert_nodes(self.engine, parse_inventory(text))
        await ensure_node_workflows(self.client, self.settings, [(n, "new", 0) for n in names], **timing)
        path = {
            "production": ("begin_burn_in", "begin_admission", "enter_production"),
            "maintenance": ("begin_burn_in", "phase_failed"),
            "new": (),
        }[state]
        for n in names:
            for trigger in path:
                await request_transition(self.client, n, trigger, "setup", actor_kind="automation")
        return names

    def record_check(self, node: str, check: str) -> CheckRun:
        return record_check(self.settings, node, check)

    def record_xid(self, node: str, code: int, message: str = "") -> None:
        key = f"test/{node}/xid/{uuid.uuid4().hex[:6]}"
        queries.insert_once(
            self.engine,
            HealthEvent(
                node_name=node, source="xid", code=code, severity="critical", message=message, idempotency_key=key
            ),
            HealthEvent.idempotency_key,
            key,
        )


@asynccontextmanager
async def running_fleet(settings: Settings):
    """The worker runs on the test's own event loop (pytest-asyncio gives each test one)."""
    client = await Client.connect(settings.temporal_address)
    with ThreadPoolExecutor(32) as pool:
        async with build_worker(client, settings, pool):
            yield RunningFleet(settings, client, get_engine(settings.db_url))
