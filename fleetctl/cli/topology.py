"""`fleetctl topology ...`: the fabric the inventory describes, in the schedulers' terms."""

from __future__ import annotations

from pathlib import Path

import typer

from fleetctl.cli.output import EXIT_USAGE, fail

app = typer.Typer(help="Topology: write a Slurm topology.conf from the inventory.", no_args_is_help=True)


@app.command("slurm-conf")
def slurm_conf(
    file: Path = typer.Argument(..., help="YAML inventory with a top-level 'nodes:' list"),
    root: str = typer.Option("spine", "--root", help="the switch that joins the islands when there are several"),
    out: Path | None = typer.Option(None, "--out", help="write here (replaced whole) instead of stdout"),
) -> None:
    """Print a topology.conf (TopologyPlugin=topology/tree) of the inventory's Slurm nodes:
    a line per leaf switch, per island over its leaves, and a root over the islands."""
    from fleetctl.inventory.names import scheduler_members
    from fleetctl.inventory.parse import load_inventory
    from fleetctl.inventory.topology import TopologyError, slurm_topology_conf

    specs = load_inventory(file)
    try:
        text = slurm_topology_conf([s for s in specs if "slurm" in scheduler_members(s.scheduler)], root)
    except TopologyError as exc:
        fail(f"{file}: {exc}", EXIT_USAGE)
    if out is None:
        typer.echo(text, nl=False)
        return
    # Whole or not at all: slurmctld may read the file while it is being written.
    partial = out.with_name(out.name + ".partial")
    partial.write_text(text)
    partial.replace(out)
    typer.echo(f"{out}: {text.count('SwitchName=')} switches")
