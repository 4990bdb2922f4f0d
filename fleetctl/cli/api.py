"""`fleetctl api serve`: the front door every write command goes through (fleetctl.authz)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, fail

app = typer.Typer(help="The front door: write commands for authenticated subjects, audited.", no_args_is_help=True)


@app.command("serve")
def serve(
    ctx: typer.Context,
    socket_path: Path = typer.Option(..., "--socket", help="unix socket nginx proxies to (its directory: chmod o-rwx)"),
    roles_file: Path = typer.Option(..., "--roles", help="the roles file: subjects and groups, their role per fleet"),
    oidc_issuer: str = typer.Option("", "--oidc-issuer", help="accept bearer tokens of this issuer (iss)"),
    oidc_jwks_url: str = typer.Option("", "--oidc-jwks-url", help="the issuer's keys (JWKS)"),
    oidc_audience: str = typer.Option("", "--oidc-audience", help="the audience (aud) tokens must name"),
    oidc_subject_claim: str = typer.Option("sub", "--oidc-subject-claim", help="the claim naming the subject"),
    oidc_groups_claim: str = typer.Option("groups", "--oidc-groups-claim", help="the claim listing its groups"),
    command_timeout_s: float = typer.Option(
        600.0, "--command-timeout", min=1.0, max=86400.0, help="seconds a command may run before it is stopped"
    ),
) -> None:
    """Serve the front door on a unix socket until SIGTERM: each write command asked is
    authorized against the roles file, recorded in the audit trail, and (allowed) run here
    as the authenticated subject."""
    from fleetctl.authz.api_server import FrontDoor, RequestRefused, child_environment
    from fleetctl.authz.api_server import serve as serve_front_door
    from fleetctl.authz.identity_client import OidcVerifier
    from fleetctl.authz.roles import RolesError, load_roles

    s = context.settings(ctx)
    if s.api_url:
        fail("api_url is set: the front door runs commands itself (unset FLEETCTL_API_URL for it)", EXIT_USAGE)
    try:
        load_roles(roles_file)
    except RolesError as exc:
        fail(str(exc), EXIT_USAGE)
    oidc = None
    if any((oidc_issuer, oidc_jwks_url, oidc_audience)):
        if not all((oidc_issuer, oidc_jwks_url, oidc_audience)):
            fail("--oidc-issuer, --oidc-jwks-url and --oidc-audience go together", EXIT_USAGE)
        oidc = OidcVerifier(oidc_issuer, oidc_jwks_url, oidc_audience, oidc_subject_claim, oidc_groups_claim)
    door = FrontDoor(
        roles_path=roles_file,
        engine=context.engine(ctx),
        child_env=child_environment(s, dict(os.environ)),
        default_fleet=s.fleet,
        oidc=oidc,
        command_timeout_s=command_timeout_s,
    )
    try:
        serve_front_door(door, socket_path)
    except RequestRefused as exc:
        fail(str(exc), EXIT_USAGE)
