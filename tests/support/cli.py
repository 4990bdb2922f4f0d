"""The CLI driven in-process against a worker thread, as an operator at a console would."""

from __future__ import annotations

from contextlib import contextmanager

from typer.testing import CliRunner

from fleetctl.cli.main import app
from fleetctl.config import Settings
from workflows.worker import BackgroundWorker


@contextmanager
def console(settings: Settings, operator: str = "alice@console"):
    """invoke(*args, input=None) runs `fleetctl <args>` on the settings' database and Temporal."""
    worker = BackgroundWorker(settings).start()
    base = [
        "--db-url",
        settings.db_url,
        "--temporal-address",
        settings.temporal_address,
        "--task-queue",
        settings.task_queue,
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
