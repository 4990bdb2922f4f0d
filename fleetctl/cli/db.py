"""`fleetctl db upgrade`, `fleetctl db prune`."""

from __future__ import annotations

from pathlib import Path

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, fail

app = typer.Typer(help="The fleet database: schema upgrades, retention (prune).", no_args_is_help=True)


@app.command("upgrade")
def db_upgrade(ctx: typer.Context) -> None:
    """Apply the Alembic migrations up to head (also done automatically on first use)."""
    from fleetctl.db.engine import current_revision, describe, get_engine, upgrade

    s = context.settings(ctx)
    engine = get_engine(s.db_url, migrate=False)
    before = current_revision(engine)
    after = upgrade(engine)
    typer.echo(f"{describe(s.db_url)}: {before or 'empty'} -> {after}")


@app.command("prune")
def prune(
    ctx: typer.Context,
    dry_run: bool = typer.Option(False, "--dry-run", help="say what would be removed; remove nothing"),
    archive: Path | None = typer.Option(
        None, "--archive", help="append what is removed to FILE first, one JSON object a line (created mode 0600)"
    ),
) -> None:
    """Forget what the retention settings let go: raw check output after
    retention_raw_output_days, check verdicts after retention_check_days, health events
    after retention_health_event_days. What a figure or a decision reads is kept whatever
    its age (each node's latest runs, the health events since it last entered production,
    every transition, remediation, RMA and guard decision). Each worker does this every
    retention_interval_s."""
    import os

    from fleetctl.db.models import utcnow
    from fleetctl.db.retention import RetentionPolicy, count_prunable
    from fleetctl.db.retention import prune as prune_db

    s = context.settings(ctx)
    policy = RetentionPolicy.of(s)
    engine = context.engine(ctx)
    kept = (
        f"(raw output kept {policy.raw_output_days:g} days, verdicts {policy.check_days:g}, "
        f"health events {policy.health_event_days:g})"
    )
    now = utcnow()
    if dry_run:
        if archive is not None:
            fail("--archive writes what is removed: a --dry-run removes nothing", EXIT_USAGE)
        counts = count_prunable(engine, policy, now)
        typer.echo(f"would remove {_summary(counts)} {kept}")
        return
    if archive is None:
        removed = prune_db(engine, policy, now)
    else:
        try:
            fd = os.open(archive, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        except OSError as exc:
            fail(f"--archive {archive}: {exc.strerror}", EXIT_USAGE)
        with os.fdopen(fd, "a", encoding="utf-8") as handle:
            removed = prune_db(engine, policy, now, archive=handle)
    typer.echo(f"removed {_summary(removed)} {kept}" + (f"; archived to {archive}" if archive else ""))


def _summary(counts: dict[str, int]) -> str:
    from fleetctl.db.retention import AUDIT, CHECK_RUNS, HEALTH_EVENTS, RAW_OUTPUT

    return (
        f"{counts[CHECK_RUNS]} check runs, the raw output of {counts[RAW_OUTPUT]} more, "
        f"{counts[HEALTH_EVENTS]} health events, {counts[AUDIT]} audit requests"
    )
