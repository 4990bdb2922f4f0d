"""`fleetctl engines grant-roles`, `fleetctl engines gateway-config`: the engines' own access
controls (PostgreSQL's grants, the Temporal gateway's maps) from a mapping of subject to role."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fleetctl.cli.output import EXIT_USAGE, fail

if TYPE_CHECKING:
    from fleetctl.authz.engine_roles import EngineRole

app = typer.Typer(
    help="The engines' own access controls: PostgreSQL roles, the Temporal gateway's nginx maps.",
    no_args_is_help=True,
)

ROLES_OPTION = typer.Option(
    ...,
    "--roles",
    help="YAML mapping each subject (certificate common name, database login) to viewer, operator or admin",
)


def _subject_roles(path: Path) -> dict[str, EngineRole]:
    from checks.safe_yaml import YamlRefused, load_file
    from fleetctl.authz.engine_roles import EngineRolesError, subject_roles

    try:
        return subject_roles(load_file(path) or {}, str(path))
    except (YamlRefused, EngineRolesError) as exc:
        fail(str(exc), EXIT_USAGE)


@app.command("gateway-config")
def gateway_config(
    roles: Path = ROLES_OPTION,
    service: list[str] = typer.Option(
        [], "--service", help="a service's certificate name (a worker, the front door): every method; repeatable"
    ),
    subject_dn: str = typer.Option(
        "CN={subject}", "--subject-dn", help="a client certificate's whole subject as nginx writes it (RFC 2253)"
    ),
) -> None:
    """Print the nginx maps the Temporal gateway includes (deploy/nginx/temporal-gateway.conf):
    each certificate's role, each gRPC method's class, and what each role may call."""
    from fleetctl.authz.engine_roles import EngineRolesError
    from fleetctl.authz.gateway import render_maps

    subjects = _subject_roles(roles)
    try:
        typer.echo(render_maps(subjects, service, subject_dn), nl=False)
    except EngineRolesError as exc:
        fail(str(exc), EXIT_USAGE)
