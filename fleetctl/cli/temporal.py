"""`fleetctl temporal setup` and `roll-forward`: a namespace made ready for fleetctl's workflows, and
its running workflows moved onto the workers' code."""

from __future__ import annotations

import typer

from fleetctl.cli import context

app = typer.Typer(
    help="Temporal: register fleetctl's search attributes; move running workflows to the workers' code.",
    no_args_is_help=True,
)


@app.command("setup")
def setup(ctx: typer.Context) -> None:
    """Register fleetctl's search attributes in the namespace through the operator API
    (idempotent); a worker refuses to start on a namespace without them."""
    from fleetctl.connections.temporal_client import resolve
    from fleetctl.nodes.search_attributes import NODE_ATTRIBUTES, type_name
    from fleetctl.workflows.client import connect, register_search_attributes

    settings = context.settings(ctx)

    async def run() -> list[str]:
        return await register_search_attributes(await connect(settings))

    added = context.run_async(run())
    where = resolve(settings).describe()
    for key in NODE_ATTRIBUTES:
        typer.echo(
            f"{key.name} ({type_name(key.indexed_value_type)}): {'registered' if key.name in added else 'already there'}"
        )
    typer.echo(f"{where}: {len(added)} search attributes registered, {len(NODE_ATTRIBUTES) - len(added)} already there")


@app.command("roll-forward")
def roll_forward(ctx: typer.Context) -> None:
    """Continue every running node workflow and the capacity guard as new, on the workers'
    code: run it once every worker runs a new release, so that no open run keeps an old
    branch the next release retires (docs/decisions/0023-retiring-patches.md)."""
    from fleetctl.workflows.client import connect
    from fleetctl.workflows.client import roll_forward as ask_all

    settings = context.settings(ctx)

    async def run() -> list[str]:
        return await ask_all(await connect(settings), settings)

    asked = context.run_async(run())
    typer.echo(f"{len(asked)} workflows asked to continue as new on the workers' code")
