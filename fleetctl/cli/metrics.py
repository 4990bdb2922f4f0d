"""`fleetctl metrics serve [--port 9400]`: the fleet as Prometheus metrics."""

from __future__ import annotations

import threading
from pathlib import Path

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, fail, within

app = typer.Typer(help="Prometheus metrics of the fleet.", no_args_is_help=True)


@app.command("serve")
def serve(
    ctx: typer.Context,
    port: int = typer.Option(9400, "--port", callback=within(0, 65_535), help="TCP port for /metrics"),
    address: str = typer.Option(
        "127.0.0.1",
        "--address",
        "--host",
        help="address to listen on (default: this machine only; give one to open it)",
    ),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="serve https with this certificate (PEM chain)"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="the certificate's private key (PEM)"),
    tls_client_ca: Path | None = typer.Option(
        None, "--tls-client-ca", help="require scrapers' certificates signed by this CA (PEM)"
    ),
) -> None:
    """Serve /metrics until Ctrl-C; every scrape reads the database. Every metric is named
    fleetctl_*: nodes per state and rack, the unhealthy nodes still in production, check runs
    and durations, drains, failures, job restarts and their latency, pending jobs and why,
    repairs, remediations, lemons, RMAs, rule outcomes, capacity-guard decisions, and for the
    configured fleet (FLEETCTL_FLEET) its breaker and capacity budget."""
    from datetime import timedelta

    from fleetctl.config import guard_policy
    from fleetctl.reliability import exporter_server
    from fleetctl.remediation.lemons import LemonPolicy
    from fleetctl.server_tls import BadTLSFiles

    if (tls_cert is None) != (tls_key is None) or (tls_client_ca is not None and tls_cert is None):
        fail("--tls-cert and --tls-key go together (and --tls-client-ca needs them)", EXIT_USAGE)
    s = context.settings(ctx)
    try:
        server = exporter_server.serve(
            context.engine(ctx),
            port,
            address,
            s.fleet,
            guard_policy(s, s.fleet),
            LemonPolicy(s.lemon_threshold, timedelta(days=s.lemon_window_days)),
            s.agent_silence_s,
            tls_cert=_path(tls_cert),
            tls_key=_path(tls_key),
            tls_client_ca=_path(tls_client_ca),
        )
    except BadTLSFiles as exc:
        fail(str(exc), EXIT_USAGE)
    except OSError as exc:
        from fleetctl.text import one_line

        fail(f"cannot serve on {address}:{port}: {one_line(exc, 200)}", EXIT_USAGE)
    typer.echo(
        f"serving Prometheus metrics on {'https' if tls_cert else 'http'}://{address}:{server.server_port}/metrics",
        err=True,
    )
    try:
        threading.Event().wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.shutdown()


def _path(path: Path | None) -> str | None:
    return str(path) if path is not None else None
