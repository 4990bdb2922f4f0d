"""`fleetctl spares ...`: the hot spares each island holds for restarts (fleetctl.jobs.spares)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import typer

from fleetctl.cli import context
from fleetctl.cli.output import OUTPUT_OPTION, OutputFormat, emit, simple_table

if TYPE_CHECKING:
    from rich.console import RenderableType

app = typer.Typer(
    help="Hot spares: the nodes each island holds out of scheduling for restarts; refill them.", no_args_is_help=True
)


def _pools(ctx: typer.Context) -> list[dict[str, Any]]:
    from fleetctl.db import spares as store

    per_island = context.settings(ctx).spares_per_island
    held = store.held(context.engine(ctx))
    return [
        {"island": island, "spares": sorted(n for n, i in held.items() if i == island), "wanted": per_island}
        for island in sorted(set(held.values()))
    ]


def _table(rows: list[dict[str, Any]], _wide: bool) -> RenderableType:
    return simple_table(
        "hot spares",
        ["island", "spares", "held / wanted"],
        [(r["island"], ", ".join(r["spares"]), f"{len(r['spares'])} / {r['wanted']}") for r in rows],
    )


@app.command("list")
def list_spares(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """The spares each island holds (as fleetctl recorded them) and how many the policy
    (`spares_per_island`) asks for."""
    emit(_pools(ctx), output, _table)


@app.command("fill")
def fill(ctx: typer.Context, output: OutputFormat = OUTPUT_OPTION) -> None:
    """Refill every island's pool to `spares_per_island` from its idle production nodes, and
    let go of spares that left production (the worker does this as nodes come and go; this
    is for a changed policy or a scheduler that refused earlier). Exit 1 if a scheduler or an
    island refused."""
    from dataclasses import asdict

    from fleetctl.cli.job import scheduler_adapter
    from fleetctl.jobs.spares_sync import fill as fill_pools

    result = fill_pools(
        context.engine(ctx), context.settings(ctx).spares_per_island, lambda kind: scheduler_adapter(ctx, kind)
    )
    if output in (OutputFormat.table, OutputFormat.wide):
        typer.echo(f"held {', '.join(result.added) or 'none'}; released {', '.join(result.removed) or 'none'}")
        emit(_pools(ctx), output, _table)
    else:
        emit(asdict(result), output)
    for where, error in result.errors.items():
        typer.echo(f"error: {where}: {error}", err=True)
    if result.errors:
        raise typer.Exit(1)
