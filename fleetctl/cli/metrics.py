"""`fleetctl metrics serve [--port 9400]`: the fleet as Prometheus metrics."""

from __future__ import annotations

import threading

import typer

from fleetctl.cli import context
from fleetctl.cli.output import within

app = typer.Typer(help="Prometheus metrics of the fleet.", no_args_is_help=True)


@app.command("serve")
def serve(
    ctx: typer.Context,
    port: int = typer.Option(9400, "--port", callback=within(0, 65_535), help="TCP port for /metrics"),
    address: str = typer.Option("127.0.0.1", "--address", "--host",
                                help="address to listen on (default: this machine only; give one to open it)"),
) -> None:
    """Serve /metrics until Ctrl-C; every scrape reads the database. Every metric is named
    fleetctl_*: nodes per state and rack, the unhealthy nodes still in production, check runs
    and durations, drains, failures, job restarts and their latency, pending jobs and why,
    repairs, remediations, lemons, RMAs, rule outcomes, capacity-guard decisions, and for the
    configured fleet (FLEETCTL_FLEET) its breaker and capacity budget."""
    from datetime import timedelta

    from fleetctl.config import guard_policy
    from fleetctl.reliability import exporter_server
    from fleetctl.remediation.runbooks import LemonPolicy

    s = context.settings(ctx)
    server = exporter_server.serve(context.engine(ctx), port, address, s.fleet, guard_policy(s, s.fleet),
                                   LemonPolicy(s.lemon_threshold, timedelta(days=s.lemon_window_days)),
                                   s.agent_silence_s)
    typer.echo(f"serving Prometheus metrics on http://{address}:{server.server_port}/metrics", err=True)
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()
