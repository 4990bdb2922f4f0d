"""`fleetctl events serve`: an HTTP intake for Alertmanager webhooks and plain JSON events,
and a poller of Node Problem Detector's conditions on Kubernetes nodes."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import List, Optional

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, fail

app = typer.Typer(help="Health events from the systems operators already run.", no_args_is_help=True)

MIN_TOKEN = 16


@app.command("serve")
def serve(
    ctx: typer.Context,
    port: int = typer.Option(9411, "--port", help="TCP port"),
    address: str = typer.Option("127.0.0.1", "--address", help="address to listen on"),
    token_file: Optional[Path] = typer.Option(None, "--token-file",
                                              help="file holding the bearer token senders must give (or env FLEETCTL_INTAKE_TOKEN)"),
    spool: Path = typer.Option(Path("/var/lib/fleetctl-intake"), "--spool", help="directory for accepted, undelivered events"),
    kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="poll this cluster's Node Problem Detector conditions"),
    in_cluster: bool = typer.Option(False, "--in-cluster", help="poll the cluster this runs in"),
    condition: List[str] = typer.Option([], "--condition", help="a node condition type that is a fault (repeatable; default: NPD's)"),
    poll_interval: float = typer.Option(10.0, "--poll-interval", help="seconds between node condition polls"),
) -> None:
    """POST /alertmanager (webhook_config url), POST /events ({"events": [...]}) and POST
    /heartbeat (agents, {"node": NAME}); all need `Authorization: Bearer TOKEN`. Events are
    de-duplicated by id and signalled to each node's workflow; heartbeats are written to the
    database once a second (when each node's agent was last heard)."""
    from fleetctl.agent.runner import ensure_dir
    from fleetctl.agent.transport import TemporalTransport
    from fleetctl.intake.parse import NPD_CONDITIONS
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.intake.heartbeats import Heartbeats
    from fleetctl.intake.server import Intake, poll_node_conditions, serve_http

    token = context.intake_token(token_file, "--token-file")
    if len(token) < MIN_TOKEN or any(c.isspace() or not c.isprintable() for c in token):
        fail(f"a bearer token of at least {MIN_TOKEN} printable characters is required (--token-file or FLEETCTL_INTAKE_TOKEN)",
             EXIT_USAGE)
    if not 1 <= poll_interval <= 3600:
        fail("--poll-interval must be between 1 and 3600 seconds", EXIT_USAGE)
    if kubeconfig and in_cluster:
        fail("give at most one of --kubeconfig and --in-cluster", EXIT_USAGE)
    try:
        ensure_dir(spool)
    except OSError as exc:
        fail(f"--spool {spool}: {exc}", EXIT_USAGE)
    settings = context.settings(ctx)
    intake = Intake(spool, TemporalTransport(settings))
    heartbeats = Heartbeats(lambda heard: queries.record_agent_heartbeats(get_engine(settings.db_url), heard))
    try:
        server = serve_http(intake, token, address, port, heartbeats)
    except OSError as exc:
        fail(f"cannot listen on {address}:{port} ({exc.strerror})")
    stop = threading.Event()
    writer = threading.Thread(target=heartbeats.flush_until, args=(stop,), name="fleetctl-intake-heartbeats", daemon=True)
    writer.start()
    if kubeconfig or in_cluster:
        from kubernetes import client, config

        if in_cluster:
            config.load_incluster_config()  # the pod's service account
            api_client = None
        else:
            api_client = config.new_client_from_config(config_file=str(kubeconfig))
        api = client.CoreV1Api(api_client)
        threading.Thread(target=poll_node_conditions, args=(intake, api, tuple(condition) or NPD_CONDITIONS, stop, poll_interval),
                         name="fleetctl-intake-npd", daemon=True).start()
    typer.echo(f"intake on http://{address}:{server.server_port} (POST /alertmanager, /events, /heartbeat)", err=True)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await intake.deliver_until(stop)

    try:
        context.run_async(main())
    finally:
        server.shutdown()
        stop.set()
        writer.join(timeout=10)  # the last heartbeats heard are written before the intake exits
        intake.spool.close()
