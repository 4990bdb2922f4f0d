"""`fleetctl worker`: run a worker that hosts the workflows and activities (scale out by
starting more)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, fail

if TYPE_CHECKING:
    import asyncio
    from collections.abc import Awaitable, Callable

    from fleetctl.config import Settings
    from fleetctl.connections.temporal_client import TemporalConnection


def implicit_database_problem(settings: Settings, temporal: TemporalConnection) -> str | None:
    """Why a worker must not start on this database, or None. A worker given no database uses
    a per-user SQLite file: right beside a local dev server, wrong for a shared Temporal,
    where every host would write a fleet database of its own."""
    if settings.sources.get("db_url", "default") != "default" or temporal.is_local():
        return None
    return (
        f"no database given and Temporal at {temporal.address} is not on this host: every worker of a fleet "
        "needs the fleet's one database; set FLEETCTL_DB_URL (or --db-url, or db_url in the config file)"
    )


def worker(ctx: typer.Context) -> None:
    """Run a worker: hosts the workflows and activities (scale out by starting more)."""
    import logging

    from fleetctl.connections.temporal_client import resolve
    from fleetctl.db.engine import describe
    from fleetctl.workflows.worker import require_site_files, run_worker

    s = context.settings(ctx)
    temporal = resolve(s)
    problem = implicit_database_problem(s, temporal)
    if problem:
        fail(problem, EXIT_USAGE)
    require_site_files(s)  # run_worker asks too; here, before the database's log lines, it is the only line
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    typer.echo(f"worker on task queue {s.task_queue!r}: database {describe(s.db_url)}, Temporal {temporal.describe()}")
    context.engine(ctx)  # fail fast, in one line, if the database is not there
    typer.echo("database ready")
    import signal

    # Until the worker's event loop takes SIGTERM over, it stops the process as Ctrl-C does.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        context.run_async(_serve_until_signalled(s, run_worker))
    except KeyboardInterrupt:
        pass
    typer.echo("worker stopped")


async def _serve_until_signalled(
    settings: Settings, run_worker: Callable[[Settings, asyncio.Event], Awaitable[None]]
) -> None:
    # SIGTERM (systemd, Kubernetes, compose) and Ctrl-C stop the worker the same way: it stops
    # polling and shuts down, so its workflow tasks go to other workers at once.
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await run_worker(settings, stop)
