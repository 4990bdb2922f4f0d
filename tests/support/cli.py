"""The CLI driven in-process against a worker thread, as an operator at a console would."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.config import Settings
from fleetctl.workflows.worker import BackgroundWorker
from tests.support.worker import until_polled


@contextmanager
def console(settings: Settings, operator: str = "alice@console"):
    """invoke(*args, input=None) runs `fleetctl <args>` on the settings' database and Temporal."""
    worker = BackgroundWorker(settings).start()
    # On a thread of its own: the console may be opened inside a test's event loop.
    with ThreadPoolExecutor(1) as waiter:
        waiter.submit(asyncio.run, until_polled(settings)).result()
    base = [
        "--db-url",
        settings.db_url,
        "--temporal-address",
        settings.temporal_address,
        "--task-queue",
        settings.task_queue,
        "--fleet",
        settings.fleet,
        "--as",
        operator,
    ]
    runner = CliRunner()

    def invoke(*args: str, input: str | None = None):
        return runner.invoke(app, [*base, *args], input=input)

    invoke.settings = settings
    try:
        yield invoke
    finally:
        worker.stop()
