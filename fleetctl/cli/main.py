"""The `fleetctl` entry point: global options, the nouns, and one-line errors."""

from __future__ import annotations

import os
import sys
from typing import Optional

import click
import typer
from typer.core import TyperGroup
from typer.exceptions import TyperException

from fleetctl import __version__
from fleetctl.cli import check, demo, dev, firmware, fleet, job, metrics, node, reconcile, report, rma, runbook, schedule, sim
from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE


def _known_errors() -> dict[type[BaseException], int]:
    # An error class can only have been raised if its module was imported: asking only those
    # keeps a failing command from importing (say) SQLAlchemy to report a Temporal error.
    errors: dict[type[BaseException], int] = {}
    if "fleetctl.config" in sys.modules:
        from fleetctl.config import ConfigError

        errors[ConfigError] = EXIT_USAGE
    if "fleetctl.inventory" in sys.modules:
        from fleetctl.inventory import InventoryError

        errors[InventoryError] = EXIT_USAGE
    if "fleetctl.db.engine" in sys.modules:
        from fleetctl.db.engine import DatabaseUnavailable

        errors[DatabaseUnavailable] = EXIT_OPERATIONAL
    if "workflows.starter" in sys.modules:  # only commands that talked to Temporal raise these
        from workflows.starter import CommandRejected, TemporalUnavailable

        errors.update({TemporalUnavailable: EXIT_OPERATIONAL, CommandRejected: EXIT_OPERATIONAL})
    return errors


class FleetctlGroup(TyperGroup):
    """Turns the errors an operator can act on into one line and an exit code."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        # typer >= 0.20 raises its own copy of click's usage errors (TyperException), which
        # its main() turns into the usage message and exit 2 like click's.
        except (click.exceptions.Exit, click.ClickException, click.Abort, typer.Exit, typer.Abort, TyperException):
            raise
        except Exception as exc:  # noqa: BLE001 - mapped below, re-raised when unknown and debugging
            for kind, code in _known_errors().items():
                if isinstance(exc, kind):
                    typer.echo(f"error: {exc}", err=True)
                    raise typer.Exit(code) from None
            if os.environ.get("FLEETCTL_DEBUG"):
                raise
            typer.echo(f"error: internal: {exc.__class__.__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", err=True)
            raise typer.Exit(EXIT_OPERATIONAL) from None


app = typer.Typer(
    cls=FleetctlGroup,
    help="fleetctl: burn in, admit, check, drain, remediate and RMA the nodes of a GPU fleet.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(node.app, name="node")
app.add_typer(check.app, name="check")
app.add_typer(fleet.app, name="fleet")
app.add_typer(schedule.app, name="schedule")
app.add_typer(sim.app, name="sim")
app.add_typer(dev.app, name="dev")
app.add_typer(dev.db_app, name="db")
app.command("demo")(demo.demo)
app.command("worker")(dev.worker)
app.command("config")(dev.show_config)
app.add_typer(job.app, name="job")
app.command("reconcile")(reconcile.reconcile)
app.add_typer(runbook.app, name="runbook")
app.add_typer(rma.app, name="rma")
app.add_typer(firmware.app, name="firmware")
app.command("report")(report.report)
app.add_typer(metrics.app, name="metrics")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fleetctl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    config: Optional[str] = typer.Option(None, "--config", help="config file (default: $FLEETCTL_CONFIG or the user config dir)"),
    db_url: Optional[str] = typer.Option(None, "--db-url", help="database URL (env FLEETCTL_DB_URL)"),
    temporal_address: Optional[str] = typer.Option(None, "--temporal-address", help="host:port (env TEMPORAL_ADDRESS)"),
    namespace: Optional[str] = typer.Option(None, "--namespace", help="Temporal namespace (env TEMPORAL_NAMESPACE)"),
    task_queue: Optional[str] = typer.Option(None, "--task-queue", help="env FLEETCTL_TASK_QUEUE"),
    operator: Optional[str] = typer.Option(None, "--as", help="operator identity recorded on changes (default user@host)"),
    accept_new_host_keys: Optional[bool] = typer.Option(
        None, "--accept-new-host-keys", help="trust (and record) SSH host keys never seen before; changed keys are always refused"),
    temporal_profile: Optional[str] = typer.Option(None, "--temporal-profile", help="profile of Temporal's TOML config (env TEMPORAL_PROFILE)"),
    tls: Optional[bool] = typer.Option(None, "--tls/--no-tls", help="TLS to Temporal (env TEMPORAL_TLS; on when any TLS setting is given)"),
    tls_ca_path: Optional[str] = typer.Option(None, "--tls-ca-path", help="Temporal server CA (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)"),
    tls_cert_path: Optional[str] = typer.Option(None, "--tls-cert-path", help="mTLS client certificate (env TEMPORAL_TLS_CLIENT_CERT_PATH)"),
    tls_key_path: Optional[str] = typer.Option(None, "--tls-key-path", help="mTLS client key (env TEMPORAL_TLS_CLIENT_KEY_PATH)"),
    tls_server_name: Optional[str] = typer.Option(None, "--tls-server-name", help="Temporal server name to verify (env TEMPORAL_TLS_SERVER_NAME)"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
) -> None:
    from fleetctl.config import load_settings

    # No --api-key flag: a command line is visible to every user of the host (TEMPORAL_API_KEY).
    ctx.obj = load_settings(
        flags={"db_url": db_url, "temporal_address": temporal_address, "temporal_namespace": namespace,
               "task_queue": task_queue, "operator": operator, "accept_new_host_keys": accept_new_host_keys,
               "temporal_profile": temporal_profile, "temporal_tls": tls, "temporal_tls_ca_path": tls_ca_path,
               "temporal_tls_cert_path": tls_cert_path, "temporal_tls_key_path": tls_key_path,
               "temporal_tls_server_name": tls_server_name},
        config_file=config,
    )


def run() -> None:
    try:
        app()
    except SystemExit as done:
        code = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
    else:
        code = 0
    # Leave without running interpreter teardown: the Temporal client's native runtime can
    # abort the process while it is torn down (temporalio sdk-python#300), turning a command
    # that did its work into a crash. Everything is written and flushed by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run()
