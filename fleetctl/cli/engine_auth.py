"""`fleetctl engines grant-roles`, `fleetctl engines gateway-config`: the engines' own access
controls (PostgreSQL's grants, the Temporal gateway's maps) from a mapping of subject to role."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, fail

if TYPE_CHECKING:
    from fleetctl.authz.roles import Role

app = typer.Typer(
    help="The engines' own access controls: PostgreSQL roles, the Temporal gateway's nginx maps.",
    no_args_is_help=True,
)

ROLES_OPTION = typer.Option(
    ...,
    "--roles",
    help="the roles file the front door reads (docs/authorization.md): each subject's role in every fleet it is named for",
)


def _subject_roles(path: Path) -> dict[str, Role]:
    from fleetctl.authz.engine_roles import EngineRolesError, engine_roles
    from fleetctl.authz.roles import RolesError, load_roles

    try:
        return engine_roles(load_roles(path), str(path))
    except (RolesError, EngineRolesError) as exc:
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


@app.command("grant-roles")
def grant_roles(
    ctx: typer.Context,
    roles: Path = ROLES_OPTION,
    print_sql: bool = typer.Option(False, "--sql", help="print the statements; run nothing"),
) -> None:
    """Create PostgreSQL's group roles fleetctl_viewer, fleetctl_operator and fleetctl_admin
    with their grants on every table, and a login role per subject in its group. Run it
    against the fleet database as a user that may create roles, after `fleetctl db upgrade`,
    and again whenever the roles change."""
    from sqlalchemy import text

    from fleetctl.authz.engine_roles import EngineRolesError
    from fleetctl.authz.pg_roles import group_statements, login_statements
    from fleetctl.db.engine import describe, get_engine

    subjects = _subject_roles(roles)
    try:
        logins = login_statements(subjects)
    except EngineRolesError as exc:
        fail(str(exc), EXIT_USAGE)
    url = context.settings(ctx).db_url
    if not url.startswith(("postgresql", "postgres:")):
        fail(f"grant-roles: {describe(url)} is not a PostgreSQL database", EXIT_USAGE)
    # Never migrate here: tables this (privileged) user created would be owned by it.
    engine = get_engine(url, migrate=False)
    with engine.begin() as conn:
        database = conn.execute(text("SELECT current_database()")).scalar_one()
        owner = conn.execute(
            text("SELECT tableowner FROM pg_tables WHERE schemaname = 'public' AND tablename = 'alembic_version'")
        ).scalar()
        if owner is None:
            fail(f"grant-roles: {database} has no fleetctl schema: run `fleetctl db upgrade` as its owner first")
        statements = group_statements(database, owner) + logins
        if print_sql:
            typer.echo("".join(f"{s};\n" for s in statements), nl=False)
            return
        # The driver's own cursor, with no parameters: a '%' in a statement (format's %I) stays as written.
        cursor = conn.connection.cursor()
        for statement in statements:
            cursor.execute(statement)
    counts = {role: sum(1 for r in subjects.values() if r is role) for role in set(subjects.values())}
    granted = ", ".join(f"{n} {role.value}" for role, n in sorted(counts.items(), key=lambda i: i[0].value))
    typer.echo(f"{database}: group roles granted on every table (owner {owner}); logins: {granted or 'none'}")


@app.command("import-refusals")
def import_refusals(
    ctx: typer.Context,
    log: Path = typer.Argument(..., help="the gateway's refusal log (/var/log/nginx/temporal-gateway-refusals.log)"),
    subject_dn: str = typer.Option(
        "CN={subject}", "--subject-dn", help="a client certificate's whole subject, as given to gateway-config"
    ),
) -> None:
    """Record each call the Temporal gateway refused (its refusal log, one JSON line each) in
    the audit trail as a denied request: `fleetctl audit --denied` shows them, `metrics
    serve` counts them. Each refusal once, however often the log is read: run it from cron or
    logrotate's prerotate."""
    from fleetctl.authz.gateway import RefusalLogError, parse_refusals
    from fleetctl.db.audit import record_refusals

    try:
        text = log.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(f"{log}: cannot read ({getattr(exc, 'strerror', None) or exc})", EXIT_USAGE)
    try:
        refusals = parse_refusals(text, subject_dn, str(log))
    except RefusalLogError as exc:
        fail(str(exc), EXIT_USAGE)
    added, already = record_refusals(context.engine(ctx), context.settings(ctx).fleet, refusals)
    typer.echo(f"{log}: {added} refusals recorded in the audit trail, {already} already there")
