"""`fleetctl events serve`: an HTTP intake for Alertmanager webhooks and plain JSON events,
and a poller of Node Problem Detector's conditions on Kubernetes nodes."""

from __future__ import annotations

import asyncio
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_OPERATIONAL, EXIT_USAGE, fail, within

if TYPE_CHECKING:
    from collections.abc import Callable

    from fleetctl.checks.xid_policy import XidPolicy
    from fleetctl.intake.credentials import Credentials
    from fleetctl.intake.delivery import Intake
    from fleetctl.intake.server import IntakeServer, KnownNodes
    from fleetctl.server_tls import ReloadingTLS

app = typer.Typer(help="Health events from the systems operators already run.", no_args_is_help=True)

MIN_TOKEN = 16
# How long a stopping intake waits for its last write of heartbeats (the database's answer).
LAST_HEARTBEATS_S = 5.0


@app.command("serve")
def serve(
    ctx: typer.Context,
    port: int = typer.Option(9411, "--port", help="TCP port"),
    address: str = typer.Option("127.0.0.1", "--address", help="address to listen on"),
    token_file: Path | None = typer.Option(
        None, "--token-file", help="file holding the bearer token senders must give (or env FLEETCTL_INTAKE_TOKEN)"
    ),
    spool: Path = typer.Option(
        Path("/var/lib/fleetctl-intake"), "--spool", help="directory for accepted, undelivered events"
    ),
    kubeconfig: Path | None = typer.Option(
        None, "--kubeconfig", help="poll this cluster's Node Problem Detector conditions"
    ),
    in_cluster: bool = typer.Option(False, "--in-cluster", help="poll the cluster this runs in"),
    condition: list[str] = typer.Option(
        [], "--condition", help="a node condition type that is a fault (repeatable; default: NPD's)"
    ),
    poll_interval: float = typer.Option(10.0, "--poll-interval", help="seconds between node condition polls"),
    credentials: Path | None = typer.Option(
        None,
        "--credentials",
        help="the agents' credential hashes (`fleetctl events credential "
        "issue`): each speaks for its own node only; reread when it changes",
    ),
    tls_cert: Path | None = typer.Option(None, "--tls-cert", help="serve https with this certificate (PEM chain)"),
    tls_key: Path | None = typer.Option(None, "--tls-key", help="the certificate's private key (PEM)"),
    tls_client_ca: Path | None = typer.Option(
        None, "--tls-client-ca", help="require client certificates signed by this CA (PEM)"
    ),
    header_timeout: float = typer.Option(
        10.0,
        "--header-timeout",
        callback=within(0.1, 300),
        help="seconds a connection has for its request headers, in all",
    ),
    body_timeout: float = typer.Option(
        30.0, "--body-timeout", callback=within(0.1, 600), help="seconds a connection has for its request body, in all"
    ),
    max_connections: int = typer.Option(
        256, "--max-connections", callback=within(1, 10_000), help="connections held at once (one thread each)"
    ),
    max_queued_per_credential: int = typer.Option(
        10_000,
        "--max-queued-per-credential",
        callback=within(1, 100_000),
        help="undelivered events one credential (an agent's, the operator token) may hold queued; past it, "
        "its minor events are dropped and counted, its critical ones still taken",
    ),
    roles: Path | None = typer.Option(
        None, "--roles", help="the roles file: the operator token is taken only while --token-subject is an operator"
    ),
    token_subject: str = typer.Option("intake", "--token-subject", help="the operator token's subject in --roles"),
) -> None:
    """POST /alertmanager (webhook_config url), POST /events ({"events": [...]}) and POST
    /heartbeat (agents, {"node": NAME}); all need `Authorization: Bearer TOKEN`. Events are
    de-duplicated by id and signalled to each node's workflow; heartbeats are written to the
    database once a second (when each node's agent was last heard)."""
    from fleetctl.agent.runner import ensure_dir
    from fleetctl.db import queries
    from fleetctl.db.engine import get_engine
    from fleetctl.intake.delivery import Intake
    from fleetctl.intake.heartbeats import Heartbeats
    from fleetctl.intake.server import KnownNodes, Limits, serve_http
    from fleetctl.intake.signals import WorkflowSignals

    token = context.intake_token(token_file, "--token-file")
    _refuse_bad_options(token, poll_interval, bool(kubeconfig) and in_cluster, tls_cert, tls_key, tls_client_ca)
    granted = _token_granted(roles, token_subject, ctx) if roles else None
    who, tls = _credentials_and_tls(token, credentials, granted, tls_cert, tls_key, tls_client_ca)
    try:
        ensure_dir(spool)
    except OSError as exc:
        fail(f"--spool {spool}: {exc}", EXIT_USAGE)
    settings = context.settings(ctx)
    policy = context.xid_policy(settings)
    intake = Intake(spool, WorkflowSignals(settings), max_per_credential=max_queued_per_credential)
    heartbeats = Heartbeats(lambda heard: queries.record_agent_heartbeats(get_engine(settings.db_url), heard))
    known = KnownNodes(lambda names: queries.existing_names(get_engine(settings.db_url), names))
    limits = Limits(header_timeout, body_timeout, _within_file_limit(max_connections))
    try:
        server = serve_http(
            intake, who, address, port, heartbeats, limits=limits, known=known, tls=tls, xid_policy=policy
        )
    except OSError as exc:
        fail(f"cannot listen on {address}:{port} ({exc.strerror})")
    stop = threading.Event()
    writer = threading.Thread(
        target=heartbeats.flush_until, args=(stop,), name="fleetctl-intake-heartbeats", daemon=True
    )
    writer.start()
    if kubeconfig or in_cluster:
        _poll_node_conditions(
            intake, None if in_cluster else kubeconfig, tuple(condition), stop, poll_interval, known, policy
        )
    typer.echo(
        f"intake on {'https' if tls else 'http'}://{address}:{server.server_port} (POST /alertmanager, /events, /heartbeat)",
        err=True,
    )
    _deliver_until_signalled(intake, server, writer, stop)


def _token_granted(roles: Path, subject: str, ctx: typer.Context) -> Callable[[], bool]:
    """Whether the operator token's subject is an operator in the fleet (asked per request);
    one line and exit 2 when the roles file is refused or does not make it one now."""
    from fleetctl.authz.roles import Role, RolesError, RolesWatch

    fleet = context.settings(ctx).fleet
    try:
        watch = RolesWatch(roles)
    except RolesError as exc:
        fail(str(exc), EXIT_USAGE)
    if not watch.grants(subject, fleet, Role.OPERATOR):
        fail(f"--token-subject {subject} is not an operator of fleet {fleet} in {roles}: events need one", EXIT_USAGE)
    return lambda: watch.grants(subject, fleet, Role.OPERATOR)


def _credentials_and_tls(
    token: str,
    credentials: Path | None,
    granted: Callable[[], bool] | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
) -> tuple[Credentials, ReloadingTLS | None]:
    """Who may send (the operator token, the agents' credentials) and the https context, if any."""
    from fleetctl.intake.credentials import BadCredentials, Credentials
    from fleetctl.server_tls import BadTLSFiles, tls_context

    try:
        who = Credentials(token, credentials, granted)
        # _refuse_bad_options: a certificate comes with its key
        tls = tls_context(tls_cert, tls_key, tls_client_ca) if tls_cert is not None and tls_key is not None else None
    except (BadCredentials, BadTLSFiles) as exc:
        fail(str(exc), EXIT_USAGE)
    return who, tls


def _refuse_bad_options(
    token: str,
    poll_interval: float,
    both_clusters: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
) -> None:
    if len(token) < MIN_TOKEN or any(c.isspace() or not c.isprintable() for c in token):
        fail(
            f"a bearer token of at least {MIN_TOKEN} printable characters is required (--token-file or FLEETCTL_INTAKE_TOKEN)",
            EXIT_USAGE,
        )
    if not 1 <= poll_interval <= 3600:
        fail("--poll-interval must be between 1 and 3600 seconds", EXIT_USAGE)
    if both_clusters:
        fail("give at most one of --kubeconfig and --in-cluster", EXIT_USAGE)
    if (tls_cert is None) != (tls_key is None) or (tls_client_ca is not None and tls_cert is None):
        fail("--tls-cert and --tls-key go together (and --tls-client-ca needs them)", EXIT_USAGE)


def _poll_node_conditions(
    intake: Intake,
    kubeconfig: Path | None,
    conditions: tuple[str, ...],
    stop: threading.Event,
    interval_s: float,
    known: KnownNodes,
    policy: XidPolicy,
) -> None:
    """Node Problem Detector's conditions polled in the background (kubeconfig None: this cluster)."""
    from kubernetes import client, config

    from fleetctl.intake.parse import NPD_CONDITIONS
    from fleetctl.intake.server import poll_node_conditions

    if kubeconfig is None:
        # kubernetes' config functions carry no annotations (its py.typed notwithstanding).
        config.load_incluster_config()  # type: ignore[no-untyped-call]  # the pod's service account
        api_client = None
    else:
        api_client = config.new_client_from_config(config_file=str(kubeconfig))  # type: ignore[no-untyped-call]
    threading.Thread(
        target=poll_node_conditions,
        args=(intake, client.CoreV1Api(api_client), conditions or NPD_CONDITIONS, stop, interval_s, known, policy),
        name="fleetctl-intake-npd",
        daemon=True,
    ).start()


def _deliver_until_signalled(
    intake: Intake, server: IntakeServer, writer: threading.Thread, stop: threading.Event
) -> None:
    """Deliver until SIGTERM or SIGINT; then stop within a bound, the spool intact."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await intake.deliver_until(stop)

    try:
        context.run_async(main())  # on a signal: within delivery's POLL_S + 2 x STOP_S
    finally:
        server.shutdown()  # within the server's poll interval; requests in progress end with the process
        stop.set()
        writer.join(timeout=LAST_HEARTBEATS_S)  # the last heartbeats heard are written before the intake exits
        intake.close()  # after this an accept answers 503, and what was accepted is on disk


# Open files the intake needs besides its connections: the database, the spool's segments,
# Temporal's and the Kubernetes API's connections, the interpreter's own.
FILES_BESIDES_CONNECTIONS = 64


def _within_file_limit(wanted: int) -> int:
    """`wanted` connections, fewer where the open-file limit would not hold them (each is a
    file): past the limit every accept fails, real heartbeats and all."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    room = max(1, soft - FILES_BESIDES_CONNECTIONS) if soft != resource.RLIM_INFINITY else wanted
    if room < wanted:
        typer.echo(f"--max-connections {wanted} lowered to {room}: the open-file limit is {soft}", err=True)
    return min(wanted, room)


credential_app = typer.Typer(
    help="Agent credentials: each speaks to the intake for its own node only.", no_args_is_help=True
)
app.add_typer(credential_app, name="credential")

CREDENTIALS_OPTION = typer.Option(..., "--credentials", help="the hash file `events serve --credentials` reads")


@credential_app.command("issue")
def credential_issue(
    ctx: typer.Context,
    node: str = typer.Argument(..., help="the node whose agent will hold it"),
    credentials: Path = CREDENTIALS_OPTION,
) -> None:
    """Print a new credential for NODE's agent (once: only its hash is kept) and record the
    hash, replacing the node's previous credential. Give it to the agent as
    --heartbeat-token-file. NODE must be in the inventory: the intake refuses a node it does
    not know, so a credential for one would only wait for a node of that name to appear."""
    from fleetctl.db import queries
    from fleetctl.intake.credentials import new_credential, token_hash, with_credential

    text = _hash_file(node, credentials)
    if queries.get_node(context.engine(ctx), node) is None:
        fail(f"unknown node: {node} is not in the inventory; no credential issued", EXIT_OPERATIONAL)
    secret = new_credential()
    _write_hash_file(credentials, with_credential(text, node, token_hash(secret)))
    typer.echo(secret)


@credential_app.command("revoke")
def credential_revoke(
    node: str = typer.Argument(..., help="the node whose agent credential to remove"),
    credentials: Path = CREDENTIALS_OPTION,
) -> None:
    """Remove NODE's credential: a running intake refuses it within a second."""
    from fleetctl.intake.credentials import with_credential

    text = _hash_file(node, credentials)
    if not any(line.split(" ", 1)[0] == node for line in text.splitlines()):
        fail(f"{node} has no credential in {credentials}", EXIT_USAGE)
    _write_hash_file(credentials, with_credential(text, node, None))
    typer.echo(f"revoked the credential of {node}", err=True)


def _hash_file(node: str, path: Path) -> str:
    """The hash file's text (empty when it does not exist yet), checked whole, for `node`."""
    from fleetctl.intake.credentials import BadCredentials, parse_hashes
    from fleetctl.inventory.names import NODE_NAME_RE

    if not NODE_NAME_RE.match(node):
        fail(f"{node!r} is not a node name", EXIT_USAGE)
    try:
        text = path.read_text(encoding="ascii") if path.exists() else ""
        parse_hashes(text, str(path))
    except (OSError, UnicodeDecodeError, BadCredentials) as exc:
        fail(str(exc) if isinstance(exc, BadCredentials) else f"--credentials {path}: {exc}", EXIT_USAGE)
    return text


def _write_hash_file(path: Path, text: str) -> None:
    """Whole or not at all (a reader never sees half a file), readable by its owner only."""
    import os
    import tempfile

    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w", encoding="ascii") as out:
            out.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        fail(f"--credentials {path}: {exc.strerror}", EXIT_USAGE)
