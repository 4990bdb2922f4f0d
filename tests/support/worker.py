"""The worker thread the CLI tests drive their commands against."""

from workflows.worker import BackgroundWorker as WorkerThread  # noqa: F401
