"""The `fleetctl` entry point: global options, the nouns, and one-line errors."""

from __future__ import annotations

import importlib
import os
import re
import sys
from typing import TYPE_CHECKING, Any, NamedTuple, NoReturn

import typer
import typer.main
from typer._click.exceptions import NoArgsIsHelpError, UsageError
from typer.core import TyperCommand, TyperGroup
from typer.exceptions import TyperException

from fleetctl import __version__
from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE
from fleetctl.text import printable

if TYPE_CHECKING:
    from typer._click import Command, Context


class Noun(NamedTuple):
    """A top-level command: where it lives (a Typer app, or a function for a single command)
    and its one-line help, here so that `fleetctl --help` lists it without importing it
    (tests/cli/test_cli_lazy.py holds this help to the module's own)."""

    module: str
    attribute: str
    help: str


# In the order `fleetctl --help` lists them. A noun's module is imported only when the noun
# runs: every noun imports its own layer (the database, the Temporal client, the schedulers),
# and `--help` or `node event` must not pay for the others.
NOUNS: dict[str, Noun] = {
    "demo": Noun(
        "fleetctl.cli.demo",
        "demo",
        "Run a simulated GPU fleet through burn-in, jobs, faults, drains, restarts, remediation and RMA.",
    ),
    "worker": Noun(
        "fleetctl.cli.worker",
        "worker",
        "Run a worker: hosts the workflows and activities (scale out by starting more).",
    ),
    "config": Noun("fleetctl.cli.config", "show_config", "Show the resolved settings and where each came from."),
    "reconcile": Noun(
        "fleetctl.cli.reconcile",
        "reconcile",
        "Compare node states with the schedulers' drains; exit 1 while any difference remains.",
    ),
    "report": Noun(
        "fleetctl.cli.report",
        "report",
        "MTTF, MTTR, availability, time per state, failure causes, "
        "rule precision, lemons, job ETTR, restart latency and stragglers, "
        "per fleet, rack and profile.",
    ),
    "node": Noun("fleetctl.cli.node", "app", "Nodes: import, list, show, drain, undrain, RMA, retire."),
    "check": Noun("fleetctl.cli.check", "app", "Node checks: what runs on a node, and how its output is judged."),
    "fleet": Noun("fleetctl.cli.fleet", "app", "The fleet as a whole: status, automation."),
    "schedule": Noun(
        "fleetctl.cli.schedule",
        "app",
        "Periodic active checks on idle production nodes, the production straggler judge, and the job history sync.",
    ),
    "topology": Noun(
        "fleetctl.cli.topology",
        "app",
        "Topology: Slurm's topology.conf and node labels from the inventory or the fabric (ibnetdiscover, nvidia-smi).",
    ),
    "validate": Noun(
        "fleetctl.cli.validate",
        "validate",
        "All-reduce across production nodes; when it falls short of the multi-node floor, bisection names the slow node or link.",
    ),
    "spares": Noun(
        "fleetctl.cli.spares",
        "app",
        "Hot spares: the nodes each island holds out of scheduling for restarts; refill them.",
    ),
    "sim": Noun("fleetctl.cli.sim", "app", "Simulated nodes: write a fleet inventory, inject and clear faults."),
    "dev": Noun("fleetctl.cli.dev", "app", "Run the embedded Temporal dev server."),
    "temporal": Noun(
        "fleetctl.cli.temporal",
        "app",
        "Temporal: register fleetctl's search attributes; move running workflows to the workers' code.",
    ),
    "db": Noun("fleetctl.cli.db", "app", "The fleet database: schema upgrades, retention (prune)."),
    "job": Noun(
        "fleetctl.cli.job",
        "app",
        "Training jobs: list, show, restart off bad nodes, record checkpoints, "
        "sync from the schedulers; submit simulated ones.",
    ),
    "runbook": Noun("fleetctl.cli.runbook", "app", "Remediation runbooks: list, show, validate, run; the runs."),
    "rma": Noun(
        "fleetctl.cli.rma", "app", "RMA records: list, show the evidence, confirm or reject a held one, close."
    ),
    "firmware": Noun("fleetctl.cli.firmware", "app", "Firmware: baseline, drift status, roll-outs."),
    "metrics": Noun("fleetctl.cli.metrics", "app", "Prometheus metrics of the fleet."),
    "agent": Noun(
        "fleetctl.cli.agent",
        "agent",
        "Run until SIGTERM: kernel log faults and GPU health changes go to the "
        "node's workflow, through an on-disk spool while Temporal is unreachable.",
    ),
    "events": Noun("fleetctl.cli.events", "app", "Health events from the systems operators already run."),
    "api": Noun("fleetctl.cli.api", "app", "The front door: write commands for authenticated subjects, audited."),
    "auth": Noun("fleetctl.cli.auth", "app", "Who the front door says you are, and what you may do."),
    "audit": Noun(
        "fleetctl.cli.audit",
        "audit",
        "Every write asked of the front door (`fleetctl api serve`): who (the authenticated "
        "subject), what, on which nodes, allowed or denied and why, oldest first.",
    ),
    "engines": Noun(
        "fleetctl.cli.engine_auth",
        "app",
        "The engines' own access controls: PostgreSQL roles, the Temporal gateway's nginx maps.",
    ),
}
# Where the root command keeps the words after fleetctl's own options, for the front door's
# path (fleetctl.cli.remote): the root callback resolves the settings that say whether to use it.
ARGV_KEY = "fleetctl.argv"


class _Unloaded(TyperCommand):
    """Stands in for a noun in the listing until the noun runs."""


def load_noun(name: str) -> Command:
    """The noun's command, built from its module (imported now)."""
    noun = NOUNS[name]
    target = getattr(importlib.import_module(noun.module), noun.attribute)
    command: Command
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)  # a group even with one subcommand: `dev server`
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    _plain_help(command)
    return command


def noun_or_none(name: str) -> Command | None:
    return load_noun(name) if name in NOUNS else None


def _plain_help(command: Any) -> None:
    """Help and usage errors in click's plain text, as kubectl and scontrol print theirs:
    Typer's boxed rendering imports rich's Markdown stack (half of `fleetctl --help`'s
    start-up, bench/cli_startup.py) and spreads a usage error over a box of lines."""
    command.rich_markup_mode = None
    for param in getattr(command, "params", []):
        _readable_metavar(param)
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


# What a value is, in help, for the types fleetctl's options take (Typer would print
# `<list[str]>` and `{names}`): the words kubectl's and click's own help use.
_METAVARS = {"str": "TEXT", "int": "N", "float": "NUMBER", "Path": "PATH"}


def _readable_metavar(param: Any) -> None:
    """A parameter's placeholder in help and usage: an argument by its name in capitals, an
    option by what it takes; a flag, or one given a metavar of its own, as it is."""
    if param.param_type_name == "argument":
        param.metavar = param.metavar or param.name.upper()
        # Typer braces a required argument ({NAMES}) and prints its Python type beside it
        # (<list[str]>); click's and kubectl's usage say NAMES... and [NAMES]...
        many = "..." if param.nargs != 1 else ""
        usage = f"{param.metavar}{many}" if param.required else f"[{param.metavar}]{many}"
        param._usage_display_name = lambda: usage
        param.display_type_rich = lambda ctx: None
        return
    if param.metavar is not None or getattr(param, "is_flag", False) or getattr(param, "count", False):
        return
    descriptor = getattr(param, "type_descriptor", None)
    choices = getattr(descriptor, "choices", None)
    if choices:
        param.metavar = "|".join(str(getattr(c, "value", c)) for c in choices)
        return
    annotation: Any = getattr(descriptor, "annotation", None)
    while getattr(annotation, "__origin__", None) is list and getattr(annotation, "__args__", None):
        annotation = annotation.__args__[0]
    name = getattr(annotation, "__name__", "")
    param.metavar = _METAVARS.get(name, "VALUE")


def _known_errors() -> dict[type[BaseException], int]:
    # An error class can only have been raised if its module was imported: asking only those
    # keeps a failing command from importing (say) SQLAlchemy to report a Temporal error.
    errors: dict[type[BaseException], int] = {}
    if "fleetctl.config" in sys.modules:
        from fleetctl.config import ConfigError

        errors[ConfigError] = EXIT_USAGE
    if "fleetctl.inventory.parse" in sys.modules:
        from fleetctl.inventory.parse import InventoryError

        errors[InventoryError] = EXIT_USAGE
    if "fleetctl.db.engine" in sys.modules:
        from fleetctl.db.engine import DatabaseUnavailable

        errors[DatabaseUnavailable] = EXIT_OPERATIONAL
    if "fleetctl.workflows.client" in sys.modules:  # only commands that talked to Temporal raise these
        from fleetctl.workflows.client import CommandRejected, TemporalNotSetUp, TemporalUnavailable

        errors.update(
            {
                TemporalUnavailable: EXIT_OPERATIONAL,
                CommandRejected: EXIT_OPERATIONAL,
                TemporalNotSetUp: EXIT_OPERATIONAL,
            }
        )
    return errors


def _refused_by_database(exc: BaseException) -> str | None:
    """One line for a statement the database's grants refused (a viewer's login writing):
    which group role the command needs (fleetctl.authz.pg_roles)."""
    if "sqlalchemy" not in sys.modules:
        return None
    from sqlalchemy.exc import DBAPIError

    if not isinstance(exc, DBAPIError):
        return None
    from fleetctl.authz.pg_roles import refusal

    return refusal(getattr(exc.orig, "sqlstate", None), exc.statement or "", str(exc.orig))


class FleetctlGroup(TyperGroup):
    """Loads each noun when it runs; turns the errors an operator can act on into one line and
    an exit code."""

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        for name, noun in NOUNS.items():
            self.commands.setdefault(name, _Unloaded(name=name, help=noun.help))

    def resolve_command(self, ctx: Context, args: list[str]) -> tuple[str | None, Command | None, list[str]]:
        # Listing (help, suggestions for a typo) asks get_command and sees the stand-ins;
        # only the command that runs is resolved, and only it is loaded.
        name, command, rest = super().resolve_command(ctx, args)
        if name is not None and isinstance(command, _Unloaded):
            command = self.commands[name] = load_noun(name)
        return name, command, rest

    def make_context(self, *args: Any, **kwargs: Any) -> Context:
        try:
            return super().make_context(*args, **kwargs)
        except UsageError as exc:  # a bad option of fleetctl itself (--bogus)
            _one_line_usage_error(exc)

    def invoke(self, ctx: Context) -> Any:
        ctx.meta[ARGV_KEY] = [*ctx._protected_args, *ctx.args]
        try:
            return super().invoke(ctx)
        # typer (>= 0.26 vendors click) raises its usage errors as TyperException, which its
        # main() turns into the usage message and exit 2.
        except UsageError as exc:
            _one_line_usage_error(exc)
        except (typer.Exit, typer.Abort, TyperException):
            raise
        except BrokenPipeError:
            stdout_closed()
        except (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError) as exc:
            typer.echo(f"error: {printable(_file_error(exc), keep_newlines=False)}", err=True)
            raise typer.Exit(EXIT_OPERATIONAL) from None
        except Exception as exc:
            if refused := _refused_by_database(exc):
                typer.echo(f"error: {printable(refused, keep_newlines=False)}", err=True)
                raise typer.Exit(EXIT_OPERATIONAL) from None
            for kind, code in _known_errors().items():
                if isinstance(exc, kind):
                    typer.echo(f"error: {printable(str(exc), keep_newlines=False)}", err=True)
                    raise typer.Exit(code) from None
            if os.environ.get("FLEETCTL_DEBUG"):
                raise
            from fleetctl.text import one_line

            typer.echo(f"error: internal: {exc.__class__.__name__}: {one_line(str(exc))}", err=True)
            raise typer.Exit(EXIT_OPERATIONAL) from None


def stdout_closed() -> NoReturn:
    """The reader of stdout has gone (`fleetctl ... | head`): the command ends quietly with
    exit 0, as it does under kubectl and coreutils (whose SIGPIPE the shell does not report),
    not with an error about a pipe. What Python still holds for stdout would fail again
    when flushed: stdout is pointed at /dev/null first."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    raise typer.Exit(0)


def _one_line_usage_error(exc: UsageError) -> NoReturn:
    """One line and exit 2, as every other error (docs/operations.md's promise), not click's usage
    box; a noun given alone still prints its help."""
    if isinstance(exc, NoArgsIsHelpError):
        raise exc
    where = f" (see '{exc.ctx.command_path} --help')" if exc.ctx is not None else ""
    message = operator_words(exc.format_message())
    typer.echo(f"error: {printable(message, keep_newlines=False)}{where}", err=True)
    raise typer.Exit(exc.exit_code) from None


# Typer converts typed values with pydantic, whose wording reaches the operator as is.
_PYDANTIC_WORDS = (
    (re.compile(r"Input should be a valid integer(, [^']*)?"), "a whole number is needed"),
    (re.compile(r"Input should be a valid number(, [^']*)?"), "a number is needed"),
    (re.compile(r"Input should be a valid boolean(, [^']*)?"), "true or false is needed"),
    (re.compile(r"Input should be a finite number"), "a finite number is needed"),
)


def operator_words(message: str) -> str:
    """A usage error's message with pydantic's phrases in an operator's words."""
    for pattern, words in _PYDANTIC_WORDS:
        message = pattern.sub(words, message)
    return message


def _file_error(exc: OSError) -> str:
    """An error reading or writing a file the operator named: the file and what the system said."""
    if exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc.__class__.__name__}"
    return str(exc) or exc.__class__.__name__


app = typer.Typer(
    cls=FleetctlGroup,
    help="fleetctl: burn in, admit, check, drain, remediate and RMA the nodes of a GPU fleet.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # see _plain_help
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"fleetctl {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    ctx: typer.Context,
    config: str | None = typer.Option(
        None, "--config", help="config file (default: $FLEETCTL_CONFIG or the user config dir)"
    ),
    db_url: str | None = typer.Option(None, "--db-url", help="database URL (env FLEETCTL_DB_URL)"),
    temporal_address: str | None = typer.Option(None, "--temporal-address", help="host:port (env TEMPORAL_ADDRESS)"),
    namespace: str | None = typer.Option(None, "--namespace", help="Temporal namespace (env TEMPORAL_NAMESPACE)"),
    task_queue: str | None = typer.Option(None, "--task-queue", help="env FLEETCTL_TASK_QUEUE"),
    fleet: str | None = typer.Option(
        None, "--fleet", help="the fleet whose guard and sweeps to use (env FLEETCTL_FLEET)"
    ),
    operator: str | None = typer.Option(None, "--as", help="operator identity recorded on changes (default user@host)"),
    accept_new_host_keys: bool | None = typer.Option(
        None,
        "--accept-new-host-keys",
        help="trust (and record) SSH host keys never seen before; changed keys are always refused",
    ),
    temporal_profile: str | None = typer.Option(
        None, "--temporal-profile", help="profile of Temporal's TOML config (env TEMPORAL_PROFILE)"
    ),
    tls: bool | None = typer.Option(
        None, "--tls/--no-tls", help="TLS to Temporal (env TEMPORAL_TLS; on when any TLS setting is given)"
    ),
    tls_ca_path: str | None = typer.Option(
        None, "--tls-ca-path", help="Temporal server CA (env TEMPORAL_TLS_SERVER_CA_CERT_PATH)"
    ),
    tls_cert_path: str | None = typer.Option(
        None, "--tls-cert-path", help="mTLS client certificate (env TEMPORAL_TLS_CLIENT_CERT_PATH)"
    ),
    tls_key_path: str | None = typer.Option(
        None, "--tls-key-path", help="mTLS client key (env TEMPORAL_TLS_CLIENT_KEY_PATH)"
    ),
    tls_server_name: str | None = typer.Option(
        None, "--tls-server-name", help="Temporal server name to verify (env TEMPORAL_TLS_SERVER_NAME)"
    ),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="print the version"),
) -> None:
    from fleetctl.config import load_settings

    # No --api-key flag: a command line is visible to every user of the host (TEMPORAL_API_KEY).
    ctx.obj = load_settings(
        flags={
            "db_url": db_url,
            "temporal_address": temporal_address,
            "temporal_namespace": namespace,
            "task_queue": task_queue,
            "fleet": fleet,
            "operator": operator,
            "accept_new_host_keys": accept_new_host_keys,
            "temporal_profile": temporal_profile,
            "temporal_tls": tls,
            "temporal_tls_ca_path": tls_ca_path,
            "temporal_tls_cert_path": tls_cert_path,
            "temporal_tls_key_path": tls_key_path,
            "temporal_tls_server_name": tls_server_name,
        },
        config_file=config,
    )
    if ctx.obj.api_url and ctx.meta.get(ARGV_KEY):
        from fleetctl.cli.remote import forward_if_write

        forward_if_write(ctx.obj, ctx.meta[ARGV_KEY], noun_or_none)


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
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BrokenPipeError:  # the last of the output, to a reader that has gone: see stdout_closed
            pass
    os._exit(code)


if __name__ == "__main__":
    run()
