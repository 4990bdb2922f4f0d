"""fleetctl's data converter where it matters: the worker's workflow sandbox decodes signals
with it (the client's converter), and every recorded history replays with it."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import pytest
import pytest_asyncio
from temporalio.client import Client
from temporalio.worker import Replayer, Worker

from fleetctl.workflows.api import HealthEventInput
from fleetctl.workflows.converter import DATA_CONVERTER, _fields
from fleetctl.workflows.worker import WORKFLOWS
from tests.replay.test_replay import HISTORIES, _history, _label
from tests.workflows.conftest import DECISION_S
from tests.workflows.probe import ConverterProbe


@pytest_asyncio.fixture(loop_scope="function")
async def clients(temporal_address):
    """A worker's client with fleetctl's converter, and a plain one that drives it (so the
    only fleetctl-converter decode of a HealthEventInput is the workflow's)."""
    return (
        await Client.connect(temporal_address, data_converter=DATA_CONVERTER),
        await Client.connect(temporal_address),
    )


async def test_the_workflow_sandbox_decodes_signals_with_fleetctls_converter(clients) -> None:
    worker_client, driver = clients
    task_queue = f"converter-{uuid.uuid4().hex[:8]}"
    async with Worker(worker_client, task_queue=task_queue, workflows=[ConverterProbe]):
        handle = await driver.start_workflow(
            ConverterProbe.run, id=f"probe-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        before = _fields.cache_info()
        await handle.signal(
            ConverterProbe.health_event,
            HealthEventInput("gpu-7", "xid", 79, "fallen off the bus", at=1.5, at_from_record=True),
        )
        answer = await asyncio.wait_for(handle.result(), DECISION_S)
    assert answer == ["HealthEventInput", "gpu-7", 79, True]
    after = _fields.cache_info()
    # The signal's decode went through the cached dataclass conversion (hits or a first miss).
    assert after.hits + after.misses > before.hits + before.misses


@pytest.mark.parametrize("path", HISTORIES, ids=[_label(p) for p in HISTORIES])
async def test_history_replays_with_fleetctls_converter(path: Path) -> None:
    before = _fields.cache_info()
    await Replayer(workflows=WORKFLOWS, data_converter=DATA_CONVERTER).replay_workflow(_history(path))
    after = _fields.cache_info()
    assert after.hits + after.misses > before.hits + before.misses
