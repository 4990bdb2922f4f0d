"""`fleetctl sim ...`: a simulated fleet for the demo, the tests and the benchmarks."""

from __future__ import annotations

import time
import zlib
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import typer

from fleetctl.cli import context
from fleetctl.cli.output import EXIT_USAGE, OUTPUT_OPTION, OutputFormat, emit, fail, simple_table, within
from fleetctl.durations import when
from fleetctl.sim.faults import FAULT_KINDS
from fleetctl.text import plural

if TYPE_CHECKING:
    from fleetctl.db.models import Node

app = typer.Typer(help="Simulated nodes: write a fleet inventory, inject and clear faults.", no_args_is_help=True)


@app.command("fleet")
def fleet(
    nodes: int = typer.Option(32, "--nodes", callback=within(1, 100_000), help="number of nodes"),
    racks: int = typer.Option(4, "--racks", callback=within(1, 10_000), help="number of racks"),
    profile: str = typer.Option("h100-sxm", "--profile", help="GPU profile of every node"),
    seed: int = typer.Option(0, "--seed", callback=within(0, 2**63 - 1)),
    prefix: str = typer.Option("gpu", "--prefix", help="node name prefix"),
    islands: int = typer.Option(
        0,
        "--islands",
        callback=within(0, 10_000),
        help="split the racks over this many islands, each rack its own leaf switch (0: no topology)",
    ),
    output: OutputFormat = typer.Option(OutputFormat.yaml, "--output", "-o", help="yaml (an inventory) or json"),
) -> None:
    """Print an inventory of simulated nodes (pipe it to a file, then `fleetctl node import`)."""
    from fleetctl.sim.inventory import render_inventory

    try:
        entries = render_inventory(nodes, racks, profile, seed, prefix, islands)
    except (ValueError, KeyError) as exc:
        fail(str(exc).strip("'\""), EXIT_USAGE)
    emit({"nodes": entries}, output if output in (OutputFormat.json, OutputFormat.yaml) else OutputFormat.yaml)


def _sim_node(ctx: typer.Context, name: str) -> Node:
    from fleetctl.db.queries import get_node
    from fleetctl.sim import SIM_SCHEME

    node = get_node(context.engine(ctx), name)
    if node is None:
        fail(f"unknown node: {name}")
    if not node.address.startswith(SIM_SCHEME):
        fail(f"{name} is not a simulated node (address {node.address})", EXIT_USAGE)
    return node


# The fault kinds, one a line (click's \b keeps the lines as they are: a kind is never broken
# at its hyphen), as `kubectl explain` lists a field's values.
@app.command(
    "inject",
    help="Inject a fault into a simulated node; the worker's checks see it from then on.\n\n\b\n"
    "Fault kinds:\n" + "\n".join(f"  {kind}" for kind in FAULT_KINDS),
)
def inject(
    ctx: typer.Context,
    node: str,
    fault: str = typer.Argument(..., help="the fault's kind: one of those listed above"),
    after: str | None = typer.Option(None, "--after", help="appear after this delay (30s, 5m, ...)"),
    rate: float | None = typer.Option(
        None, "--rate", callback=within(0, 1_000_000), help="appear at a random time, this many per hour"
    ),
    gpu: int | None = typer.Option(None, "--gpu", callback=within(0, 1023), help="which GPU (or HCA) fails"),
) -> None:
    from fleetctl.durations import parse_duration
    from fleetctl.sim.faults import LEAF_FAULT_KINDS, SimFaultSpec
    from fleetctl.sim.node import fault_inapplicable
    from fleetctl.sim.profiles import sim_profile
    from fleetctl.sim.store import add_fault

    row = _sim_node(ctx, node)
    try:
        delay = parse_duration(after).total_seconds() if after else 0.0
        spec = SimFaultSpec(
            kind=fault,
            gpu=gpu,
            not_before=time.time() + delay,
            rate_per_hour=rate,
            seed=zlib.crc32(f"{node}/{fault}".encode()) & 0xFFFF,
        )
        why = fault_inapplicable(spec.kind, sim_profile(row.profile or ""))
        if spec.kind in LEAF_FAULT_KINDS and not row.switch:
            why = f"{node} is on no leaf switch (the inventory's `switch`)"
    except ValueError as exc:
        fail(str(exc), EXIT_USAGE)
    if why:
        fail(f"{node}: {fault} has nothing to act on: {why}", EXIT_USAGE)
    add_fault(context.engine(ctx), node, spec.kind, spec.gpu, spec.not_before, spec.rate_per_hour, spec.seed)
    appears = f"in {after}" if after else "now"
    typer.echo(f"{node}: {fault} injected ({appears}{f', {rate}/h' if rate else ''})")


@app.command("clear")
def clear(
    ctx: typer.Context, node: str, fault: str | None = typer.Argument(None, help="one fault kind; default all")
) -> None:
    """Clear one or all faults of a simulated node (a repaired node)."""
    from fleetctl.sim.store import clear_faults

    _sim_node(ctx, node)
    count = clear_faults(context.engine(ctx), node, fault)
    typer.echo(f"{node}: {plural(count, 'fault')} cleared")


@app.command("faults")
def faults(ctx: typer.Context, node: str, output: OutputFormat = OUTPUT_OPTION) -> None:
    """The faults injected into a simulated node."""
    from fleetctl.sim.store import faults_for

    _sim_node(ctx, node)
    rows = [
        {"kind": f.kind, "gpu": f.gpu, "not_before": f.not_before, "rate_per_hour": f.rate_per_hour}
        for f in faults_for(context.engine(ctx), node)
    ]
    emit(
        rows,
        output,
        lambda data, _w: simple_table(
            node,
            ["kind", "gpu", "appears", "rate/h"],
            [
                [r["kind"], r["gpu"], when(datetime.fromtimestamp(r["not_before"], UTC)), r["rate_per_hour"]]
                for r in data
            ],
        ),
        empty=f"No faults injected into {node}.",
    )
